"""The audit trail and ticket privacy over real gRPC, the real chat gateway and PostgreSQL (issue 13):
who changed or read a report, never its words; a ticket carries nothing a client chose."""
from __future__ import annotations

import uuid

import grpc
import pytest
from google.protobuf import field_mask_pb2
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb

from services.common.auth import SCOPE_FEEDBACK_ADMIN, SCOPE_FEEDBACK_READ, SCOPE_FEEDBACK_TOOL, SCOPE_FEEDBACK_TRIAGE
from services.common.errors import error_info
from tests.stack import Stack, all_pages

BODY = "the sum it gave me is wrong and I am annoyed"


def rid() -> str:
    return str(uuid.uuid4())


async def reported(stack: Stack, sub: str = "alice", instance_id: str = "") -> pb.Feedback:
    inst = await stack.chat().CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="Agent", agent="reference"), instance_id=instance_id),
        metadata=stack.md(sub))
    t = await stack.chat().SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content="what is 2+2?"),
                                       metadata=stack.md(sub))
    return await stack.feedback().CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(message=t.reply.name, body=BODY, category=pb.CATEGORY_BROKEN_RESPONSE),
        request_id=rid()), metadata=stack.md(sub))


async def update(stack: Stack, fb: pb.Feedback, sub: str = "alice", **fields) -> pb.Feedback:
    return await stack.feedback().UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, **fields), update_mask=field_mask_pb2.FieldMask(paths=list(fields)),
        request_id=rid()), metadata=stack.md(sub))


async def audit(stack: Stack, sub: str, scopes=None, **filters) -> list[pb.AuditRecord]:
    md = stack.md(sub) if scopes is None else stack.md(sub, scopes)
    return await all_pages(stack.feedback().ListAuditRecords, pb.ListAuditRecordsRequest(page_size=2, **filters),
                           "audit_records", md)


async def test_every_triage_mutation_is_recorded_with_who_when_and_what_changed_never_the_body(stack: Stack):
    fb = await reported(stack)
    await update(stack, fb, status=pb.STATUS_TRIAGED)
    await update(stack, fb, status=pb.STATUS_TRIAGED)  # a no-op records nothing
    filed = await stack.feedback().FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md())
    await stack.feedback().DeleteFeedback(pb.DeleteFeedbackRequest(name=fb.name, request_id=rid()),
                                          metadata=stack.md())
    records = await audit(stack, "ops", (SCOPE_FEEDBACK_ADMIN,), feedback=fb.name)
    assert [r.action for r in records] == [pb.AUDIT_ACTION_DELETE_FEEDBACK, pb.AUDIT_ACTION_FILE_FEEDBACK,
                                           pb.AUDIT_ACTION_UPDATE_FEEDBACK]  # newest first
    assert {(r.actor, r.owner, r.feedback) for r in records} == {("alice", "alice", fb.name)}
    upd, fil = records[2], records[1]
    assert [(c.field, c.old_value, c.new_value) for c in upd.changes] == [("status", "STATUS_OPEN", "STATUS_TRIAGED")]
    assert ("issue_url", "", filed.issue_url) in [(c.field, c.old_value, c.new_value) for c in fil.changes]
    assert records[0].method.endswith("/DeleteFeedback") and records[0].time.seconds > 0
    assert BODY not in str(records) and "annoyed" not in str(records)


async def test_mcp_resolve_feedback_is_recorded_as_such(stack: Stack):
    from services.cli.client import Clients, ClientSettings  # noqa: PLC0415
    from services.cli.mcp_server import build_server  # noqa: PLC0415

    fb = await reported(stack)
    clients = Clients(settings=ClientSettings(chat_target=f"127.0.0.1:{stack.ports['chat']}",
                                              feedback_target=f"127.0.0.1:{stack.ports['feedback']}",
                                              traces_target=f"127.0.0.1:{stack.ports['query']}",
                                              tool_token=stack.token("svc:mcp", (SCOPE_FEEDBACK_TOOL,))),
                      token=stack.token())
    try:
        await build_server(clients).call_tool("resolve_feedback", {"feedback_id": fb.name, "status": "dismissed"})
    finally:
        for ch in clients.channels:
            await ch.close()
    (rec,) = await audit(stack, "alice", feedback=fb.name)
    assert rec.action == pb.AUDIT_ACTION_RESOLVE_FEEDBACK
    assert [(c.field, c.new_value) for c in rec.changes] == [("status", "STATUS_DISMISSED")]


async def test_a_triage_client_setting_the_tool_header_is_recorded_as_an_update_not_the_mcp_tool(stack: Stack):
    """Issue 25: any triage client could set `x-agentfeedback-tool: resolve_feedback` to be recorded as
    the MCP tool; the record follows the caller's credentials (a header alone, or an actor token without
    scope `feedback:tool`, is an UPDATE)."""
    for actor in ((), (("x-agentfeedback-actor", f"Bearer {stack.token('mallory')}"),)):
        fb = await reported(stack)
        upd = pb.UpdateFeedbackRequest(feedback=pb.Feedback(name=fb.name, status=pb.STATUS_DISMISSED),
                                       update_mask=field_mask_pb2.FieldMask(paths=["status"]))
        await stack.feedback().UpdateFeedback(upd, metadata=(*stack.md(), *actor,
                                                             ("x-agentfeedback-tool", "resolve_feedback")))
        (rec,) = await audit(stack, "alice", feedback=fb.name)
        assert rec.action == pb.AUDIT_ACTION_UPDATE_FEEDBACK, actor


async def test_an_admin_reading_another_owners_words_is_recorded_and_owners_see_only_their_own(stack: Stack):
    a, b = await reported(stack, "alice"), await reported(stack, "bob")
    await update(stack, a, status=pb.STATUS_TRIAGED)
    await update(stack, b, "bob", status=pb.STATUS_DISMISSED)
    view = await stack.feedback().GetTurnFeedback(pb.GetTurnFeedbackRequest(
        conversation=a.instance, turn_index=a.snapshot.turn_index, user="alice"), metadata=stack.md("ops"))
    assert [f.body for f in view.feedback] == [BODY]
    reads = [r for r in await audit(stack, "ops", (SCOPE_FEEDBACK_ADMIN,)) if r.action == pb.AUDIT_ACTION_READ_BODY]
    assert [(r.actor, r.owner, r.feedback, r.method) for r in reads] == [
        ("ops", "alice", a.name, "/agentfeedback.feedback.v1.FeedbackService/GetTurnFeedback")]
    assert list(reads[0].changes) == [] and BODY not in str(reads)
    # An admin reading their own report is not "another owner's body".
    mine = await stack.feedback().GetTurnFeedback(pb.GetTurnFeedbackRequest(
        conversation=b.instance, turn_index=b.snapshot.turn_index, user="bob"), metadata=stack.md("bob"))
    assert len(mine.feedback) == 1
    assert not [r for r in await audit(stack, "ops", (SCOPE_FEEDBACK_ADMIN,))
                if r.action == pb.AUDIT_ACTION_READ_BODY and r.actor == "bob"]
    # Owners list the records about their own reports (including who read them), nothing else.
    alice = await audit(stack, "alice", (SCOPE_FEEDBACK_READ,))
    assert {r.feedback for r in alice} == {a.name}
    assert {r.action for r in alice} == {pb.AUDIT_ACTION_UPDATE_FEEDBACK, pb.AUDIT_ACTION_READ_BODY}
    assert {r.feedback for r in await audit(stack, "bob", (SCOPE_FEEDBACK_READ,))} == {b.name}
    everyone = await audit(stack, "ops", (SCOPE_FEEDBACK_ADMIN,))
    assert {r.feedback for r in everyone} == {a.name, b.name}
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await audit(stack, "ops", (SCOPE_FEEDBACK_TRIAGE,))
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_a_ticket_carries_no_client_chosen_text_and_its_labels_come_from_settings(stack: Stack):
    fb = await reported(stack)
    filed = await stack.feedback().FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md())
    ticket = open(filed.issue_url.removeprefix("file://")).read()
    assert fb.name in ticket and fb.snapshot.trace_id in ticket and fb.instance in ticket
    assert "reference" not in ticket  # the agent slug a client chose at CreateInstance
    assert BODY not in ticket and fb.snapshot.target_text[:40] not in ticket
    assert "labels: feedback" in ticket  # FEEDBACK_TRACKER_LABELS default


async def test_a_report_on_a_client_named_instance_is_not_filed(stack: Stack):
    fb = await reported(stack, instance_id="my-secret-project")
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stack.feedback().FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md())
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    info = error_info(e.value)
    assert info.reason == "CLIENT_CHOSEN_ID" and info.metadata["field"] == "feedback.instance"
    assert "my-secret-project" not in e.value.details()
    got = await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=fb.name), metadata=stack.md())
    assert got.status == pb.STATUS_OPEN and got.issue_url == ""


async def test_a_suspected_defect_becomes_a_report_on_that_turn_in_one_call(stack: Stack):
    inst = await stack.chat().CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="Agent", agent="reference")), metadata=stack.md())
    t = await stack.chat().SendMessage(chat_pb2.SendMessageRequest(
        instance=inst.name, content="how many agents do you have in total? Give me their names."),
        metadata=stack.md())
    (d,) = (await stack.chat().ListSuspectedDefects(chat_pb2.ListSuspectedDefectsRequest(parent=inst.name),
                                                    metadata=stack.md())).suspected_defects
    request_id = rid()
    fb = await stack.feedback().ReportSuspectedDefect(
        pb.ReportSuspectedDefectRequest(suspected_defect=d.name, request_id=request_id), metadata=stack.md())
    assert fb.author == pb.AUTHOR_PLATFORM and fb.sentiment == pb.SENTIMENT_BAD
    assert fb.category == pb.CATEGORY_TOOL_FAILURE and fb.trace_id == t.trace_id
    assert fb.snapshot.trace_id == t.trace_id and fb.snapshot.target_text == t.reply.content[:2000]
    assert "chat.truncated" in fb.body and "list_subordinates" in fb.body
    again = await stack.feedback().ReportSuspectedDefect(
        pb.ReportSuspectedDefectRequest(suspected_defect=d.name, request_id=request_id), metadata=stack.md())
    assert again.name == fb.name
    # Owner-scoped: Bob cannot turn Alice's defect into a report.
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stack.feedback().ReportSuspectedDefect(
            pb.ReportSuspectedDefectRequest(suspected_defect=d.name, request_id=rid()), metadata=stack.md("bob"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    # What people said stays apart: the report is a report, the defect list is unchanged.
    assert len((await stack.chat().ListSuspectedDefects(chat_pb2.ListSuspectedDefectsRequest(parent=inst.name),
                                                        metadata=stack.md())).suspected_defects) == 1
