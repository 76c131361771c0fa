"""Retries complete after the gateway died (issue 16): a turn left RUNNING by a gateway that stored the
user message and then died is run again by a retry with its request_id once the attempt is older than the
agent deadline cap + the stale margin; the dead attempt, should it ever finish, stores no second reply.
The dead gateway is played by the real repository writing step 2 of a turn and stopping there (the fault
suite kills a real process: tests/fuzz/test_faults.py)."""
from __future__ import annotations

import asyncio
import time
import uuid

import grpc
import pytest
from agentfeedback.chat.v1 import chat_pb2

from services.chat.domain import Channel, Message, Role, TurnInput, time_from_ns
from services.chat.repository import Repository
from services.common.db import create_pool
from services.common.errors import error_info
from services.common.ids import new_id, request_fingerprint
from tests.stack import start_stack


async def test_a_turn_orphaned_running_is_run_again_by_its_retry_and_the_dead_attempt_stores_nothing(
        database_url, tmp_path):
    s = await start_stack(database_url, tmp_path, chat={"agent_timeout_cap_s": 1.0, "turn_stale_margin_s": 0.5})
    pool = await create_pool(database_url, "chat")
    try:
        chat, repo = s.chat(), Repository(pool)
        inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name="o", agent="reference")), metadata=s.md())
        req = chat_pb2.SendMessageRequest(instance=inst.name, content="still there?", request_id=str(uuid.uuid4()))
        iid = inst.name.removeprefix("instances/")
        dead_trace = uuid.uuid4().hex
        user, _ = await repo.begin_turn("alice", TurnInput(
            iid, req.content, Channel.TEXT, "", "", uuid.UUID(req.request_id), request_fingerprint(req)),
            dead_trace, new_id(), time_from_ns(time.time_ns()), 20)
        await asyncio.sleep(1.6)  # past 1.0 + 0.5 s: nothing can still be running this attempt
        t0 = time.monotonic()
        answers = await asyncio.gather(*(chat.SendMessage(req, metadata=s.md(), timeout=10) for _ in range(3)))
        assert time.monotonic() - t0 < 5  # was: each waited, then DEADLINE_EXCEEDED "still running", forever
        assert {a.user_message.name for a in answers} == {user.name}  # the stored user message, reused
        assert len({a.reply.name for a in answers}) == 1 and answers[0].reply.content  # the agent ran once
        assert answers[0].trace_id != dead_trace

        late = Message(instance_id=iid, id=new_id(), role=Role.ASSISTANT, content="too late", trace_id=dead_trace,
                       turn_index=user.turn_index, create_time=time_from_ns(time.time_ns()), agent=user.agent)
        assert await repo.finish_turn("alice", late) is None
        msgs = (await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=inst.name), metadata=s.md())).messages
        assert [(m.role, m.content) for m in msgs] == [(chat_pb2.ROLE_USER, "still there?"),
                                                       (chat_pb2.ROLE_ASSISTANT, answers[0].reply.content)]
    finally:
        await pool.close()
        await s.stop()


async def test_a_retry_of_a_turn_still_running_in_a_live_gateway_says_so_and_replays_its_reply_later(
        database_url, tmp_path):
    """The first SendMessage is still in the agent (its gateway alive): a retry with its request_id waits
    within its own deadline, then answers DEADLINE_EXCEEDED TURN_IN_PROGRESS naming the turn, not the
    agent's AGENT_DEADLINE_EXCEEDED; once the first answers, a retry replays that reply."""
    s = await start_stack(database_url, tmp_path, agent_think_ms=3000)
    try:
        chat = s.chat()
        inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name="o", agent="reference")), metadata=s.md())
        req = chat_pb2.SendMessageRequest(instance=inst.name, content="take your time", request_id=str(uuid.uuid4()))
        first = asyncio.ensure_future(chat.SendMessage(req, metadata=s.md(), timeout=20))
        await asyncio.sleep(0.5)
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await chat.SendMessage(req, metadata=s.md(), timeout=2.0)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        info = error_info(e.value)
        assert info is not None and info.reason == "TURN_IN_PROGRESS", e.value.details()
        assert "still running" in e.value.details()
        answered = await first
        assert info.metadata["trace_id"] == answered.trace_id
        assert info.metadata["user_message"] == answered.user_message.name
        again = await chat.SendMessage(req, metadata=s.md(), timeout=10)
        assert (again.user_message.name, again.reply.name) == (answered.user_message.name, answered.reply.name)
    finally:
        await s.stop()
