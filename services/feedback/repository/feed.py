"""The change feed's SQL (issue 24): reads of the outbox `feed_events` (migration 0030, written by
triggers in each change's own transaction: reports, ratings, evaluations), its retention, and the resources the events name.

The safe horizon: a read returns only events with xid < the xmin of its own statement's snapshot
(`pg_current_snapshot()` is the statement's active snapshot): those transactions have ended, so their
events are all visible (or, aborted, never will be), and any event not yet visible belongs to a
transaction with xid >= that xmin, i.e. after every position this read hands out. Committed events at or
beyond the horizon wait (`pending`) until the older transaction ends.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import asyncpg

from services.common.db import NamedSQL
from services.feedback.model.enums import EventKind, EventType, RatingScope
from services.feedback.model.feed import FeedEvent, FeedFilter, FeedPage, FeedResources, Position
from services.feedback.repository import rows
from services.feedback.repository.evaluations import EVALUATION_COLUMNS, evaluation_row
from services.feedback.repository.ratings import RATING_COLUMNS
from services.feedback.repository.reports import FEEDBACK_COLUMNS

_XMIN = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
_EVENT_COLUMNS = "e.seq, e.xid, e.kind, e.action, e.resource_id, e.owner, e.scope, e.aspect, e.branch_copy, e.change_time"
# Scope and aspect are those of ratings (kind 2) and evaluations (kind 3, aspect = the evaluation's name).
_FILTERS = """(:kind::smallint = 0 OR e.kind = :kind)
    AND (:scope::smallint = 0 OR (e.kind IN (2, 3) AND e.scope = :scope))
    AND (:aspect::text = '' OR (e.kind IN (2, 3) AND e.aspect = :aspect))"""


def _page_sql(owner_filter: str) -> NamedSQL:
    """One page after (:xid, :seq) below the horizon, plus the horizon and whether matching committed
    events wait beyond it. Always one row per event, or one row of NULL event columns when there is none."""
    match = f"(e.xid, e.seq) > (:xid::bigint, :seq::bigint) AND {owner_filter} AND {_FILTERS}"
    return NamedSQL(f"""
WITH h AS (SELECT {_XMIN} AS xmin)
SELECT h.xmin, ev.*,
    EXISTS (SELECT 1 FROM feed_events e WHERE e.xid >= h.xmin AND {match}) AS pending
FROM h LEFT JOIN LATERAL (
    SELECT {_EVENT_COLUMNS} FROM feed_events e WHERE e.xid < h.xmin AND {match}
    ORDER BY e.xid, e.seq LIMIT :limit) ev ON true
ORDER BY ev.xid, ev.seq""")


# Two statements: an owner's stream binds its owner (no `:owner = ''` disjunction in its plan).
PAGE_ALL = _page_sql("true")
PAGE_OWNER = _page_sql("e.owner = :owner")
HORIZON = f"SELECT {_XMIN}"
PRUNED = "SELECT xid, seq, time FROM feed_pruned"
# Retention deletes a prefix of the feed (in position order, only ended transactions) whose events are
# older than the cut, and records how far it went: a token before that has lost events.
PRUNE_CANDIDATES = f"""
SELECT xid, seq, change_time FROM feed_events WHERE xid < {_XMIN} ORDER BY xid, seq LIMIT $1"""
PRUNE_THROUGH = """
WITH gone AS (DELETE FROM feed_events WHERE (xid, seq) <= ($1::bigint, $2::bigint) RETURNING 1)
UPDATE feed_pruned SET xid = $1, seq = $2, time = $3 WHERE (xid, seq) < ($1, $2)
RETURNING (SELECT count(*) FROM gone)"""
REPORTS_BY_ID = f"SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE id = ANY($1::text[])"
RATINGS_BY_ID = f"SELECT {RATING_COLUMNS} FROM ratings WHERE id = ANY($1::text[])"
EVALUATIONS_BY_ID = f"SELECT {EVALUATION_COLUMNS} FROM evaluations WHERE id = ANY($1::text[])"


def _event(r: asyncpg.Record) -> FeedEvent:
    return FeedEvent(Position(r["xid"], r["seq"]), EventKind(r["kind"]), EventType(r["action"]), r["resource_id"],
                     r["owner"], RatingScope(r["scope"]), r["aspect"], r["branch_copy"], r["change_time"])


class FeedStore:
    """Reads of the change feed over `self.pool` (one statement each; no connection is held between)."""

    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool

    async def feed_page(self, after: Position, f: FeedFilter, limit: int) -> FeedPage:
        """At most `limit` events after `after` in feed order, matching `f`, below the safe horizon."""
        values = {"xid": after.xid, "seq": after.seq, "owner": f.owner, "kind": f.kind, "scope": f.scope,
                  "aspect": f.aspect, "limit": limit}
        got = await self.pool.fetch(*(PAGE_OWNER if f.owner else PAGE_ALL).bind(values))
        events = tuple(_event(r) for r in got if r["seq"] is not None)
        if len(events) == limit:
            through = events[-1].position
        else:  # every matching event below the horizon was returned: the reader may start at the horizon
            through = max(after, Position(got[0]["xmin"], 0))
        return FeedPage(events, through, bool(got[0]["pending"]))

    async def feed_horizon(self) -> Position:
        """"Now": before every event not yet visible to every reader."""
        return Position(await self.pool.fetchval(HORIZON), 0)

    async def feed_pruned(self) -> tuple[Position, dt.datetime]:
        """How far retention deleted (a token before it lost events) and when."""
        r = await self.pool.fetchrow(PRUNED)
        return Position(r["xid"], r["seq"]), r["time"]

    async def prune_feed(self, before: dt.datetime, batch: int = 5000) -> int:
        """Delete the events older than `before` (a prefix of the feed, in batches); how many went."""
        total = 0
        while True:
            async with self.pool.acquire() as conn, conn.transaction():
                cands = await conn.fetch(PRUNE_CANDIDATES, batch)
                old = 0
                while old < len(cands) and cands[old]["change_time"] < before:
                    old += 1
                if old == 0:
                    return total
                last = cands[old - 1]
                n = await conn.fetchval(PRUNE_THROUGH, last["xid"], last["seq"], dt.datetime.now(dt.UTC))
                total += n or 0
            if old < len(cands) or len(cands) < batch:
                return total

    async def feed_resources(self, events: Sequence[FeedEvent]) -> FeedResources:
        """The reports, ratings and evaluations the events name, as they are now (deleted ones absent)."""
        def ids(kind: EventKind) -> list[str]:
            return list({e.resource_id for e in events if e.kind == kind})

        fids, rids, eids = ids(EventKind.FEEDBACK), ids(EventKind.RATING), ids(EventKind.EVALUATION)
        reports = [rows.report(r) for r in await self.pool.fetch(REPORTS_BY_ID, fids)] if fids else []
        ratings = [rows.rating(r) for r in await self.pool.fetch(RATINGS_BY_ID, rids)] if rids else []
        evals = [evaluation_row(r) for r in await self.pool.fetch(EVALUATIONS_BY_ID, eids)] if eids else []
        return FeedResources({r.id: r for r in reports}, {r.id: r for r in ratings}, {e.id: e for e in evals})
