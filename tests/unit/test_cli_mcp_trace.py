"""The MCP server's `agent_trace` tool (services/cli/mcp_server.py) on a GetTrace answer the collector cut
to fit its answer budget: the agent reading the tool's result is told how many values were cut."""
from __future__ import annotations

import json
from types import SimpleNamespace

from agentfeedback.traces.v1 import traces_pb2

from services.cli.mcp_server import build_server


class _Traces:
    """TraceQueryService's GetTrace answering `trace`, whatever is asked."""

    def __init__(self, trace: traces_pb2.Trace):
        self.trace = trace

    async def GetTrace(self, request, metadata=None, timeout=None):  # noqa: N802 - the RPC's name
        return self.trace


def _clients(trace: traces_pb2.Trace) -> SimpleNamespace:
    """What build_server uses of `Clients`: the settings' timeout, the metadata and the traces stub."""
    stub = _Traces(trace)
    return SimpleNamespace(settings=SimpleNamespace(timeout_s=1.0), md=(), traces=lambda: stub)


async def _agent_trace(trace: traces_pb2.Trace) -> dict:
    result = await build_server(_clients(trace)).call_tool("agent_trace", {"trace_id": trace.trace_id})
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


async def test_agent_trace_says_how_many_values_the_collector_cut_and_what_each_span_dropped():
    span = traces_pb2.Span(trace_id="ab" * 16, span_id="r" * 16, name="chat.turn", resource_dropped_attributes_count=61)
    got = await _agent_trace(traces_pb2.Trace(trace_id="ab" * 16, truncated_value_count=360, spans=[span]))
    assert got["truncated_value_count"] == 360
    assert got["truncation_notice"].startswith("360 attribute values were cut to fit the answer (GetTrace answer budget)")
    assert got["spans"][0]["resource_dropped_attributes_count"] == 61


async def test_agent_trace_of_an_uncut_trace_says_zero_and_no_notice():
    got = await _agent_trace(traces_pb2.Trace(trace_id="cd" * 16, spans=[traces_pb2.Span(span_id="r" * 16, name="x")]))
    assert got["truncated_value_count"] == 0 and "truncation_notice" not in got
