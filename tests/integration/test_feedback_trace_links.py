"""The SREs' trace view from every report and ticket (issue 24): with AGENTFEEDBACK_FEEDBACK_TRACE_URL_TEMPLATE
set, each report carries `trace_url` (the template with its turn's trace id) and a filed ticket links it;
without it, neither does; a template without `{trace_id}` stops the service at start."""
from __future__ import annotations

import pytest
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from pydantic import ValidationError

from services.feedback.settings import FeedbackSettings
from tests.helpers.feedback import flag, new_instance, rid, send
from tests.stack import start_stack

TEMPLATE = "https://jaeger.example/trace/{trace_id}?uiFind=feedback"


async def test_reports_and_tickets_link_the_turns_trace_view(database_url, tmp_path):
    stack = await start_stack(database_url, tmp_path, feedback={"trace_url_template": TEMPLATE})
    try:
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        report = await flag(stack, t.reply.name, "wrong")
        want = f"https://jaeger.example/trace/{t.trace_id}?uiFind=feedback"
        assert report.trace_url == want
        filed = await stack.feedback().FileFeedback(pb.FileFeedbackRequest(name=report.name, request_id=rid()),
                                                    metadata=stack.md())
        assert filed.trace_url == want
        ticket = (tmp_path / "tickets" / f"{report.name.split('/')[1]}.md").read_text()
        assert want in ticket
    finally:
        await stack.stop()


async def test_without_a_template_there_is_no_link(stack):
    inst = await new_instance(stack)
    t = await send(stack, inst, "hello")
    assert (await flag(stack, t.reply.name, "wrong")).trace_url == ""


@pytest.mark.parametrize("bad", ["https://jaeger.example/trace/", "ftp://x/{trace_id}", "https://a b/{trace_id}"])
def test_a_template_without_its_place_for_the_trace_id_is_refused_at_start(bad):
    with pytest.raises(ValidationError):
        FeedbackSettings(trace_url_template=bad)
