"""The workspace's SQL (schema `chat`, tables `workspace_snapshots`, `artifact_versions`; migration 0005).

Writes run on a connection inside the caller's transaction (`Repository.finish_turn`: the snapshot in
the reply's transaction; fork, ClearMessages and DeleteTurn with their messages). Reads are the
`WorkspaceStore` (GetWorkspace, ListArtifacts, GetArtifact). Every statement is owner-scoped.

What a deleted turn leaves (DeleteTurn): its snapshot goes with its messages; the artifact versions it
wrote go too unless a later snapshot still shows them (a later turn's view is that turn's own record,
like a reply quoting an earlier message). Later snapshots and their `changed` flags are kept as stored.
ClearMessages deletes every snapshot and version; artifact ids are never handed out again.
"""

from __future__ import annotations

import json
from datetime import datetime

import asyncpg

from services.chat import workspace as ws
from services.chat.workspace import Applied, ArtifactVersion, Op, Snapshot, State, WorkspaceView

SNAPSHOT_COLUMNS = (
    "turn_index, trace_id, create_time, objective, objective_turn, plan, preferences, artifacts, changed, "
    "changed_artifacts"
)
# The previous snapshot of a turn (the latest of an earlier turn) and the instance's next artifact id,
# the instance row locked so that two turns of one conversation finishing at once apply in turn.
LOCK_BASE = f"""
SELECT i.next_artifact_id, s.* FROM instances i LEFT JOIN LATERAL (
    SELECT {SNAPSHOT_COLUMNS} FROM workspace_snapshots
    WHERE owner = $1 AND instance_id = $2 AND turn_index < $3 ORDER BY turn_index DESC LIMIT 1
) s ON true
WHERE i.owner = $1 AND i.id = $2
FOR UPDATE OF i
"""
BASE = f"""
SELECT {SNAPSHOT_COLUMNS} FROM workspace_snapshots
WHERE owner = $1 AND instance_id = $2 AND turn_index < $3 ORDER BY turn_index DESC LIMIT 1
"""
# BASE as a LATERAL join on the turn being begun (`inst.turn_index`: Repository.begin_turn's CTE), so the
# user message, the history and the workspace the agent gets come back in one round trip; `ws_turn_index`
# NULL: no earlier snapshot. Read with `begun_state`.
BASE_LATERAL = """
LEFT JOIN LATERAL (
    SELECT turn_index AS ws_turn_index, objective, objective_turn, plan, preferences, artifacts
    FROM workspace_snapshots
    WHERE owner = $1 AND instance_id = $2 AND turn_index < inst.turn_index ORDER BY turn_index DESC LIMIT 1
) ws ON true"""
BASE_LATERAL_COLUMNS = "ws.ws_turn_index, ws.objective, ws.objective_turn, ws.plan, ws.preferences, ws.artifacts"
LATEST_VERSIONS = """
SELECT artifact_id, max(version) AS version FROM artifact_versions
WHERE owner = $1 AND instance_id = $2 GROUP BY artifact_id
"""
INSERT_SNAPSHOT = f"""
INSERT INTO workspace_snapshots (owner, instance_id, {SNAPSHOT_COLUMNS})
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9::jsonb, $10::jsonb, $11, $12)
"""
INSERT_VERSIONS = """
INSERT INTO artifact_versions (owner, instance_id, artifact_id, version, turn_index, title, media_type, content,
                               create_time)
SELECT $1, $2, a, v, $3, t, m, c, $4
FROM unnest($5::bigint[], $6::integer[], $7::text[], $8::text[], $9::text[]) AS u(a, v, t, m, c)
"""
SET_NEXT_ARTIFACT = "UPDATE instances SET next_artifact_id = $3 WHERE owner = $1 AND id = $2"

# GetWorkspace in one statement: the instance (its next turn index: a turn not reached is NOT_FOUND)
# and the snapshot serving turn $3 (the latest at or before it; $3 NULL: the latest).
SELECT_VIEW = f"""
SELECT i.next_turn_index, s.* FROM instances i LEFT JOIN LATERAL (
    SELECT {SNAPSHOT_COLUMNS} FROM workspace_snapshots
    WHERE owner = $1 AND instance_id = $2 AND ($3::integer IS NULL OR turn_index <= $3)
    ORDER BY turn_index DESC LIMIT 1
) s ON true
WHERE i.owner = $1 AND i.id = $2
"""
VERSION_COLUMNS = "instance_id, artifact_id, version, title, media_type, content, turn_index, create_time"
SELECT_VERSIONS = f"""
SELECT {VERSION_COLUMNS} FROM artifact_versions v
JOIN unnest($3::bigint[], $4::integer[]) AS r(a, n) ON v.artifact_id = r.a AND v.version = r.n
WHERE v.owner = $1 AND v.instance_id = $2
ORDER BY v.artifact_id
"""
# One artifact at a version ($4 0: the latest).
SELECT_VERSION = f"""
SELECT {VERSION_COLUMNS} FROM artifact_versions
WHERE owner = $1 AND instance_id = $2 AND artifact_id = $3 AND ($4 = 0 OR version = $4)
ORDER BY version DESC LIMIT 1
"""
# ListArtifacts, the instance check in the same statement (no row: no instance; a NULL row: empty page).
# $3 turn index (NULL: every artifact's latest version), keyset on artifact id after $4.
LIST_VERSIONS = f"""
SELECT v.* FROM instances i LEFT JOIN LATERAL (
    SELECT DISTINCT ON (artifact_id) {VERSION_COLUMNS} FROM artifact_versions
    WHERE owner = $1 AND instance_id = $2 AND ($3::integer IS NULL OR turn_index = $3) AND artifact_id > $4
    ORDER BY artifact_id, version DESC
    LIMIT $5
) v ON true
WHERE i.owner = $1 AND i.id = $2
ORDER BY v.artifact_id
"""

CLEAR_SNAPSHOTS = "DELETE FROM workspace_snapshots WHERE owner = $1 AND instance_id = $2"
CLEAR_VERSIONS = "DELETE FROM artifact_versions WHERE owner = $1 AND instance_id = $2"
# DeleteTurn: the turn's snapshot, then the versions it wrote that no remaining snapshot shows.
DELETE_TURN_SNAPSHOT = """
DELETE FROM workspace_snapshots WHERE owner = $1 AND instance_id = $2 AND turn_index = $3
"""
DELETE_TURN_VERSIONS = """
DELETE FROM artifact_versions v WHERE v.owner = $1 AND v.instance_id = $2 AND v.turn_index = $3
  AND NOT EXISTS (
    SELECT 1 FROM workspace_snapshots s WHERE s.owner = $1 AND s.instance_id = $2 AND s.turn_index > $3
      AND s.artifacts @> jsonb_build_array(jsonb_build_object('id', v.artifact_id, 'v', v.version)))
"""
# ForkConversation: the prefix's snapshots and artifact versions (same ids, versions, turn indexes) and
# the parent's next artifact id (a fork never reuses an id the parent may have given out).
COPY_SNAPSHOTS = f"""
INSERT INTO workspace_snapshots (owner, instance_id, {SNAPSHOT_COLUMNS})
SELECT owner, $3, {SNAPSHOT_COLUMNS} FROM workspace_snapshots
WHERE owner = $1 AND instance_id = $2 AND turn_index <= $4
"""
COPY_VERSIONS = f"""
INSERT INTO artifact_versions (owner, {VERSION_COLUMNS})
SELECT owner, $3, artifact_id, version, title, media_type, content, turn_index, create_time FROM artifact_versions
WHERE owner = $1 AND instance_id = $2 AND turn_index <= $4
"""
COPY_NEXT_ARTIFACT = """
UPDATE instances f SET next_artifact_id = p.next_artifact_id FROM instances p
WHERE f.owner = $1 AND f.id = $3 AND p.owner = $1 AND p.id = $2
"""


def _state(r: asyncpg.Record) -> State:
    return ws.state_from_json(r["objective"], r["objective_turn"], json.loads(r["plan"]),
                              json.loads(r["preferences"]), json.loads(r["artifacts"]))


def begun_state(r: asyncpg.Record) -> State:
    """The workspace of a row carrying BASE_LATERAL_COLUMNS (empty when there is no earlier snapshot)."""
    return _state(r) if r["ws_turn_index"] is not None else State()


def _snapshot(r: asyncpg.Record) -> Snapshot:
    return Snapshot(turn_index=r["turn_index"], trace_id=r["trace_id"], create_time=r["create_time"],
                    state=_state(r), changed=tuple(r["changed"]), changed_artifacts=tuple(r["changed_artifacts"]))


def _version(r: asyncpg.Record) -> ArtifactVersion:
    return ArtifactVersion(instance_id=r["instance_id"], artifact_id=r["artifact_id"], version=r["version"],
                           title=r["title"], media_type=r["media_type"], content=r["content"],
                           turn_index=r["turn_index"], create_time=r["create_time"])


async def store_snapshot(conn: asyncpg.Connection, owner: str, instance_id: str, turn_index: int, trace_id: str,
                         ops: tuple[Op, ...], now: datetime) -> Applied:
    """Apply the turn's operations on the previous snapshot and store the turn's snapshot and the
    artifact versions it wrote (inside the caller's transaction, the instance row locked). Returns
    what was applied and dropped (services.chat.workspace.apply)."""
    row = await conn.fetchrow(LOCK_BASE, owner, instance_id, turn_index)
    base = _state(row) if row is not None and row["turn_index"] is not None else State()
    next_id = row["next_artifact_id"] if row is not None else 1
    latest: dict[int, int] = {}
    if any(isinstance(o, ws.PutArtifact) for o in ops):
        latest = {r["artifact_id"]: r["version"] for r in await conn.fetch(LATEST_VERSIONS, owner, instance_id)}
    done = ws.apply(base, ops, turn_index, next_id, latest)
    s = done.state
    await conn.execute(
        INSERT_SNAPSHOT, owner, instance_id, turn_index, trace_id, now, s.objective, s.objective_turn,
        json.dumps(ws.plan_json(s.plan)), json.dumps(ws.preferences_json(s.preferences)),
        json.dumps(ws.artifacts_json(s.artifacts)), list(done.changed), list(done.changed_artifacts),
    )
    if done.writes:
        w = done.writes
        await conn.execute(
            INSERT_VERSIONS, owner, instance_id, turn_index, now, [x.artifact_id for x in w], [x.version for x in w],
            [x.title for x in w], [x.media_type for x in w], [x.content for x in w],
        )
    if done.next_artifact_id != next_id:
        await conn.execute(SET_NEXT_ARTIFACT, owner, instance_id, done.next_artifact_id)
    return done


async def clear(conn: asyncpg.Connection, owner: str, instance_id: str) -> None:
    await conn.execute(CLEAR_SNAPSHOTS, owner, instance_id)
    await conn.execute(CLEAR_VERSIONS, owner, instance_id)


async def delete_turn(conn: asyncpg.Connection, owner: str, instance_id: str, turn_index: int) -> None:
    await conn.execute(DELETE_TURN_SNAPSHOT, owner, instance_id, turn_index)
    await conn.execute(DELETE_TURN_VERSIONS, owner, instance_id, turn_index)


async def copy_prefix(conn: asyncpg.Connection, owner: str, parent_id: str, fork_id: str, turn_index: int) -> None:
    await conn.execute(COPY_SNAPSHOTS, owner, parent_id, fork_id, turn_index)
    await conn.execute(COPY_VERSIONS, owner, parent_id, fork_id, turn_index)
    await conn.execute(COPY_NEXT_ARTIFACT, owner, parent_id, fork_id)


class WorkspaceStore:
    """The workspace reads, over the gateway's pool."""

    def __init__(self, pool: asyncpg.Pool):
        self._pool = pool

    async def before_turn(self, owner: str, instance_id: str, turn_index: int) -> State:
        """The workspace the agent works on in turn `turn_index` (the previous snapshot; empty at first)."""
        r = await self._pool.fetchrow(BASE, owner, instance_id, turn_index)
        return _state(r) if r is not None else State()

    async def view(self, owner: str, instance_id: str, turn_index: int | None) -> WorkspaceView | None | int:
        """The workspace as of `turn_index` (None: the latest snapshot). None: no such instance; an int
        (the instance's next turn index): `turn_index` not reached yet."""
        async with self._pool.acquire() as conn:
            r = await conn.fetchrow(SELECT_VIEW, owner, instance_id, turn_index)
            if r is None:
                return None
            if turn_index is not None and turn_index >= r["next_turn_index"]:
                return int(r["next_turn_index"])
            if r["turn_index"] is None:
                return WorkspaceView(instance_id, turn_index if turn_index is not None else -1, None, ())
            snap = _snapshot(r)
            refs = snap.state.artifacts
            rows = await conn.fetch(SELECT_VERSIONS, owner, instance_id, [a.artifact_id for a in refs],
                                    [a.version for a in refs]) if refs else []
        asked = turn_index if turn_index is not None else snap.turn_index
        return WorkspaceView(instance_id, asked, snap, tuple(_version(x) for x in rows))

    async def artifact(self, owner: str, instance_id: str, artifact_id: int, version: int) -> ArtifactVersion | None:
        r = await self._pool.fetchrow(SELECT_VERSION, owner, instance_id, artifact_id, version)
        return _version(r) if r is not None else None

    async def list_artifacts(self, owner: str, instance_id: str, turn_index: int | None, after_id: int,
                             limit: int) -> list[ArtifactVersion] | None:
        """Artifacts by id after `after_id` (one page); None when the instance does not exist for `owner`."""
        rows = await self._pool.fetch(LIST_VERSIONS, owner, instance_id, turn_index, after_id, limit)
        if not rows:
            return None
        return [_version(r) for r in rows if r["artifact_id"] is not None]
