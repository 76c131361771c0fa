"""The console's Trace tab (console/src/pages/trace.ts) in a real browser (Debian chromium through
Playwright) through Envoy, on a trace the collector cut to fit its GetTrace answer budget (5f77851,
traces.v1 Trace.truncated_value_count): one line above the waterfall, `p.trace-cut-notice`, says how
many attribute values were cut; a trace answered whole has no such line.

The collector's budget is at its minimum (64 KiB) and the turn gets one more span of 8 × 16 KiB
attribute values, exported over OTLP/gRPC into the turn's trace as an agent's SDK would.
Screenshot: test-artifacts/console-trace-cut.png.
"""
from __future__ import annotations

import pytest
from agentfeedback.traces.v1 import traces_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from playwright.async_api import expect

from tests.helpers.console import browser_page, make_turn, shot, sign_in
from tests.helpers.grpcweb import CONSOLE_DIST, gateway, static_site
from tests.helpers.otlp import large_span, request

pytestmark = pytest.mark.browser


async def test_trace_tab_says_how_many_values_the_collector_cut(cut_stack, tmp_path):
    stack = cut_stack
    inst, turn = await make_turn(stack)
    whole = await stack.wait_trace(turn.trace_id, min_spans=3)
    assert whole.truncated_value_count == 0
    with static_site(CONSOLE_DIST) as site:
        async with gateway(stack, tmp_path / "envoy", origins=(site,)) as envoy:
            async with browser_page(1280, 900) as page:
                await sign_in(page, site, envoy.url, stack.token())
                await page.goto(f"{site}/#/agents/{inst.split('/')[-1]}/trace?trace={turn.trace_id}")
                await expect(page.locator(".wf-span.tool-call")).to_be_visible()
                await expect(page.locator(".trace-cut-notice")).to_have_count(0)  # answered whole: no line

                root = next(s for s in whole.spans if not s.parent_span_id)
                otlp = trace_service_pb2_grpc.TraceServiceStub(stack.channel("otlp_grpc"))
                await otlp.Export(request([large_span(root)], service="agent"))
                cut = await stack.traces().GetTrace(traces_pb2.GetTraceRequest(trace_id=turn.trace_id),
                                                    metadata=stack.md())
                assert cut.truncated_value_count > 0

                await page.reload()
                notice = page.locator(".trace-view p.trace-cut-notice[role=status]")
                await expect(notice).to_have_count(1)
                await expect(notice).to_have_text(
                    f"{cut.truncated_value_count} attribute values were cut to fit the answer (GetTrace answer "
                    "budget); each cut value ends with …(+N chars)")
                await expect(page.locator(".wf-span[data-name='agent.retrieve']")).to_be_visible()
                await shot(page, "console-trace-cut")
