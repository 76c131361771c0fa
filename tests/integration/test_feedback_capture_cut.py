"""A report's frozen evidence says when the collector had cut the trace it was frozen from: the capture
worker (services/feedback/capture.py) reads GetTrace, whose answer budget (5f77851) cuts the largest
attribute values and counts them (traces.v1 Trace.truncated_value_count); the report's TraceSnapshot
keeps that count (feedback.v1 TraceSnapshot.truncated_value_count). Real stack (tests/stack.py) on
PostgreSQL, the collector's answer budget at its minimum (64 KiB) so one turn with a span of 8 × 16 KiB
attribute values is cut."""
from __future__ import annotations

from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.traces.v1 import traces_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from tests.helpers.cli import _cli
from tests.helpers.feedback import flag, new_instance, send, wait_state
from tests.conftest import CUT_TRACE_BUDGET_BYTES as BUDGET
from tests.helpers.otlp import large_span, request


async def test_evidence_frozen_from_a_cut_trace_says_how_many_values_were_cut(cut_stack):
    stack = cut_stack
    inst = await new_instance(stack)
    plain = await send(stack, inst, "list your tools please")
    turn = await send(stack, inst, "and which of them can search?")
    await stack.wait_trace(plain.trace_id, min_spans=3)
    before = await stack.wait_trace(turn.trace_id, min_spans=3)
    root = next(s for s in before.spans if not s.parent_span_id)
    otlp = trace_service_pb2_grpc.TraceServiceStub(stack.channel("otlp_grpc"))
    await otlp.Export(request([large_span(root)], service="agent"))
    answer = await stack.traces().GetTrace(traces_pb2.GetTraceRequest(trace_id=turn.trace_id), metadata=stack.md())
    assert answer.truncated_value_count > 0 and answer.ByteSize() <= BUDGET  # the collector cut this turn

    cut = await wait_state(stack, (await flag(stack, turn.reply.name, "it searched nothing")).name,
                           pb.TRACE_SNAPSHOT_STATE_CAPTURED)
    assert cut.trace_snapshot.truncated_value_count == answer.truncated_value_count
    assert "agent.retrieve" in {s.name for s in cut.trace_snapshot.spans}
    # A turn the collector answered whole: its evidence says nothing was cut.
    whole = await wait_state(stack, (await flag(stack, plain.reply.name, "fine, but slow")).name,
                             pb.TRACE_SNAPSHOT_STATE_CAPTURED)
    assert whole.trace_snapshot.tool_calls and whole.trace_snapshot.truncated_value_count == 0


async def test_feedback_show_and_the_filed_ticket_say_the_evidence_was_frozen_from_a_cut_answer(cut_stack):
    """`agentfeedback feedback show ID` (its default Markdown, the ticket draft) and the ticket
    FileFeedback files carry the line `--plain` prints: "frozen from a cut answer: N attribute values
    were cut …" (before, only `--plain` said it); a report frozen from a whole answer says nothing of it."""
    stack = cut_stack
    inst = await new_instance(stack)
    plain = await send(stack, inst, "list your tools please")
    turn = await send(stack, inst, "and which of them can search?")
    await stack.wait_trace(plain.trace_id, min_spans=3)
    root = next(s for s in (await stack.wait_trace(turn.trace_id, min_spans=3)).spans if not s.parent_span_id)
    otlp = trace_service_pb2_grpc.TraceServiceStub(stack.channel("otlp_grpc"))
    await otlp.Export(request([large_span(root)], service="agent"))
    cut = await wait_state(stack, (await flag(stack, turn.reply.name, "it searched nothing")).name,
                           pb.TRACE_SNAPSHOT_STATE_CAPTURED)
    n = cut.trace_snapshot.truncated_value_count
    assert n > 1
    line = (f"frozen from a cut answer: {n} attribute values were cut to fit the answer (GetTrace answer budget); "
            "each cut value ends with …(+N chars)")
    whole = await wait_state(stack, (await flag(stack, plain.reply.name, "fine, but slow")).name,
                             pb.TRACE_SNAPSHOT_STATE_CAPTURED)

    for report, said in ((cut, True), (whole, False)):
        shown = await _cli(stack, "feedback", "show", report.name.removeprefix("feedback/"))
        assert shown.exit_code == 0, shown.output
        assert shown.output.startswith("# [feedback]")  # the Markdown ticket draft
        assert (shown.output.splitlines().count(line) == 1) is said, shown.output
        assert ("frozen from a cut answer" in shown.output) is said
        filed = await stack.feedback().FileFeedback(pb.FileFeedbackRequest(name=report.name), metadata=stack.md())
        with open(filed.issue_url.removeprefix("file://"), encoding="utf-8") as f:
            ticket = f.read()
        assert (ticket.splitlines().count(line) == 1) is said, ticket
        assert ("frozen from a cut answer" in ticket) is said
