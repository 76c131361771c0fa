"""Removed turns (issue 25) across chat and feedback, over the real stack and PostgreSQL: who may say a
turn is gone, chat killed between its delete and its notice, Clear chat racing writes, and a removal
racing a report's delete without a deadlock reaching anyone."""
from __future__ import annotations

import asyncio

import asyncpg
import grpc

from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.chat.removal import TEST_EXIT_STATUS
from services.common.auth import ALL_SCOPES, DEV_SCOPES, SCOPE_FEEDBACK_EVALUATIONS
from tests.helpers.evaluations import turn_evaluations
from tests.helpers.feedback import (
    chat_service_md,
    expect_error,
    flag,
    get,
    list_all,
    new_instance,
    put,
    rating,
    ratings_of,
    send,
    wait_until,
)
from tests.helpers.procs import reported_port, spawn_chat_process, wait_serving
from tests.stack import Stack

POS = pb.RATING_SENTIMENT_POSITIVE


async def _outbox_rows(stack: Stack, instance: str) -> int:
    conn = await asyncpg.connect(stack.database_url)
    try:
        return await conn.fetchval("SELECT count(*) FROM chat.turn_removals WHERE instance_id = $1",
                                   instance.removeprefix("instances/"))
    finally:
        await conn.close()


async def test_an_owner_token_cannot_mark_turns_removed_or_delete_their_ratings(stack):
    """NoteTurnsRemoved takes the chat service's own credential only: an owner's token, even a dev token
    with every scope `make run` prints (what the console and Envoy carry), is PERMISSION_DENIED and the
    turn keeps its rating and stays rateable."""
    inst = await new_instance(stack)
    t = await send(stack, inst, "q")
    fb = stack.feedback()
    await put(fb, rating(inst, t.reply.turn_index, sentiment=POS), stack.md())
    req = pb.NoteTurnsRemovedRequest(owner="alice", conversation=inst, turn_indexes=[t.reply.turn_index])
    for scopes in (ALL_SCOPES, DEV_SCOPES):
        e = await expect_error(fb.NoteTurnsRemoved(req, metadata=stack.md("alice", scopes)),
                               grpc.StatusCode.PERMISSION_DENIED)
        assert "feedback:turn-removal" in e.details()
    assert [r.turn_index for r in await ratings_of(stack, inst)] == [t.reply.turn_index]
    await put(fb, rating(inst, t.reply.turn_index, "still", sentiment=POS), stack.md())


async def test_chat_killed_between_its_delete_and_the_notice_to_feedback_still_removes_the_ratings(stack, tmp_path):
    """A chat process killed right after DeleteTurn committed (before the feedback service was told; the
    named test hook exits the process there, status 137 as after a SIGKILL): the turn is gone from chat,
    and the removal recorded in the same transaction is sent by a chat replica (here the stack's, sharing
    the outbox) so the turn's rating goes too and a new one is refused; nothing is left in the outbox."""
    log = tmp_path / "chat.log"
    proc = spawn_chat_process(stack, log, AGENTFEEDBACK_CHAT_TEST_EXIT_AFTER_REMOVAL_COMMIT="true")
    try:
        port = await reported_port(log, proc, r"ChatService listening on port (\d+)", timeout_s=90)
        await wait_serving(port, proc, log, timeout_s=90)
        inst = await new_instance(stack)
        t, kept = await send(stack, inst, "q"), await send(stack, inst, "q2")
        fb = stack.feedback()
        for turn in (t, kept):
            await put(fb, rating(inst, turn.reply.turn_index, sentiment=POS), stack.md())
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            await expect_error(chat_pb2_grpc.ChatServiceStub(ch).DeleteTurn(
                chat_pb2.DeleteTurnRequest(parent=inst, trace_id=t.trace_id), metadata=stack.md()),
                grpc.StatusCode.UNAVAILABLE)
        assert await asyncio.to_thread(proc.wait, 30) == TEST_EXIT_STATUS, log.read_text()[-2000:]
        listed = await stack.chat().ListMessages(chat_pb2.ListMessagesRequest(parent=inst), metadata=stack.md())
        assert {m.trace_id for m in listed.messages} == {kept.trace_id}, "the delete committed before the kill"
        await wait_until(lambda: ratings_of(stack, inst),
                         lambda got: [r.turn_index for r in got] == [kept.reply.turn_index], timeout_s=40)
        e = await expect_error(put(fb, rating(inst, t.reply.turn_index, "after", sentiment=POS), stack.md()),
                               grpc.StatusCode.NOT_FOUND)
        assert f"turn {t.reply.turn_index}" in e.details()
        assert await _outbox_rows(stack, inst) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


async def test_a_deleted_turn_loses_the_evaluations_other_systems_sent_about_it(stack):
    """An LLM judge's evaluation of a turn (AcceptEvaluations, the collector's credential) goes with the
    turn on DeleteTurn, as the owner's ratings do; another turn's stays."""
    inst = await new_instance(stack)
    t, kept = await send(stack, inst, "q"), await send(stack, inst, "q2")
    collector = stack.md("tracecollector", (SCOPE_FEEDBACK_EVALUATIONS,))
    await stack.feedback().AcceptEvaluations(pb.AcceptEvaluationsRequest(evaluations=[
        pb.Evaluation(trace_id=turn.trace_id, name="relevance", label="relevant", author_kind=pb.AUTHOR_KIND_LLM,
                      identifier="judge") for turn in (t, kept)]), metadata=collector)
    assert len(await turn_evaluations(stack, inst, t.reply.turn_index)) == 1
    await stack.chat().DeleteTurn(chat_pb2.DeleteTurnRequest(parent=inst, trace_id=t.trace_id), metadata=stack.md())
    assert await turn_evaluations(stack, inst, t.reply.turn_index) == []
    assert len(await turn_evaluations(stack, inst, kept.reply.turn_index)) == 1


async def test_a_report_stored_on_a_turn_removed_a_moment_before_is_marked_and_not_counted(stack):
    """A report whose turn was read from chat before the removal reached the feedback service, stored
    after it (here: the removal told first, the turn still in chat): it is stored marked with the
    removal's time (turn_removed_time), so it is kept as evidence but never counted."""
    inst = await new_instance(stack)
    t, other = await send(stack, inst, "q"), await send(stack, inst, "q2")
    req = pb.NoteTurnsRemovedRequest(owner="alice", conversation=inst, turn_indexes=[t.reply.turn_index],
                                     trace_ids=[t.trace_id])
    await stack.feedback().NoteTurnsRemoved(req, metadata=chat_service_md(stack))
    late, fine = await flag(stack, t.reply.name), await flag(stack, other.reply.name)
    assert late.HasField("turn_removed_time"), "stored on a removed turn: marked as it is stored"
    assert not fine.HasField("turn_removed_time")
    assert (await get(stack, late.name)).HasField("turn_removed_time")


async def test_clear_chat_racing_sends_ratings_and_reports_leaves_nothing_unmarked_on_a_cleared_turn(stack):
    """Clear chat while the owner keeps sending, rating and reporting: afterwards (the removal
    acknowledged), every rating is on a turn chat still has, every report of a turn chat no longer has
    is marked turn_removed_time, and no call failed with a deadlock or a conflict (ABORTED)."""
    inst = await new_instance(stack)
    turns = [await send(stack, inst, f"q{i}") for i in range(3)]
    fb, chat = stack.feedback(), stack.chat()
    failures: list[grpc.aio.AioRpcError] = []
    reported = asyncio.Event()  # the clear starts once a report is in: it races the writes after it

    async def tolerate(call) -> bool:
        try:
            await call
        except grpc.aio.AioRpcError as e:  # NOT_FOUND: the turn was cleared first; anything else is a defect
            if e.code() != grpc.StatusCode.NOT_FOUND:
                failures.append(e)
            return False
        return True

    async def writer(i: int) -> None:
        for n in range(4):
            t = turns[(i + n) % len(turns)]
            await tolerate(put(fb, rating(inst, t.reply.turn_index, f"a{i}_{n}", sentiment=POS), stack.md()))
            if await tolerate(flag(stack, t.reply.name, body=f"wrong {i} {n}")):
                reported.set()

    async def sender(i: int) -> None:
        for n in range(2):
            await tolerate(send(stack, inst, f"more {i} {n}"))

    async def clear() -> None:
        await asyncio.wait_for(reported.wait(), 30)
        await chat.ClearMessages(chat_pb2.ClearMessagesRequest(parent=inst), metadata=stack.md())

    await asyncio.gather(*(writer(i) for i in range(4)), *(sender(i) for i in range(2)), clear())
    assert not failures, [(e.code(), e.details()) for e in failures]
    await wait_until(lambda: _outbox_rows(stack, inst), lambda n: n == 0, timeout_s=40)
    listed = await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=inst, page_size=1000), metadata=stack.md())
    alive_turns = {m.turn_index for m in listed.messages}
    alive_traces = {m.trace_id for m in listed.messages}
    assert {r.turn_index for r in await ratings_of(stack, inst)} <= alive_turns, "a rating outlived its turn"
    reports = [r for r in await list_all(stack) if r.message.startswith(f"{inst}/")]
    assert reports, "some report was stored"
    unmarked = [r.name for r in reports if r.snapshot.trace_id not in alive_traces
                and not r.HasField("turn_removed_time")]
    assert not unmarked, f"reports of cleared turns left counted: {unmarked}"


async def test_a_removal_and_a_report_delete_waiting_on_each_other_both_succeed_without_a_deadlock(stack):
    """A report's delete in flight (its row locked) when the removal of its turn arrives, then finishing
    (its trigger recounts the conversation's activity, a row the removal's rating delete also locks):
    the removal takes the report rows before the ratings (migration 0085's lock order), so neither
    transaction is rolled back as a deadlock: the delete commits and NoteTurnsRemoved answers OK."""
    inst = await new_instance(stack)
    t = await send(stack, inst, "q")
    await put(stack.feedback(), rating(inst, t.reply.turn_index, sentiment=POS), stack.md())
    report = await flag(stack, t.reply.name)
    conn = await asyncpg.connect(stack.database_url, server_settings={"search_path": "feedback"})
    watch = await asyncpg.connect(stack.database_url)
    try:
        tx = conn.transaction()
        await tx.start()
        report_id = report.name.removeprefix("feedback/")
        await conn.execute("SELECT 1 FROM feedback WHERE id = $1 FOR UPDATE", report_id)
        req = pb.NoteTurnsRemovedRequest(owner="alice", conversation=inst, turn_indexes=[t.reply.turn_index],
                                         trace_ids=[t.trace_id])
        removal = asyncio.ensure_future(stack.feedback().NoteTurnsRemoved(req, metadata=chat_service_md(stack)))
        deadline = asyncio.get_running_loop().time() + 10
        # Watched from a second connection: inside `conn`'s transaction pg_stat_activity holds still
        # (PostgreSQL keeps a transaction's first view of it), so a wait that starts later is never seen.
        # The removal's own statement is matched: the capture worker may wait on the same row lock.
        while not await watch.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND pid <> pg_backend_pid() AND query LIKE '%UPDATE feedback SET turn_removed_time%'"):
            assert not removal.done(), "the removal did not wait for the locked report"
            assert asyncio.get_running_loop().time() < deadline, "the removal never waited"
            await asyncio.sleep(0.02)
        await conn.execute("DELETE FROM feedback WHERE id = $1", report_id)  # 40P01 here before the fix
        await tx.commit()
        got = await asyncio.wait_for(removal, 30)
        assert got.deleted_rating_count == 1
    finally:
        await conn.close()
        await watch.close()
    assert await ratings_of(stack, inst) == []
