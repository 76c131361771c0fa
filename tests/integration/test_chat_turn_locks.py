"""Two SendMessage calls racing on one request_id while the first turn finishes (issue 25: "retries
never duplicate", and never fail either). The loser's BEGIN_TURN holds the conversation's row and
waits on the winner's turn row in the request_id index; the winner's finish must not then wait on the
conversation's row, or PostgreSQL kills one of them as a deadlock (seen under load in test_chat_api's
race: the loser answered ABORTED instead of INVALID_ARGUMENT REQUEST_ID_REUSED). Real PostgreSQL, the
repository's own statements, the interleaving forced with a second connection."""
from __future__ import annotations

import asyncio
import datetime as dt
import uuid

from services.chat import domain, workspace_store
from services.chat import repository as chat_repository
from services.chat.domain import Message, Role
from tests.helpers.chat import migrated_chat


async def test_a_request_id_race_during_the_winners_finish_is_refused_not_deadlocked(database_url):
    now = dt.datetime.now(dt.UTC)
    async with migrated_chat(database_url) as (repo, pool, inst):
        rid = uuid.uuid4()
        left = domain.TurnInput(inst.id, "left", domain.Channel.UNSPECIFIED, "", "", rid, b"left")
        right = domain.TurnInput(inst.id, "right", domain.Channel.UNSPECIFIED, "", "", rid, b"right")
        trace = uuid.uuid4().hex
        user, _ = await repo.begin_turn("alice", left, trace, uuid.uuid4().hex, now, 10)

        # The winner's finish (Repository.finish_turn's statements, run here by hand in one
        # transaction) paused after its first statement, and the loser started in between.
        reply = Message(instance_id=inst.id, id=uuid.uuid4().hex, role=Role.ASSISTANT, content="ok",
                        trace_id=trace, turn_index=user.turn_index, create_time=now)
        conn = await pool.acquire()
        tx = conn.transaction()
        await tx.start()
        status = await conn.execute(chat_repository.FINISH_TURN, *chat_repository._message_args("alice", reply), [], [])
        assert status.endswith(" 1")
        # The loser's own statement, BEGIN_TURN (its request_id lookup ran before the winner's turn
        # was committed, so begin_turn went on to the insert).
        loser = asyncio.create_task(pool.fetch(
            chat_repository.BEGIN_TURN, "alice", inst.id, uuid.uuid4().hex, rid, uuid.uuid4().hex, now, right.content,
            int(right.channel), "", "", 10, right.request_fingerprint, None))  # no attempt owner
        await _until_waiting_on_a_lock(pool)  # the loser is queued behind the winner's transaction
        assert not loser.done()
        await workspace_store.store_snapshot(conn, "alice", inst.id, user.turn_index, trace, (), now)
        await tx.commit()
        await pool.release(conn)

        outcome = (await asyncio.wait_for(asyncio.gather(loser, return_exceptions=True), 10))[0]
        # The loser stores nothing (begin_turn raises RequestRace on it, and the servicer answers from
        # the winner's turn: REQUEST_ID_REUSED for other words), never a deadlock.
        assert not isinstance(outcome, BaseException), outcome
        assert outcome and outcome[0]["inserted"] == 0
        rec = await repo.turn_by_request("alice", inst.id, rid)
        assert rec is not None and rec.state == "DONE" and rec.user_message.content == "left"


async def _until_waiting_on_a_lock(pool, deadline_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while loop.time() < end:
        if await pool.fetchval("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the racing BEGIN_TURN never waited on the winner's locks")
