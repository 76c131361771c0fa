"""MCP server with triage tools for an agent or a person (Python `mcp` SDK; stdio or streamable HTTP).

Entry point `agentfeedback-mcp [--transport stdio|streamable-http] [--host H --port P]`.
It authenticates to the services with the owner's bearer token (`AGENTFEEDBACK_CLIENT_TOKEN`, or
a dev token for `AGENTFEEDBACK_CLIENT_SUB` minted from the embedded secret), so everything stays
owner-scoped: the services check ownership where the data lives. A tool whose RPC fails returns
an MCP tool error whose text starts with the gRPC status name (e.g. `PERMISSION_DENIED: token
lacks scope 'feedback:triage'`).

Tools:
- list_feedback(instance?, status?, limit=20, page_token?) → {feedback: [...rows with trace_id and message...], next_page_token}
- get_feedback(feedback_id) → the whole row: words, snapshots, voice context, frozen tool calls
- agent_trace(trace_id) → {trace_id, spans: [...], tool_calls: [...], truncated_value_count} from the collector
- instance_messages(instance, around_trace_id?, window=2) → the conversation around a turn
- resolve_feedback(feedback_id, status, issue_url?) → the updated row (needs `feedback:triage`)
"""
from __future__ import annotations

import argparse
import sys
import uuid
from typing import Any

import grpc
from google.protobuf import field_mask_pb2
from google.protobuf.json_format import MessageToDict
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2
from agentfeedback.traces.v1 import traces_pb2
from services.cli.client import Clients, ClientSettings
from services.common import toolcalls
from services.common.errors import InvalidArgument
from services.common.ids import parse_trace_id
from services.common.settings import load_settings
from services.common.trace_cut import cut_notice

_STATUSES = {"open", "triaged", "filed", "dismissed"}


def _d(msg) -> dict[str, Any]:
    return MessageToDict(msg, preserving_proto_field_name=True)


def _fb_name(value: str) -> str:
    return value if value.startswith("feedback/") else f"feedback/{value}"


def _row(fb: feedback_pb2.Feedback) -> dict[str, Any]:
    """A list row: ids first (trace id and message name are what a triager jumps to)."""
    return {
        "name": fb.name,
        "trace_id": fb.snapshot.trace_id or fb.trace_id,
        "message": fb.message,
        "instance": fb.instance,
        "status": feedback_pb2.Status.Name(fb.status),
        "sentiment": feedback_pb2.Sentiment.Name(fb.sentiment),
        "category": feedback_pb2.Category.Name(fb.category),
        "author": feedback_pb2.Author.Name(fb.author),
        "create_time": fb.create_time.ToJsonString(),
        "body": fb.body,
        "target_text": fb.snapshot.target_text[:300],
        "trace_snapshot_state": feedback_pb2.TraceSnapshotState.Name(fb.trace_snapshot.state),
    }


def tool_calls_of(trace: traces_pb2.Trace) -> list[dict[str, Any]]:
    """The tool calls of a trace (`services.common.toolcalls`): name, call id, status, duration (ms),
    parent span."""
    out = []
    for s in trace.spans:
        attrs = _d(s.attributes) if s.HasField("attributes") else {}
        if not toolcalls.is_tool_call(s.name, attrs):
            continue
        out.append({
            "name": toolcalls.tool_name(s.name, attrs),
            "call_id": toolcalls.call_id(attrs),
            "span_id": s.span_id,
            "parent_span_id": s.parent_span_id,
            "status": traces_pb2.StatusCode.Name(s.status_code),
            "duration_ms": (s.end_time_unix_nano - s.start_time_unix_nano) / 1e6,
            "events": [e.name for e in s.events],
        })
    return out


def build_server(clients: Clients) -> MCPServer:
    """The MCP server bound to `clients` (targets + the owner's token)."""
    mcp = MCPServer(name="agent-feedback", instructions=(
        "Triage tools for owner feedback on AI agent turns. Start with list_feedback, open one with "
        "get_feedback, inspect the turn with agent_trace(trace_id) and instance_messages, then resolve_feedback."))
    c = clients
    timeout = c.settings.timeout_s

    async def call(coro):
        try:
            return await coro
        except grpc.aio.AioRpcError as e:
            raise ToolError(f"{e.code().name}: {e.details()}") from None

    @mcp.tool()
    async def list_feedback(instance: str = "", status: str = "", limit: int = 20, page_token: str = "") -> dict:
        """Feedback rows, newest first, with their trace id and message name. status: open|triaged|filed|dismissed.
        limit: 1..1000 rows (INVALID_ARGUMENT otherwise)."""
        if not 1 <= limit <= 1000:
            raise ToolError("INVALID_ARGUMENT: limit: must be between 1 and 1000")
        req = feedback_pb2.ListFeedbackRequest(instance=instance, page_size=limit, page_token=page_token)
        if status:
            if status.lower() not in _STATUSES:
                raise ToolError(f"INVALID_ARGUMENT: status must be one of {sorted(_STATUSES)}")
            req.status = feedback_pb2.Status.Value(f"STATUS_{status.upper()}")
        resp = await call(c.feedback().ListFeedback(req, metadata=c.md, timeout=timeout))
        return {"feedback": [_row(f) for f in resp.feedback], "next_page_token": resp.next_page_token}

    @mcp.tool()
    async def get_feedback(feedback_id: str) -> dict:
        """The whole evidence of one row: the owner's words, snapshots, voice context, frozen tool calls."""
        fb = await call(c.feedback().GetFeedback(feedback_pb2.GetFeedbackRequest(name=_fb_name(feedback_id)),
                                                 metadata=c.md, timeout=timeout))
        return _d(fb)

    @mcp.tool()
    async def agent_trace(trace_id: str) -> dict:
        """The turn's spans and tool calls from the trace collector (14-day window). truncated_value_count:
        attribute values the collector cut to fit its answer budget (each ends with `…(+N chars)`; 0:
        all as stored), with `truncation_notice` saying so when > 0. A span's *dropped_*_count fields
        (resource_dropped_attributes_count included) count what it lost before it was stored."""
        t = await call(c.traces().GetTrace(traces_pb2.GetTraceRequest(trace_id=trace_id), metadata=c.md, timeout=timeout))
        out = {"trace_id": t.trace_id, "spans": [_d(s) for s in t.spans], "tool_calls": tool_calls_of(t),
               "truncated_value_count": t.truncated_value_count}
        if notice := cut_notice(t.truncated_value_count):
            out["truncation_notice"] = notice
        return out

    @mcp.tool()
    async def instance_messages(instance: str, around_trace_id: str = "", window: int = 2) -> dict:
        """Messages of an instance; with around_trace_id, only the turns within `window` turns of that turn.
        INVALID_ARGUMENT when around_trace_id is not a W3C trace id or window is negative; NOT_FOUND when
        no message of the instance has that trace id."""
        if window < 0:
            raise ToolError("INVALID_ARGUMENT: window: must not be negative")
        if around_trace_id:
            try:
                around_trace_id = parse_trace_id(around_trace_id, "around_trace_id")
            except InvalidArgument as e:
                raise ToolError(f"INVALID_ARGUMENT: {e}") from None
        stub = c.chat()
        msgs: list[chat_pb2.Message] = []
        token = ""
        while True:
            resp = await call(stub.ListMessages(chat_pb2.ListMessagesRequest(parent=instance, page_size=1000,
                                                                             page_token=token),
                                                metadata=c.md, timeout=timeout))
            msgs.extend(resp.messages)
            token = resp.next_page_token
            if not token:
                break
        if around_trace_id:
            turn = next((m.turn_index for m in msgs if m.trace_id == around_trace_id), None)
            if turn is None:
                raise ToolError(f"NOT_FOUND: no message of {instance} has trace id {around_trace_id}")
            msgs = [m for m in msgs if abs(m.turn_index - turn) <= window]
        return {"instance": instance, "messages": [_d(m) for m in msgs]}

    @mcp.tool()
    async def resolve_feedback(feedback_id: str, status: str, issue_url: str = "") -> dict:
        """Set a row's triage status (open|triaged|filed|dismissed) and issue URL. Needs scope feedback:triage."""
        if status.lower() not in _STATUSES:
            raise ToolError(f"INVALID_ARGUMENT: status must be one of {sorted(_STATUSES)}")
        stub = c.feedback()
        name = _fb_name(feedback_id)
        cur = await call(stub.GetFeedback(feedback_pb2.GetFeedbackRequest(name=name), metadata=c.md, timeout=timeout))
        upd = feedback_pb2.Feedback(name=name, etag=cur.etag, status=feedback_pb2.Status.Value(f"STATUS_{status.upper()}"))
        paths = ["status"]
        if issue_url:
            upd.issue_url = issue_url
            paths.append("issue_url")
        out = await call(stub.UpdateFeedback(
            feedback_pb2.UpdateFeedbackRequest(feedback=upd, update_mask=field_mask_pb2.FieldMask(paths=paths),
                                               request_id=str(uuid.uuid4())),
            metadata=c.tool_md("resolve_feedback"), timeout=timeout))
        return _row(out) | {"issue_url": out.issue_url}

    return mcp


def main() -> None:
    ap = argparse.ArgumentParser(prog="agentfeedback-mcp", description=__doc__.splitlines()[0])
    ap.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8765)
    args = ap.parse_args()
    server = build_server(Clients.from_settings(load_settings(ClientSettings)))  # a bad variable: one message
    if args.transport == "stdio":
        server.run("stdio")
    else:
        if args.host not in ("127.0.0.1", "::1", "localhost"):
            # Over HTTP the MCP clients present no credentials: every call acts with this server's token.
            print(f"agentfeedback-mcp: WARNING: listening on {args.host}: anyone who can reach it acts with this "
                  "server's token (AGENTFEEDBACK_CLIENT_TOKEN / the dev token); keep it on loopback or behind an "
                  "authenticating proxy.", file=sys.stderr)
        server.run("streamable-http", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
