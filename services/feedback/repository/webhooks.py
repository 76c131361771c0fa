"""Webhook subscriptions and their delivery log (issue 24; migration 0031): the SQL and the store.

A delivery worker holds a subscription by a lease (`lease_token`, `lease_until`) claimed with
`FOR UPDATE SKIP LOCKED`, so across replicas one worker at a time delivers a subscription's events, in
order; every later write of that worker names the token, so a worker whose lease ran out changes nothing.
"""
from __future__ import annotations

import datetime as dt
import uuid

import asyncpg

from services.common.db import NamedSQL
from services.feedback.model.enums import EventKind, RatingScope
from services.feedback.model.feed import FeedFilter, Position
from services.feedback.model.webhooks import Delivery, DeliveryOutcome, WebhookState, WebhookSubscription

_COLUMNS = """id, url, secret_encrypted, owner_filter, kind, scope, aspect, state, position_xid, position_seq,
    delivered_event, attempts, next_attempt_at, creator, create_time, lease_token"""

INSERT_SUBSCRIPTION = NamedSQL(f"""
INSERT INTO webhook_subscriptions (id, url, secret_encrypted, owner_filter, kind, scope, aspect, position_xid,
    position_seq, creator, request_id)
VALUES (:id, :url, :secret, :owner, :kind, :scope, :aspect, pg_snapshot_xmin(pg_current_snapshot())::text::bigint, 0,
    :creator, :request_id)
ON CONFLICT (creator, request_id) DO NOTHING
RETURNING {_COLUMNS}""")
BY_REQUEST = f"SELECT {_COLUMNS} FROM webhook_subscriptions WHERE creator = $1 AND request_id = $2"
LIST = f"""SELECT {_COLUMNS} FROM webhook_subscriptions WHERE ($1::timestamptz IS NULL OR (create_time, id) > ($1, $2))
ORDER BY create_time, id LIMIT $3"""
DELETE = "DELETE FROM webhook_subscriptions WHERE id = $1"
RESUME = f"""UPDATE webhook_subscriptions SET state = {WebhookState.ACTIVE}, attempts = 0, next_attempt_at = now()
WHERE id = $1 RETURNING {_COLUMNS}"""
# Due now: retries whose time has come, a lease that ran out (its worker died), and on a wake-up every
# caught-up subscription.
CLAIM = NamedSQL(f"""
UPDATE webhook_subscriptions s SET lease_token = :token, lease_until = now() + make_interval(secs => :lease_s)
WHERE s.id IN (
    SELECT id FROM webhook_subscriptions
    WHERE state = {WebhookState.ACTIVE} AND (lease_until IS NULL OR lease_until < now())
      AND ((attempts > 0 AND next_attempt_at <= now()) OR (attempts = 0 AND (:idle_too OR lease_until IS NOT NULL)))
    ORDER BY next_attempt_at LIMIT :limit FOR UPDATE SKIP LOCKED)
RETURNING {_COLUMNS}""")
NEXT_RETRY = f"""SELECT min(COALESCE(lease_until, next_attempt_at)) FILTER (WHERE attempts > 0 OR lease_until IS NOT NULL),
    count(*) > 0 FROM webhook_subscriptions WHERE state = {WebhookState.ACTIVE}"""
_LOG = """INSERT INTO webhook_deliveries (subscription, event_id, attempt, outcome, http_status, error, latency_ms)
    SELECT id, :event_id, :attempt, :outcome, :http_status, :error, :latency_ms FROM up"""
DELIVERED = NamedSQL(f"""
WITH up AS (UPDATE webhook_subscriptions SET position_xid = :xid, position_seq = :seq, delivered_event = :event_id,
    attempts = 0, next_attempt_at = now()
    WHERE id = :id AND lease_token = :token RETURNING id)
{_LOG}""")
FAILED = NamedSQL(f"""
WITH up AS (UPDATE webhook_subscriptions SET attempts = :attempt,
    next_attempt_at = now() + make_interval(secs => :retry_in_s),
    state = CASE WHEN :dead THEN {WebhookState.DEAD_LETTERED} ELSE state END, lease_token = NULL, lease_until = NULL
    WHERE id = :id AND lease_token = :token RETURNING id)
{_LOG}""")
# Caught up (or stopped at a pending horizon): the position moves past events the filter skipped.
RELEASE = """UPDATE webhook_subscriptions SET lease_token = NULL, lease_until = NULL,
    position_xid = CASE WHEN (position_xid, position_seq) < ($3::bigint, $4::bigint) THEN $3 ELSE position_xid END,
    position_seq = CASE WHEN (position_xid, position_seq) < ($3::bigint, $4::bigint) THEN $4 ELSE position_seq END
WHERE id = $1 AND lease_token = $2"""
LIST_DELIVERIES = """SELECT id, event_id, attempt, outcome, http_status, error, latency_ms, time FROM webhook_deliveries
WHERE subscription = $1 AND ($2::bigint IS NULL OR id < $2) ORDER BY id DESC LIMIT $3"""
PRUNE_DELIVERIES = "DELETE FROM webhook_deliveries WHERE time < $1"


def _subscription(r: asyncpg.Record) -> WebhookSubscription:
    f = FeedFilter(r["owner_filter"], EventKind(r["kind"]), RatingScope(r["scope"]), r["aspect"])
    return WebhookSubscription(r["id"], r["url"], f, WebhookState(r["state"]), Position(r["position_xid"], r["position_seq"]),
                               r["delivered_event"], r["attempts"], r["next_attempt_at"], r["creator"], r["create_time"],
                               bytes(r["secret_encrypted"]), str(r["lease_token"] or ""))


class WebhookStore:
    """Subscriptions and deliveries over `self.pool`."""

    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool

    async def create_subscription(self, sid: str, url: str, sealed: bytes, f: FeedFilter, creator: str,
                                  request_id: uuid.UUID | None) -> tuple[WebhookSubscription, bool]:
        """(the subscription, created now); a retry of `request_id` returns the first one, not created."""
        got = await self.pool.fetchrow(*INSERT_SUBSCRIPTION.bind({
            "id": sid, "url": url, "secret": sealed, "owner": f.owner, "kind": f.kind, "scope": f.scope,
            "aspect": f.aspect, "creator": creator, "request_id": request_id}))
        if got is not None:
            return _subscription(got), True
        return _subscription(await self.pool.fetchrow(BY_REQUEST, creator, request_id)), False

    async def list_subscriptions(self, after: tuple[dt.datetime, str] | None, limit: int) -> list[WebhookSubscription]:
        a = after or (None, "")
        return [_subscription(r) for r in await self.pool.fetch(LIST, *a, limit)]

    async def delete_subscription(self, sid: str) -> bool:
        return (await self.pool.execute(DELETE, sid)) != "DELETE 0"

    async def resume_subscription(self, sid: str) -> WebhookSubscription | None:
        r = await self.pool.fetchrow(RESUME, sid)
        return _subscription(r) if r is not None else None

    async def claim_subscriptions(self, idle_too: bool, lease_s: float, limit: int) -> list[WebhookSubscription]:
        token = uuid.uuid4()
        return [_subscription(r) for r in await self.pool.fetch(*CLAIM.bind(
            {"token": token, "lease_s": lease_s, "idle_too": idle_too, "limit": limit}))]

    async def next_retry(self) -> tuple[dt.datetime | None, bool]:
        """(when the earliest retry or another worker's lease is due, whether any subscription is ACTIVE)."""
        r = await self.pool.fetchrow(NEXT_RETRY)
        return r[0], r[1]

    async def delivered(self, s: WebhookSubscription, position: Position, d: Delivery) -> bool:
        """Record a delivery and move past its event; False when the lease was lost meanwhile."""
        return (await self.pool.execute(*DELIVERED.bind({
            "id": s.id, "token": uuid.UUID(s.lease_token), "xid": position.xid, "seq": position.seq,
            **_log_values(d)}))) != "INSERT 0 0"

    async def failed(self, s: WebhookSubscription, d: Delivery, retry_in_s: float, dead: bool) -> None:
        await self.pool.execute(*FAILED.bind({"id": s.id, "token": uuid.UUID(s.lease_token), "retry_in_s": retry_in_s,
                                              "dead": dead, **_log_values(d)}))

    async def release(self, s: WebhookSubscription, through: Position) -> None:
        await self.pool.execute(RELEASE, s.id, uuid.UUID(s.lease_token), through.xid, through.seq)

    async def list_deliveries(self, sid: str, before_id: int | None, limit: int) -> list[Delivery]:
        got = await self.pool.fetch(LIST_DELIVERIES, sid, before_id, limit)
        return [Delivery(r["event_id"], r["attempt"], DeliveryOutcome(r["outcome"]), r["http_status"], r["error"],
                         r["latency_ms"], r["time"], r["id"]) for r in got]

    async def prune_deliveries(self, before: dt.datetime) -> None:
        await self.pool.execute(PRUNE_DELIVERIES, before)


def _log_values(d: Delivery) -> dict[str, object]:
    return {"event_id": d.event_id, "attempt": d.attempt, "outcome": d.outcome, "http_status": d.http_status,
            "error": d.error, "latency_ms": d.latency_ms}
