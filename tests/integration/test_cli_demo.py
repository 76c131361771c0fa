"""`agentfeedback demo` (what `make run` runs) against the real stack: run twice, it reuses its agents."""
from __future__ import annotations

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2
from tests.helpers.cli import _cli


async def test_demo_twice_reuses_its_agents_and_flags_a_new_turn_each_time(stack):
    first = await _cli(stack, "demo", "--conversations", "2", "--turns", "2", sub="dora")
    second = await _cli(stack, "demo", "--conversations", "2", "--turns", "2", sub="dora")
    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output

    instances = (await stack.chat().ListInstances(chat_pb2.ListInstancesRequest(), metadata=stack.md("dora"))).instances
    assert sorted(i.display_name for i in instances) == ["ShareGPT replay 1", "ShareGPT replay 2"]
    # Each run replayed its turns into the same agents: 2 runs × 2 user turns × (user + reply).
    for inst in instances:
        msgs = (await stack.chat().ListMessages(chat_pb2.ListMessagesRequest(parent=inst.name),
                                                metadata=stack.md("dora"))).messages
        assert len(msgs) == 8
    # One report per run, each on that run's reply to the second user turn of the first conversation.
    reports = (await stack.feedback().ListFeedback(feedback_pb2.ListFeedbackRequest(),
                                                   metadata=stack.md("dora"))).feedback
    assert len(reports) == 2
    assert len({r.message for r in reports}) == 2
    assert {r.snapshot.turn_index for r in reports} == {1, 3}

    # Another owner running the demo gets agents of their own (request ids are per owner).
    other = await _cli(stack, "demo", "--conversations", "1", "--turns", "2", sub="erin")
    assert other.exit_code == 0, other.output
    theirs = (await stack.chat().ListInstances(chat_pb2.ListInstancesRequest(), metadata=stack.md("erin"))).instances
    assert [i.display_name for i in theirs] == ["ShareGPT replay 1"]
    assert theirs[0].name not in {i.name for i in instances}
