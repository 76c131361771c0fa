"""A turn whose gateway process was killed mid-turn is run again at once by a retry with its request_id
(services.chat.liveness: the dead process's advisory lock is gone), not after the agent cap + stale margin
(120 + 60 s by default, kept here); the user message is stored once and the reply once."""
from __future__ import annotations

import asyncio
import time

import grpc

from agentfeedback.chat.v1 import chat_pb2
from tests.helpers.process_stack import make_procs, turn_killed_midway


async def test_a_retry_reruns_at_once_the_turn_of_a_killed_gateway(database_url, tmp_path):
    procs = make_procs(database_url, tmp_path)
    try:
        md = procs.md()
        async with turn_killed_midway(procs, 3000, "chat") as (chat, inst, req):
            await procs.start("chat")
            t0 = time.monotonic()
            answer = None
            while answer is None and time.monotonic() - t0 < 20:
                try:
                    answer = await chat.SendMessage(req, metadata=md, timeout=15)
                except grpc.aio.AioRpcError as e:  # the channel reconnecting to the restarted process
                    assert e.code() == grpc.StatusCode.UNAVAILABLE, (e.code(), e.details())
                    await asyncio.sleep(0.2)
            took = time.monotonic() - t0
            assert answer is not None and took < 10, took  # was: DEADLINE_EXCEEDED for 180 s
            msgs = (await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=inst.name), metadata=md)).messages
            assert [m.name for m in msgs if m.role == chat_pb2.ROLE_USER] == [answer.user_message.name]
            assert [m.name for m in msgs if m.role == chat_pb2.ROLE_ASSISTANT] == [answer.reply.name]
    finally:
        await asyncio.to_thread(procs.stop_all)
