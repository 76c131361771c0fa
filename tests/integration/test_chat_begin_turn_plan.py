"""A turn's first statement (BEGIN_TURN_IN_WORKSPACE: the user message, the history and the workspace the
agent works on, one round trip) reads the conversation's latest workspace snapshot once. Joined after
the history, PostgreSQL ran the snapshot lookup once per history row (20 index scans a turn: the
statement's execution 0.45 ms against 0.26 ms, each turn's latency 0.15-0.2 ms more; issue 29). Real
PostgreSQL, the repository's own statement, its plan as PostgreSQL ran it."""
from __future__ import annotations

import datetime as dt
import json
import uuid

from services.chat import domain, workspace_store
from services.chat import repository as chat_repository
from services.chat import workspace as ws
from services.chat.domain import Message, Role
from tests.helpers.chat import migrated_chat

HISTORY = 20  # the chat service's default history_messages


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


async def test_a_turns_first_statement_reads_the_workspace_once_and_returns_the_latest(database_url):
    now = dt.datetime.now(dt.UTC)
    async with migrated_chat(database_url) as (repo, pool, inst):
        for i in range(15):  # 30 messages, a snapshot per turn; the last one sets an objective
            turn = domain.TurnInput(inst.id, f"question {i}", domain.Channel.UNSPECIFIED, "", "", None)
            trace = uuid.uuid4().hex
            at = now + dt.timedelta(seconds=2 * i)  # history is ordered by create time
            user, _, _ = await repo.begin_turn_in_workspace("alice", turn, trace, uuid.uuid4().hex, at, HISTORY)
            ops = (ws.SetObjective(f"objective {i}"),) if i == 14 else ()
            await repo.finish_turn("alice", Message(
                instance_id=inst.id, id=uuid.uuid4().hex, role=Role.ASSISTANT, content=f"answer {i}", trace_id=trace,
                turn_index=user.turn_index, create_time=at + dt.timedelta(seconds=1)), workspace_ops=ops)

        async with pool.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            try:
                args = ("alice", inst.id, uuid.uuid4().hex, None, uuid.uuid4().hex, now + dt.timedelta(minutes=1), "next", 0, "", "", HISTORY,
                        None, None)
                rows = await conn.fetch(chat_repository.BEGIN_TURN_IN_WORKSPACE, *args)
                explained = await conn.fetchval(
                    "EXPLAIN (ANALYZE, FORMAT JSON) " + chat_repository.BEGIN_TURN_IN_WORKSPACE, *args)
            finally:
                await tx.rollback()
        # What the agent gets: the 20 newest messages, oldest first, and the latest snapshot's workspace.
        assert [r["content"] for r in rows] == [t for i in range(5, 15) for t in (f"question {i}", f"answer {i}")]
        assert workspace_store.begun_state(rows[0]).objective == "objective 14"
        plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
        lookups = [n for n in _nodes(plan) if n.get("Relation Name") == "workspace_snapshots"]
        assert lookups, plan
        assert [n["Actual Loops"] for n in lookups] == [1], lookups  # once, not once per history row
