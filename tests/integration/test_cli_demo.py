"""`agentfeedback demo` (what `make run` runs) against the real stack: run twice, it reuses its agents."""
from __future__ import annotations

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2
from tests.helpers.cli import _cli


async def test_demo_twice_reuses_its_agents_and_replays_nothing_twice(stack):
    first = await _cli(stack, "demo", "--conversations", "2", "--turns", "2", sub="dora")
    second = await _cli(stack, "demo", "--conversations", "2", "--turns", "2", sub="dora")
    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output

    instances = (await stack.chat().ListInstances(chat_pb2.ListInstancesRequest(), metadata=stack.md("dora"))).instances
    assert sorted(i.display_name for i in instances) == ["ShareGPT replay 1", "ShareGPT replay 2"]
    # The second run found the first run's turns: 2 user turns × (user + reply), no question twice.
    for inst in instances:
        msgs = (await stack.chat().ListMessages(chat_pb2.ListMessagesRequest(parent=inst.name),
                                                metadata=stack.md("dora"))).messages
        assert len(msgs) == 4
        users = [m.content for m in msgs if m.role == chat_pb2.ROLE_USER]
        assert len(set(users)) == 2
    assert "(from an earlier run)" in second.output and "(from an earlier run)" not in first.output
    # One report, on the reply to the second user turn of the first conversation; the rerun shows it again.
    reports = (await stack.feedback().ListFeedback(feedback_pb2.ListFeedbackRequest(),
                                                   metadata=stack.md("dora"))).feedback
    assert len(reports) == 1 and reports[0].snapshot.turn_index == 1
    assert reports[0].name.removeprefix("feedback/") in second.output

    # Another owner running the demo gets agents of their own (request ids are per owner).
    other = await _cli(stack, "demo", "--conversations", "1", "--turns", "2", sub="erin")
    assert other.exit_code == 0, other.output
    theirs = (await stack.chat().ListInstances(chat_pb2.ListInstancesRequest(), metadata=stack.md("erin"))).instances
    assert [i.display_name for i in theirs] == ["ShareGPT replay 1"]
    assert theirs[0].name not in {i.name for i in instances}


def test_each_demo_conversation_starts_at_its_beginning():
    """ShareGPT V3 splits a long conversation into records `<id>_0`, `<id>_1`, …: the demo replays only
    first records, so no agent starts mid-conversation (replay 3 once continued replay 2)."""
    from services.chat.agent.replay import load_sharegpt  # noqa: PLC0415
    from services.cli.demo import demo_turns  # noqa: PLC0415

    firsts = {conv[0].human: conv[0].conversation_id for conv in reversed(load_sharegpt(limit=50).conversations)}
    picked = demo_turns(3, 3)
    assert len(picked) == 3
    assert [firsts[turns[0]].rpartition("_")[2] for turns in picked] == ["0", "0", "0"]
    assert len({firsts[turns[0]].rpartition("_")[0] for turns in picked}) == 3


async def test_demo_after_its_report_was_deleted_flags_the_reply_again_and_finishes(stack):
    """The README's `agentfeedback feedback delete ID --yes` on the demo's report, then `make run` again:
    the demo's fixed flag request id answers NOT_FOUND (FEEDBACK_DELETED) for 24 h, which stopped the
    whole stack with a traceback. Now the demo flags the reply again as a new report under a request id
    derived from the deleted report's (so a further rerun reuses it), says so in one line and finishes;
    deleted again, it flags again."""
    args = ("demo", "--conversations", "1", "--turns", "2")
    first = await _cli(stack, *args, sub="dora")
    assert first.exit_code == 0, first.output
    md = stack.md("dora")

    async def reports():
        return list((await stack.feedback().ListFeedback(feedback_pb2.ListFeedbackRequest(), metadata=md)).feedback)

    [old] = await reports()
    old_id = old.name.removeprefix("feedback/")
    deleted = await _cli(stack, "feedback", "delete", old_id, "--yes", sub="dora")
    assert deleted.exit_code == 0, deleted.output

    second = await _cli(stack, *args, sub="dora")
    assert second.exit_code == 0, second.output
    [new] = await reports()
    assert new.name != old.name and new.snapshot.turn_index == 1 and new.message == old.message
    said = [line for line in second.output.splitlines() if old.name in line]
    assert len(said) == 1 and "deleted" in said[0] and new.name in said[0], second.output
    assert f"feedback show {new.name.removeprefix('feedback/')}" in second.output

    third = await _cli(stack, *args, sub="dora")  # a further rerun shows the new report, flags nothing
    assert third.exit_code == 0, third.output
    assert [f.name for f in await reports()] == [new.name] and "deleted" not in third.output

    # Deleted again: flagged again (the chain of derived request ids stays deterministic).
    assert (await _cli(stack, "feedback", "delete", new.name.removeprefix("feedback/"), "--yes",
                       sub="dora")).exit_code == 0
    fourth = await _cli(stack, *args, sub="dora")
    assert fourth.exit_code == 0, fourth.output
    [newest] = await reports()
    assert newest.name not in (old.name, new.name) and newest.message == old.message
