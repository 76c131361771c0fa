"""All SQL of the chat gateway (schema `chat`), as constants, and the one class that runs it.

Every query is owner-scoped: a row of another owner is never read, changed or deleted.
The turn is written in two short transactions (user message first, reply later); no connection is
held while the agent thinks (style.md: never hold a DB connection while awaiting another service).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

import asyncpg

from services.chat import workspace_store
from services.chat.defects import SuspectedDefect
from services.chat.liveness import OWNER_ALIVE_SQL
from services.chat.domain import (
    Channel,
    HistoryMessage,
    Instance,
    InstanceQuery,
    Message,
    MessagePage,
    NewInstance,
    Role,
    TurnInput,
    TurnRecord,
    TurnRemoval,
)
from services.chat.workspace import Applied, Op, State
from services.common.db import fetch_custom_plan, like_pattern
from services.common.ids import check_same_request

INSERT_INSTANCE = """
INSERT INTO instances (owner, id, display_name, agent, request_id, create_time, request_fingerprint)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT DO NOTHING
RETURNING owner, id, display_name, agent, create_time, fork_source, fork_turn_index, last_turn_time
"""
INSTANCE_COLUMNS = "owner, id, display_name, agent, create_time, fork_source, fork_turn_index, last_turn_time"
SELECT_INSTANCE = f"SELECT {INSTANCE_COLUMNS} FROM instances WHERE owner = $1 AND id = $2"
SELECT_INSTANCE_BY_REQUEST = f"""
SELECT {INSTANCE_COLUMNS}, request_fingerprint FROM instances
WHERE owner = $1 AND request_id = $2
"""
# One page of an owner's instances: $1 owner, keyset $2/$3 (NULL: the first page), $4 limit, $5 an ILIKE
# pattern of the display name ('' = all; a rare text is answered from the trigram index instances_name_trgm,
# migration 0045, a common one by walking the order's index to the page). The turn count reads
# messages_instance_turn only (per listed instance, so a page costs its own conversations' lengths, never
# the owner's whole history).
_LIST_INSTANCES = f"""
SELECT {INSTANCE_COLUMNS}, activity_time,
       (SELECT count(DISTINCT m.turn_index) FROM messages m WHERE m.owner = i.owner AND m.instance_id = i.id)
           AS turn_count
FROM instances i
WHERE owner = $1 AND ($2::timestamptz IS NULL OR {{keyset}}) AND ($5 = '' OR display_name ILIKE $5)
ORDER BY {{order}}
LIMIT $4
"""
LIST_INSTANCES = _LIST_INSTANCES.format(keyset="(create_time, id) > ($2, $3)", order="create_time, id")
# Latest activity first (instances_activity).
LIST_INSTANCES_BY_ACTIVITY = _LIST_INSTANCES.format(keyset="(activity_time, id) < ($2, $3)",
                                                    order="activity_time DESC, id DESC")

MESSAGE_COLUMNS = (
    "instance_id, id, role, content, trace_id, turn_index, create_time, channel, audio_key, dictation, "
    "model, agent"
)
READ_COLUMNS = f"{MESSAGE_COLUMNS}, source_message, source_trace_id"
# Step 2 of the turn in ONE statement (atomic, one round trip): claim the next turn index (row lock
# on the instance), record the turn (request_id unique per instance), store the user message, and
# read the `$11` newest earlier messages (the statement's snapshot does not see its own insert).
# No row: the instance does not exist for this owner. `inserted` = 0: a concurrent request with the
# same request_id won (the turn index it claimed stays unused; indexes only need to be unique).
# `ws_join` (the workspace's lateral lookup) joins the one `inst` row before the history does: after it,
# PostgreSQL ran the lookup once per history row (tests/integration/test_chat_begin_turn_plan.py).
_BEGIN_TURN = """
WITH inst AS (
    UPDATE instances SET next_turn_index = next_turn_index + 1, last_turn_time = $6
    WHERE owner = $1 AND id = $2
    RETURNING agent, next_turn_index - 1 AS turn_index
), turn AS (
    INSERT INTO turns (owner, instance_id, trace_id, request_id, turn_index, user_message_id, create_time,
                       request_fingerprint, attempt_owner)
    SELECT $1, $2, $3, $4, inst.turn_index, $5, $6, $12, $13 FROM inst
    ON CONFLICT DO NOTHING
    RETURNING turn_index
), msg AS (
    INSERT INTO messages (owner, instance_id, id, role, content, trace_id, turn_index, create_time, channel,
                          audio_key, dictation, agent)
    SELECT $1, $2, $5, 1, $7, $3, turn.turn_index, $6, $8, $9, $10, inst.agent FROM turn, inst
    RETURNING id
)
SELECT inst.turn_index, inst.agent, (SELECT count(*) FROM msg) AS inserted, h.role, h.content, h.id,
       h.turn_index AS h_turn_index{ws_columns}
FROM inst{ws_join} LEFT JOIN LATERAL (
    SELECT role, content, create_time, id, turn_index FROM messages
    WHERE owner = $1 AND instance_id = $2
    ORDER BY create_time DESC, id DESC
    LIMIT $11
) h ON true
ORDER BY h.create_time, h.id
"""
BEGIN_TURN = _BEGIN_TURN.format(ws_columns="", ws_join="")
# The same, and the workspace the agent works on in this turn (workspace_store.BASE_LATERAL) on every row.
BEGIN_TURN_IN_WORKSPACE = _BEGIN_TURN.format(ws_columns=", " + workspace_store.BASE_LATERAL_COLUMNS,
                                             ws_join=workspace_store.BASE_LATERAL)
# Step 5 in one statement: the reply and the turn's DONE state (the workspace snapshot follows in the same
# transaction). Only while this attempt still owns the turn (RUNNING in trace $6): no reply after a retry
# took it over. The conversation's row is locked first (the uncorrelated EXISTS runs as a one-time filter
# before the turns row is touched), in BEGIN_TURN's order: a BEGIN_TURN racing on this turn's request_id
# holds that row and waits on this turn's row in the request_id index, so taking them the other way round
# (turn, then the snapshot's lock of the conversation) was a deadlock (tests/integration/test_chat_turn_locks.py).
FINISH_TURN = f"""
WITH i AS (SELECT 1 FROM instances WHERE owner = $1 AND id = $2 FOR UPDATE),
t AS (UPDATE turns SET state = 'DONE', reply_message_id = $3, defects = $14, defect_tools = $15
      WHERE owner = $1 AND instance_id = $2 AND trace_id = $6 AND state = 'RUNNING' AND EXISTS (SELECT 1 FROM i)
      RETURNING 1)
INSERT INTO messages (owner, {MESSAGE_COLUMNS})
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13 FROM t
"""
FAIL_TURN = """
UPDATE turns SET state = 'FAILED', error_code = $4, error_message = $5, defects = '{4}'
WHERE owner = $1 AND instance_id = $2 AND trace_id = $3 AND state = 'RUNNING'
"""
# A retry of a FAILED turn (error code in $6) or of a RUNNING one whose attempt began before $9 (its process
# died), in ONE statement (one concurrent retry wins): RUNNING again in trace $5 from $8, its user message
# follows; the $7 newest messages before that user message. No row: not claimed.
# A RUNNING attempt whose owner process is dead (services.chat.liveness: its lock key is not held) is claimed
# at once; the owner recorded becomes $10.
RETRY_TURN = f"""
WITH t AS (UPDATE turns SET state = 'RUNNING', trace_id = $5, error_code = NULL, error_message = NULL,
                  attempt_time = $8, attempt_owner = $10
           WHERE owner = $1 AND instance_id = $2 AND request_id = $3 AND trace_id = $4 AND (
             (state = 'FAILED' AND error_code = ANY($6::text[]))
             OR (state = 'RUNNING' AND (COALESCE(attempt_time, create_time) < $9
                 OR (attempt_owner IS NOT NULL AND NOT {OWNER_ALIVE_SQL.format(key='attempt_owner')}))))
           RETURNING user_message_id),
m AS (UPDATE messages SET trace_id = $5 FROM t WHERE owner = $1 AND instance_id = $2 AND id = t.user_message_id
      RETURNING messages.id, messages.create_time)
SELECT h.role, h.content, h.id, h.turn_index AS h_turn_index FROM m LEFT JOIN LATERAL (
    SELECT role, content, create_time, id, turn_index FROM messages WHERE owner = $1 AND instance_id = $2
      AND (create_time, id) < (m.create_time, m.id) ORDER BY create_time DESC, id DESC LIMIT $7) h ON true
ORDER BY h.create_time, h.id
"""
SELECT_TURN_BY_REQUEST = f"""
SELECT trace_id, turn_index, state, user_message_id, reply_message_id, error_code, error_message, create_time,
       request_fingerprint, COALESCE(attempt_time, create_time) AS attempt_time,
       CASE WHEN state = 'RUNNING' AND attempt_owner IS NOT NULL
            THEN NOT {OWNER_ALIVE_SQL.format(key='attempt_owner')} ELSE false END AS owner_dead
FROM turns WHERE owner = $1 AND instance_id = $2 AND request_id = $3
"""
# LookupTurns (issue 24): the original turn (not a fork's copy, which shares the trace id) of each trace
# id across owners, with its latest assistant reply; index messages_trace.
LOOKUP_TURNS = """
SELECT DISTINCT ON (m.trace_id) m.trace_id, m.owner, m.instance_id, m.turn_index,
       coalesce((SELECT r.id FROM messages r
                 WHERE r.owner = m.owner AND r.instance_id = m.instance_id AND r.trace_id = m.trace_id
                   AND r.role = 2 AND r.content <> '' ORDER BY r.create_time DESC, r.id DESC LIMIT 1), '') AS reply
FROM messages m WHERE m.trace_id = ANY($1::text[]) AND m.source_message = ''
ORDER BY m.trace_id, m.create_time, m.id
"""
SELECT_MESSAGE = f"SELECT {READ_COLUMNS} FROM messages WHERE owner = $1 AND instance_id = $2 AND id = $3"
# The instance check and the page in ONE statement (one round trip): no row = no such instance for
# this owner; one row of NULLs (id IS NULL) = the instance exists and the page is empty.
LIST_MESSAGES = f"""
SELECT m.* FROM instances i LEFT JOIN LATERAL (
    SELECT {READ_COLUMNS} FROM messages
    WHERE owner = $1 AND instance_id = $2
      AND ($3::text IS NULL OR trace_id = $3)
      AND ($4::integer IS NULL OR turn_index = $4) AND ($8::text IS NULL OR trace_id = (
          SELECT trace_id FROM messages WHERE owner = $1 AND instance_id = $2 AND id = $8))
      AND ($5::timestamptz IS NULL OR (create_time, id) > ($5, $6))
    ORDER BY create_time, id
    LIMIT $7
) m ON true
WHERE i.owner = $1 AND i.id = $2
ORDER BY m.create_time, m.id
"""
CLEAR_MESSAGES = "DELETE FROM messages WHERE owner = $1 AND instance_id = $2"
CLEAR_TURNS = "DELETE FROM turns WHERE owner = $1 AND instance_id = $2"
# Clear chat's first statement: the instance row locked (BEGIN_TURN takes it too, so a turn begun
# before the clear is deleted by it and counted in the removal; one begun after waits for the clear and
# gets a later index) and its latest turn index ever started (-1: none; indexes are never reused).
LOCK_LAST_TURN_INDEX = "SELECT next_turn_index - 1 FROM instances WHERE owner = $1 AND id = $2 FOR UPDATE"
DELETE_TURN_MESSAGES = """
DELETE FROM messages WHERE owner = $1 AND instance_id = $2 AND trace_id = $3 RETURNING turn_index
"""
DELETE_TURN = "DELETE FROM turns WHERE owner = $1 AND instance_id = $2 AND trace_id = $3"

# The turn removal outbox (migration 0030; services/chat/removal.py). A new row is due after $6 seconds
# (the request sends it itself meanwhile); a claim moves a due row's next attempt out by its backoff
# (2^(attempts−1) s, at least 5 s (ratings_client.TIMEOUT_S: no second claim while a send may still be
# answered), at most 60 s: a crashed sender's row is due again then) and hands it to one relay (SKIP
# LOCKED: replicas share the table).
_REMOVAL_COLUMNS = "id, owner, instance_id, turn_indexes, through_turn_index, trace_ids, attempts"
INSERT_REMOVAL = f"""
INSERT INTO turn_removals (owner, instance_id, turn_indexes, through_turn_index, trace_ids, next_attempt)
VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6)) RETURNING {_REMOVAL_COLUMNS}"""
CLAIM_REMOVALS = f"""
UPDATE turn_removals SET attempts = attempts + 1,
    next_attempt = now() + make_interval(secs => least(60, greatest(5, 2 ^ least(attempts, 6))))
WHERE id IN (SELECT id FROM turn_removals WHERE next_attempt <= now() ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING {_REMOVAL_COLUMNS}"""
REMOVAL_SENT = "DELETE FROM turn_removals WHERE id = $1"
# A failed send hands the row back soon ($3 s), not after the claim's lease: the replica that failed may
# be the only one cut off from the feedback service (it backs off on its own, RemovalRelay), and another
# replica that reaches it sends the removal at its next poll instead of after the whole backoff.
REMOVAL_FAILED = "UPDATE turn_removals SET last_error = $2, next_attempt = now() + make_interval(secs => $3) WHERE id = $1"
# Seconds after a failed send before any replica may claim the row again.
REMOVAL_HAND_BACK_S = 1.0
# What the outbox holds (the relay's gauges): rows not yet acknowledged and the oldest one's creation.
REMOVAL_BACKLOG = "SELECT count(*), min(create_time) FROM turn_removals"
# How long before the request's own send (the client's TIMEOUT_S) the relay leaves a new row alone.
REMOVAL_FIRST_DUE_S = 10.0

# ForkConversation, in one transaction: the new instance (its next turn follows the copied prefix),
# then copies of the prefix's messages with new ids (gen_random_uuid, 32 hex like services.common.ids),
# the same turn index, create time and trace id, and pointers to their source.
INSERT_FORK = f"""
INSERT INTO instances (owner, id, display_name, agent, request_id, create_time, request_fingerprint,
                       fork_source, fork_turn_index, next_turn_index)
SELECT $1, $3, $4, agent, $5, $6, $7, 'instances/' || id, $8, $8 + 1
FROM instances WHERE owner = $1 AND id = $2
ON CONFLICT DO NOTHING
RETURNING {INSTANCE_COLUMNS}
"""
COPY_PREFIX = """
INSERT INTO messages (owner, instance_id, id, role, content, trace_id, turn_index, create_time, channel,
                      audio_key, dictation, model, agent, source_message, source_trace_id)
SELECT owner, $3, replace(gen_random_uuid()::text, '-', ''), role, content, trace_id, turn_index,
       create_time, channel, audio_key, dictation, model, agent,
       'instances/' || instance_id || '/messages/' || id, trace_id
FROM messages WHERE owner = $1 AND instance_id = $2 AND turn_index <= $4
"""
HAS_TURN = "SELECT EXISTS (SELECT 1 FROM messages WHERE owner = $1 AND instance_id = $2 AND turn_index = $3)"
COUNT_MESSAGES = "SELECT count(*) FROM messages WHERE owner = $1 AND instance_id = $2"

DEFECT_SELECT = """
SELECT t.owner, t.instance_id, t.trace_id, t.turn_index, t.create_time, t.defects, t.defect_tools,
       t.user_message_id, coalesce(left(m.content, 1001), '') AS user_text
FROM turns t LEFT JOIN messages m
  ON m.owner = t.owner AND m.instance_id = t.instance_id AND m.id = t.user_message_id
"""
# One page, newest first: $1 owner (NULL = every owner), $2 instance (NULL = every instance), keyset $3/$4.
LIST_DEFECTS = DEFECT_SELECT + """
WHERE t.defects <> '{}' AND ($1::text IS NULL OR t.owner = $1) AND ($2::text IS NULL OR t.instance_id = $2)
  AND ($3::timestamptz IS NULL OR (t.create_time, t.trace_id) < ($3, $4))
ORDER BY t.create_time DESC, t.trace_id DESC
LIMIT $5
"""
GET_DEFECT = DEFECT_SELECT + """
WHERE t.defects <> '{}' AND ($1::text IS NULL OR t.owner = $1) AND t.instance_id = $2 AND t.trace_id = $3
"""


def _instance(r: asyncpg.Record) -> Instance:
    listed = "turn_count" in r.keys()
    return Instance(
        owner=r["owner"],
        id=r["id"],
        display_name=r["display_name"],
        agent=r["agent"],
        create_time=r["create_time"],
        fork_source=r["fork_source"],
        fork_turn_index=r["fork_turn_index"],
        last_turn_time=r["last_turn_time"],
        activity_time=r["activity_time"] if listed else None,
        turn_count=r["turn_count"] if listed else 0,
    )


def _message(r: asyncpg.Record) -> Message:
    return Message(
        instance_id=r["instance_id"],
        id=r["id"],
        role=Role(r["role"]),
        content=r["content"],
        trace_id=r["trace_id"],
        turn_index=r["turn_index"],
        create_time=r["create_time"],
        channel=Channel(r["channel"]),
        audio_key=r["audio_key"],
        dictation=r["dictation"],
        model=r["model"],
        agent=r["agent"],
        source_message=r["source_message"],
        source_trace_id=r["source_trace_id"],
    )


def _defect(r: asyncpg.Record) -> SuspectedDefect:
    return SuspectedDefect(
        owner=r["owner"], instance_id=r["instance_id"], trace_id=r["trace_id"], turn_index=r["turn_index"],
        time=r["create_time"], kinds=tuple(r["defects"]), tools=tuple(r["defect_tools"]),
        user_message_id=r["user_message_id"], user_text=r["user_text"],
    )


def _message_args(owner: str, m: Message) -> tuple:
    return (owner, m.instance_id, m.id, int(m.role), m.content, m.trace_id, m.turn_index, m.create_time,
            int(m.channel), m.audio_key, m.dictation, m.model, m.agent)


def _removal(r: asyncpg.Record) -> TurnRemoval:
    return TurnRemoval(r["id"], r["owner"], r["instance_id"], tuple(r["turn_indexes"]), r["through_turn_index"],
                       tuple(r["trace_ids"]), r["attempts"])


class InstanceExists(Exception):
    """CreateInstance with an id the owner already uses (and not a request_id retry)."""


class RequestRace(Exception):
    """Two requests with one request_id raced; the loser's transaction was rolled back."""


def _history(instance_id: str, rows) -> list[HistoryMessage]:
    return [HistoryMessage(Role(r["role"]), r["content"], f"instances/{instance_id}/messages/{r['id']}",
                           r["h_turn_index"]) for r in rows if r["role"] is not None]


class Repository:
    """The chat schema, over one asyncpg pool created at start-up. `process_key`: this process's liveness
    lock key (services.chat.liveness), recorded as the owner of the turn attempts it begins (None: none)."""

    def __init__(self, pool: asyncpg.Pool, process_key: int | None = None):
        self._process_key = process_key
        self._pool = pool

    async def create_instance(self, owner: str, new: NewInstance, now: datetime) -> Instance:
        """Insert; a retry with the same request_id returns the first row. InstanceExists on an id clash;
        InvalidArgument(request_id, REQUEST_ID_REUSED) when the request_id was used for another request."""
        async with self._pool.acquire() as conn:
            if new.request_id is not None:
                r = await conn.fetchrow(SELECT_INSTANCE_BY_REQUEST, owner, new.request_id)
                if r is not None:
                    check_same_request(r["request_fingerprint"], new.request_fingerprint)
                    return _instance(r)
            r = await conn.fetchrow(
                INSERT_INSTANCE, owner, new.id, new.display_name, new.agent, new.request_id, now,
                new.request_fingerprint,
            )
            if r is not None:
                return _instance(r)
            if new.request_id is not None:  # a concurrent retry won the race
                r = await conn.fetchrow(SELECT_INSTANCE_BY_REQUEST, owner, new.request_id)
                if r is not None:
                    check_same_request(r["request_fingerprint"], new.request_fingerprint)
                    return _instance(r)
            raise InstanceExists(new.id)

    async def instance_by_request(self, owner: str, request_id: uuid.UUID) -> Instance | None:
        r = await self._pool.fetchrow(SELECT_INSTANCE_BY_REQUEST, owner, request_id)  # create or fork
        return _instance(r) if r is not None else None

    async def get_instance(self, owner: str, instance_id: str) -> Instance | None:
        r = await self._pool.fetchrow(SELECT_INSTANCE, owner, instance_id)
        return _instance(r) if r is not None else None

    async def list_instances(
        self, owner: str, query: InstanceQuery, after: tuple[datetime, str] | None, limit: int
    ) -> list[Instance]:
        """At most `limit` of `owner`'s instances after the keyset `after`, in the query's order and search."""
        t, i = after if after else (None, None)
        sql = LIST_INSTANCES_BY_ACTIVITY if query.by_activity else LIST_INSTANCES
        # A custom plan: with the optional keyset and search a generic plan would not use the index.
        rows = await fetch_custom_plan(self._pool, sql, owner, t, i, limit, like_pattern(query.search))
        return [_instance(r) for r in rows]

    async def turn_by_request(self, owner: str, instance_id: str, request_id: uuid.UUID) -> TurnRecord | None:
        """The turn a request_id already produced (any state), or None."""
        async with self._pool.acquire() as conn:
            return await self._turn_by_request(conn, owner, instance_id, request_id)

    async def _turn_by_request(
        self, conn: asyncpg.Connection, owner: str, instance_id: str, request_id: uuid.UUID
    ) -> TurnRecord | None:
        t = await conn.fetchrow(SELECT_TURN_BY_REQUEST, owner, instance_id, request_id)
        if t is None:
            return None
        user = await conn.fetchrow(SELECT_MESSAGE, owner, instance_id, t["user_message_id"])
        reply = None
        if t["reply_message_id"]:
            reply = await conn.fetchrow(SELECT_MESSAGE, owner, instance_id, t["reply_message_id"])
        if user is None:  # the messages were deleted (DeleteTurn / ClearMessages) after the turn
            return None
        return TurnRecord(
            trace_id=t["trace_id"],
            state=t["state"],
            user_message=_message(user),
            reply=_message(reply) if reply is not None else None,
            error_code=t["error_code"],
            error_message=t["error_message"],
            request_fingerprint=t["request_fingerprint"],
            attempt_time=t["attempt_time"],
            owner_dead=t["owner_dead"],
        )

    async def begin_turn(
        self, owner: str, turn: TurnInput, trace_id: str, message_id: str, t0: datetime, history_limit: int
    ) -> tuple[Message, list[HistoryMessage]] | None:
        """Store the user message of a new turn and read the history before it (one statement).

        Returns (user message, history oldest first), or None when the instance does not exist for
        `owner`. Raises RequestRace when `turn.request_id` is already used (another request with it
        stored its turn first): the caller reads that turn (`turn_by_request`). The request_id is not
        looked up here: TurnRunner looks it up just before, and the statement's ON CONFLICT catches a
        request that came in between.
        """
        rows = await self._begin_turn(BEGIN_TURN, owner, turn, trace_id, message_id, t0, history_limit)
        return None if rows is None else (self._user(turn, trace_id, message_id, t0, rows), _history(turn.instance_id, rows))

    async def begin_turn_in_workspace(
        self, owner: str, turn: TurnInput, trace_id: str, message_id: str, t0: datetime, history_limit: int
    ) -> tuple[Message, list[HistoryMessage], State] | None:
        """`begin_turn`, and the workspace the agent works on in this turn (the latest snapshot of an
        earlier turn; empty at first: `WorkspaceStore.before_turn`), in the same statement."""
        rows = await self._begin_turn(BEGIN_TURN_IN_WORKSPACE, owner, turn, trace_id, message_id, t0, history_limit)
        if rows is None:
            return None
        return (self._user(turn, trace_id, message_id, t0, rows), _history(turn.instance_id, rows),
                workspace_store.begun_state(rows[0]))

    async def _begin_turn(self, sql: str, owner: str, turn: TurnInput, trace_id: str, message_id: str, t0: datetime,
                          history_limit: int) -> list[asyncpg.Record] | None:
        """The rows of `sql` (a BEGIN_TURN), None when the instance does not exist; RequestRace (see begin_turn)."""
        rows = await self._pool.fetch(
            sql, owner, turn.instance_id, trace_id, turn.request_id, message_id, t0, turn.content,
            int(turn.channel), turn.audio_key, turn.dictation, history_limit, turn.request_fingerprint,
            self._process_key,
        )
        if not rows:
            return None
        if rows[0]["inserted"] == 0:
            raise RequestRace()
        return rows

    @staticmethod
    def _user(turn: TurnInput, trace_id: str, message_id: str, t0: datetime, rows: list[asyncpg.Record]) -> Message:
        return Message(
            instance_id=turn.instance_id,
            id=message_id,
            role=Role.USER,
            content=turn.content,
            trace_id=trace_id,
            turn_index=rows[0]["turn_index"],
            create_time=t0,
            channel=turn.channel,
            audio_key=turn.audio_key,
            dictation=turn.dictation,
            agent=rows[0]["agent"],
        )

    async def retry_turn(self, owner: str, failed: TurnRecord, request_id: uuid.UUID, trace_id: str,
                         retryable: Sequence[str], history_limit: int, now: datetime,
                         stale_before: datetime) -> tuple[Message, list[HistoryMessage]] | None:
        """RETRY_TURN: (the user message, now in `trace_id`, and the history before it), or None."""
        iid = failed.user_message.instance_id
        rows = await self._pool.fetch(RETRY_TURN, owner, iid, request_id, failed.trace_id, trace_id,
                                      list(retryable), history_limit, now, stale_before, self._process_key)
        return (replace(failed.user_message, trace_id=trace_id), _history(iid, rows)) if rows else None

    async def finish_turn(
        self, owner: str, reply: Message, defects: tuple[int, ...] = (), defect_tools: tuple[str, ...] = (),
        workspace_ops: tuple[Op, ...] = (),
    ) -> Applied | None:
        """Store the reply, mark the turn DONE with its defect signals and store the turn's workspace
        snapshot (the agent's operations applied on the previous one), in one transaction. Returns what
        the operations did; None (nothing stored) when the attempt no longer owns the turn (a retry
        claimed it as stale)."""
        async with self._pool.acquire() as conn:
            async with conn.transaction():
                status = await conn.execute(
                    FINISH_TURN, *_message_args(owner, reply), list(defects), list(defect_tools))
                if not status.endswith(" 1"):
                    return None
                return await workspace_store.store_snapshot(
                    conn, owner, reply.instance_id, reply.turn_index, reply.trace_id, workspace_ops,
                    reply.create_time)

    async def fail_turn(self, owner: str, instance_id: str, trace_id: str, code: str, message: str) -> None:
        await self._pool.execute(FAIL_TURN, owner, instance_id, trace_id, code, message)

    async def lookup_turns(self, trace_ids: list[str]) -> list[asyncpg.Record]:
        """(trace_id, owner, instance_id, turn_index, reply) of the original turn of each known trace id."""
        return await self._pool.fetch(LOOKUP_TURNS, trace_ids)

    async def get_message(self, owner: str, instance_id: str, message_id: str) -> Message | None:
        r = await self._pool.fetchrow(SELECT_MESSAGE, owner, instance_id, message_id)
        return _message(r) if r is not None else None

    async def list_messages(self, owner: str, instance_id: str, after: MessagePage | None, limit: int,
                            trace_id: str | None, turn_index: int | None, turn_of: str | None = None,
                            ) -> list[Message] | None:
        """One page of the instance's messages (only the turn of message id `turn_of` when given),
        oldest first; None when the instance does not exist for `owner` (same statement)."""
        t, i = (after.after_time, after.after_id) if after else (None, None)
        rows = await self._pool.fetch(LIST_MESSAGES, owner, instance_id, trace_id, turn_index, t, i, limit, turn_of)
        if not rows:
            return None
        return [_message(r) for r in rows if r["id"] is not None]

    async def clear_messages(self, owner: str, instance_id: str) -> tuple[int, TurnRemoval | None]:
        """Delete every message (and turn record, workspace snapshot and artifact version) of the
        instance and, in the same transaction, record the removal in the outbox (None: the instance
        has no turn, or is not the owner's); returns (messages deleted, the removal)."""
        async with self._pool.acquire() as conn:
            async with conn.transaction():
                last = await conn.fetchval(LOCK_LAST_TURN_INDEX, owner, instance_id)
                status = await conn.execute(CLEAR_MESSAGES, owner, instance_id)
                await conn.execute(CLEAR_TURNS, owner, instance_id)
                await workspace_store.clear(conn, owner, instance_id)
                removal = None
                if last is not None and last >= 0:
                    removal = _removal(await conn.fetchrow(INSERT_REMOVAL, owner, instance_id, [], last, [],
                                                           REMOVAL_FIRST_DUE_S))
        return int(status.split()[-1]), removal

    async def delete_turn(self, owner: str, instance_id: str, trace_id: str) -> TurnRemoval | None:
        """Delete the messages (and record) of one turn and its workspace snapshot (workspace_store
        says what happens to its artifact versions) and, in the same transaction, record the removal
        in the outbox; None (nothing deleted) when the instance has no stored message of that trace."""
        async with self._pool.acquire() as conn:
            async with conn.transaction():
                rows = await conn.fetch(DELETE_TURN_MESSAGES, owner, instance_id, trace_id)
                if not rows:
                    return None
                await conn.execute(DELETE_TURN, owner, instance_id, trace_id)
                indexes = sorted({r["turn_index"] for r in rows})
                for turn_index in indexes:
                    await workspace_store.delete_turn(conn, owner, instance_id, turn_index)
                return _removal(await conn.fetchrow(INSERT_REMOVAL, owner, instance_id, indexes, None, [trace_id],
                                                    REMOVAL_FIRST_DUE_S))

    async def claim_removals(self, limit: int) -> list[TurnRemoval]:
        """Up to `limit` due outbox rows, oldest first, each leased to this caller until its backoff ends."""
        return [_removal(r) for r in await self._pool.fetch(CLAIM_REMOVALS, limit)]

    async def removal_sent(self, removal_id: int) -> None:
        """The feedback service acknowledged the removal: its outbox row goes."""
        await self._pool.execute(REMOVAL_SENT, removal_id)

    async def removal_backlog(self) -> tuple[int, datetime | None]:
        """(outbox rows not yet acknowledged, the oldest one's create_time; None when empty)."""
        row = await self._pool.fetchrow(REMOVAL_BACKLOG)
        return int(row[0]), row[1]

    async def removal_failed(self, removal_id: int, error: str) -> None:
        """Why the last send failed (a bounded code name, for an operator reading the table)."""
        await self._pool.execute(REMOVAL_FAILED, removal_id, error[:200], REMOVAL_HAND_BACK_S)

    async def fork(
        self, owner: str, parent_id: str, new: NewInstance, turn_index: int, now: datetime
    ) -> tuple[Instance, int] | str:
        """Store a fork and its copied prefix (one transaction); (instance, messages copied).
        A request_id retry returns the existing fork and its message count (nothing copied).
        Returns "parent" / "turn" when that is NOT_FOUND; raises InstanceExists on an id clash and
        InvalidArgument (REQUEST_ID_REUSED) when the request_id belongs to another request."""
        async with self._pool.acquire() as conn:
            if new.request_id is not None:
                r = await conn.fetchrow(SELECT_INSTANCE_BY_REQUEST, owner, new.request_id)
                if r is not None:
                    check_same_request(r["request_fingerprint"], new.request_fingerprint)
                    return _instance(r), await conn.fetchval(COUNT_MESSAGES, owner, r["id"])
            async with conn.transaction():
                if await conn.fetchrow(SELECT_INSTANCE, owner, parent_id) is None:
                    return "parent"
                if not await conn.fetchval(HAS_TURN, owner, parent_id, turn_index):
                    return "turn"
                r = await conn.fetchrow(
                    INSERT_FORK, owner, parent_id, new.id, new.display_name, new.request_id, now,
                    new.request_fingerprint, turn_index,
                )
                if r is not None:
                    status = await conn.execute(COPY_PREFIX, owner, parent_id, new.id, turn_index)
                    await workspace_store.copy_prefix(conn, owner, parent_id, new.id, turn_index)
                    return _instance(r), int(status.split()[-1])
        if new.request_id is not None:  # a concurrent retry won the race
            r = await self._pool.fetchrow(SELECT_INSTANCE_BY_REQUEST, owner, new.request_id)
            if r is not None:
                check_same_request(r["request_fingerprint"], new.request_fingerprint)
                return _instance(r), await self._pool.fetchval(COUNT_MESSAGES, owner, r["id"])
        raise InstanceExists(new.id)

    async def list_defects(
        self, owner: str | None, instance_id: str | None, after: tuple[datetime, str] | None, limit: int
    ) -> list[SuspectedDefect]:
        """Suspected defects newest first; `owner` None = every owner's (operator)."""
        t, i = after if after else (None, None)
        return [_defect(r) for r in await self._pool.fetch(LIST_DEFECTS, owner, instance_id, t, i, limit)]

    async def get_defect(self, owner: str | None, instance_id: str, trace_id: str) -> SuspectedDefect | None:
        r = await self._pool.fetchrow(GET_DEFECT, owner, instance_id, trace_id)
        return _defect(r) if r is not None else None
