"""Signed webhooks, the use case (issue 24; docs/architecture.md "The change feed"): subscriptions
(`feedback:admin`) and the delivery worker that POSTs each change-feed event to them.

Each event is one POST, signed per the Standard Webhooks specification with the `standardwebhooks`
library (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md):
`webhook-id` = the event id (the same on every retry, so a receiver deduplicates on it),
`webhook-timestamp` = the attempt's Unix time, `webhook-signature` = `v1,` + base64 HMAC-SHA256 of
`id.timestamp.body` under the subscription's secret. The body is `{"type", "timestamp", "data"}` with
`data` the WatchFeedback event (proto JSON), never an owner's words.

Order and at least once: one worker at a time holds a subscription (a lease, repository/webhooks.py),
sends its events in feed order and moves its position only after a 2xx; a failure stops the
subscription at that event and retries it after `backoff_first_s` × 2^(attempt-1) (at most
`backoff_max_s`); after `max_attempts` it is DEAD_LETTERED and sends nothing until resumed. The defaults
(1 s doubling to 5 min, 30 attempts ≈ 2 h) carry a receiver that is down for an hour. Workers wake on the
change feed's wake-ups and on the next retry's time, never on a polling loop. A worker whose last pass
found no ACTIVE subscription waits only for a subscription to be created or resumed on any replica
(`FeedWakeups.subscriptions_changed`), or `IDLE_RECHECK_S`: the writes then cost it no statement.

Where it may connect (webhook_addresses): only to public addresses, loopback as `check_url` allows it,
and private ones when the operator sets `webhook_allow_private_networks`. A literal address is checked at
create; every address a name resolves to is checked at each new connection, and the connection goes to
the addresses checked. A refused address does not change by retrying, so that attempt dead-letters the
subscription at once. Its log says why (`refused: the host resolves to a private address …`), and
ResumeWebhookSubscription tries again after the operator has fixed the name or the setting.
"""
from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import json
import logging
import ssl
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

import aiohttp
import certifi
from aiohttp.abc import AbstractResolver
from google.protobuf.json_format import MessageToDict
from standardwebhooks.webhooks import Webhook

from services.common.auth import Principal
from services.common.clip import clip
from services.common.errors import InvalidArgument, NotFound
from services.common.ids import new_id
from services.common.incidents import log_failure
from services.feedback import webhook_secrets
from services.feedback.feed import FeedItem
from services.feedback.feed_wakeups import FeedWakeups
from services.feedback.model.feed import FeedEvent, FeedFilter
from services.feedback.model.webhooks import Delivery, DeliveryOutcome, WebhookSubscription
from services.feedback.repository.feed import FeedStore
from services.feedback.repository.webhooks import WebhookStore
from services.feedback.urls import split_http_url
from services.feedback.webhook_addresses import (LOOPBACK_NAMES, NUMERIC, PRIVATE_KINDS, AddressRefused,
                                                   GuardedResolver, delivery_host, host_refusal)
from services.feedback.webhook_secrets import SecretBox

log = logging.getLogger(__name__)

URL_FIELD = "webhook_subscription.url"
URL_MAX_CHARS = 2048
# Events one worker sends a subscription per lease, and subscriptions it serves at once.
PAGE = 20
CLAIM_LIMIT = 32
PRUNE_INTERVAL_S = 3600.0
# Least time between two passes woken by commits: every write wakes the worker, and a pass is two
# statements even with no subscription, so a burst of writes is served by one pass every PASS_GAP_S.
PASS_GAP_S = 0.05
# With no ACTIVE subscription, a look every IDLE_RECHECK_S anyway (one made by hand-run SQL, prunes).
IDLE_RECHECK_S = 60.0


def check_url(url: str, allow_private: bool = False) -> str:
    """`url` when a subscription may deliver to it, else INVALID_ARGUMENT naming `URL_FIELD`.
    Allowed: an https URL, or an http URL to a loopback address or `localhost` (tests, a sidecar). The URL
    is first checked by `urls.split_http_url` (characters, parse, port). If the host is a literal address,
    it must be public or loopback; `allow_private` also allows private ones (webhook_addresses). A name is
    checked at delivery, against each address it resolves to."""
    parts = split_http_url(url, URL_FIELD, URL_MAX_CHARS)
    host = delivery_host(url)
    if not host:
        raise InvalidArgument(URL_FIELD, "host must be a valid name or address")
    kind = host_refusal(host, allow_private)
    if kind == NUMERIC:
        raise InvalidArgument(URL_FIELD, "host must be a name, a dotted-quad IPv4 address or an IPv6 address")
    loopback = host in LOOPBACK_NAMES
    with contextlib.suppress(ValueError):
        loopback = loopback or ipaddress.ip_address(host.rstrip(".")).is_loopback
    if parts.scheme != "https" and not loopback:
        raise InvalidArgument(URL_FIELD, "must be https://, or http:// to a loopback address")
    if kind is not None:
        hint = " (an operator may allow private networks)" if kind in PRIVATE_KINDS else ""
        raise InvalidArgument(URL_FIELD, f"host is a {kind} address: receivers must be on public addresses{hint}")
    return url


def event_type(e: FeedEvent) -> str:
    """The Standard Webhooks `type`: `feedback.created`, `rating.updated`, `evaluation.created`, `feedback.filed`, …"""
    return f"{e.kind.name.lower()}.{e.type.name.lower()}"


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    timeout_s: float
    max_attempts: int
    backoff_first_s: float
    backoff_max_s: float

    def retry_in(self, attempt: int) -> float:
        return min(self.backoff_first_s * 2 ** max(0, attempt - 1), self.backoff_max_s)


class Webhooks:
    """Subscriptions and delivery. `encode(item) -> proto event` renders an event like WatchFeedback's.
    `allow_private`: webhook_allow_private_networks. `resolver`: where delivery looks up a receiver's name
    before the guard checks the answer (default: the system's resolver; tests pass a fixed table)."""

    def __init__(self, store: WebhookStore, feed: FeedStore, wakeups: FeedWakeups, box: SecretBox,
                 policy: DeliveryPolicy, encode: Callable[[FeedItem], object], retention_days: int,
                 allow_private: bool = False, resolver: AbstractResolver | None = None):
        self._store, self._feed, self._wakeups, self._box = store, feed, wakeups, box
        self._policy, self._encode, self._retention_days = policy, encode, retention_days
        self._allow_private = allow_private
        self._resolver = GuardedResolver(allow_private, resolver)
        self._http: aiohttp.ClientSession | None = None  # opened by the first delivery, on the running loop
        self._task: asyncio.Task | None = None
        self._stopping = False

    # ------------------------------------------------------------ subscriptions (feedback:admin)
    async def create(self, p: Principal, url: str, f: FeedFilter, request_id: uuid.UUID | None
                     ) -> tuple[WebhookSubscription, str]:
        """A new subscription from now on, and its secret (shown once). A retry with the same request id
        returns the first subscription and the same secret. If `check_url` refuses the URL, INVALID_ARGUMENT
        naming `webhook_subscription.url`."""
        secret = webhook_secrets.new_secret()
        sub, _created = await self._store.create_subscription(new_id(), check_url(url, self._allow_private),
                                                              self._box.seal(secret), f,
                                                              p.sub, request_id)
        await self._wakeups.announce_subscriptions()
        return sub, self._box.open(sub.secret_encrypted)

    async def list(self, after: tuple[dt.datetime, str] | None, size: int) -> list[WebhookSubscription]:
        return await self._store.list_subscriptions(after, size + 1)

    async def delete(self, sid: str) -> None:
        if not await self._store.delete_subscription(sid):
            raise NotFound(f"webhookSubscriptions/{sid}")

    async def resume(self, sid: str) -> WebhookSubscription:
        got = await self._store.resume_subscription(sid)
        if got is None:
            raise NotFound(f"webhookSubscriptions/{sid}")
        await self._wakeups.announce_subscriptions()
        return got

    async def deliveries(self, sid: str, before_id: int | None, size: int) -> list[Delivery]:
        return await self._store.list_deliveries(sid, before_id, size + 1)

    # ------------------------------------------------------------ the delivery worker
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="feedback-webhooks")

    async def stop(self) -> None:
        self._stopping = True
        self._wakeups.wake_subscriptions()
        if self._task is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._task, self._policy.timeout_s + 1)
        if self._http is not None:
            await self._http.close()
        await self._resolver.close()

    def _session(self) -> aiohttp.ClientSession:
        # aiohttp connects to the addresses its resolver returns, so the guard's check covers the connection.
        # No proxies from the environment, no redirects (the check applies to this URL only), and certifi's
        # CA bundle, which the httpx client used before.
        if self._http is None:
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(resolver=self._resolver,
                                               ssl=ssl.create_default_context(cafile=certifi.where())),
                timeout=aiohttp.ClientTimeout(total=self._policy.timeout_s), trust_env=False)
        return self._http

    async def _loop(self) -> None:
        idle_too, next_prune, last_pass = True, 0.0, 0.0
        while not self._stopping:
            if idle_too and (gap := last_pass + PASS_GAP_S - time.monotonic()) > 0:
                await asyncio.sleep(gap)
                if self._stopping:
                    break
            last_pass = time.monotonic()
            woken = self._wakeups.changed()  # before the pass: a commit during it makes another pass
            subscribed = self._wakeups.subscriptions_changed()  # likewise for a subscription made meanwhile
            timeout: float | None = None
            active = True
            try:
                if time.monotonic() >= next_prune:
                    next_prune = time.monotonic() + PRUNE_INTERVAL_S
                    await self._store.prune_deliveries(dt.datetime.now(dt.UTC) - dt.timedelta(days=self._retention_days))
                if await self.run_once(idle_too):
                    timeout = 0.05  # committed events wait behind a running transaction
                due, active = await self._store.next_retry()
                if due is not None:
                    wait = max(0.01, (due - dt.datetime.now(dt.UTC)).total_seconds())
                    timeout = wait if timeout is None else min(timeout, wait)
            except Exception as e:  # noqa: BLE001 - the loop outlives a bad pass; the next one retries
                # A database outage counts in its incident (one line, the rest counted), as the other
                # background workers' do; anything else is a bug, logged every time.
                log_failure(log, "webhook delivery pass failed", e)
                timeout = 1.0
            if not active and not self._stopping:
                # Nothing to deliver on any replica: the writes' wake-ups are not ours until a subscription is.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(subscribed.wait(), IDLE_RECHECK_S)
                idle_too = True
                continue
            try:
                await asyncio.wait_for(woken.wait(), timeout)
                idle_too = True
            except TimeoutError:
                idle_too = False

    async def run_once(self, idle_too: bool = True) -> bool:
        """One pass over the due subscriptions (each in order, all at once); True when one stopped at
        committed events still behind a running transaction."""
        lease_s = PAGE * (self._policy.timeout_s + 1) + 30
        subs = await self._store.claim_subscriptions(idle_too, lease_s, CLAIM_LIMIT)
        return any(await asyncio.gather(*(self._serve(s) for s in subs)))

    async def _serve(self, s: WebhookSubscription) -> bool:
        try:
            secret = self._box.open(s.secret_encrypted)
        except ValueError:
            log.error("webhook %s: its secret cannot be read with this replica's key", s.id)
            return False
        signer = Webhook(secret)
        pos = s.position
        while True:
            page = await self._feed.feed_page(pos, s.filter, PAGE)
            if page.events:
                res = await self._feed.feed_resources(page.events)
            for e in page.events:
                item = FeedItem(e.position, e, *res.item_of(e), with_text=False)
                d = await self._post(s, signer, e, item)
                if d.outcome != DeliveryOutcome.DELIVERED:
                    # A refused address (already DEAD_LETTERED by _post) would be refused again on every retry.
                    refused = d.outcome == DeliveryOutcome.DEAD_LETTERED
                    dead = refused or d.attempt >= self._policy.max_attempts
                    await self._store.failed(s, replace(d, outcome=DeliveryOutcome.DEAD_LETTERED) if dead else d,
                                             self._policy.retry_in(d.attempt), dead)
                    if dead and not refused:
                        log.warning("webhook %s dead-lettered at event %s after %d attempts", s.id, e.id, d.attempt)
                    return False
                if not await self._store.delivered(s, e.position, d):
                    return False  # the lease ran out meanwhile: another worker carries on
                s, pos = replace(s, attempts=0), e.position
            if len(page.events) < PAGE:
                await self._store.release(s, page.through)
                return page.pending

    async def _post(self, s: WebhookSubscription, signer: Webhook, e: FeedEvent, item: FeedItem) -> Delivery:
        event = self._encode(item)
        body = json.dumps({"type": event_type(e), "timestamp": _rfc3339(e.change_time),
                           "data": MessageToDict(event)}, separators=(",", ":"), ensure_ascii=False)
        now = dt.datetime.now(dt.UTC)
        headers = {"content-type": "application/json", "webhook-id": e.id,
                   "webhook-timestamp": str(int(now.timestamp())), "webhook-signature": signer.sign(e.id, now, body)}
        attempt = s.attempts + 1
        host = delivery_host(s.url) or ""
        t0 = time.perf_counter()
        try:
            if (kind := host_refusal(host, self._allow_private)) is not None:  # aiohttp resolves no literal address
                raise AddressRefused(kind, host, resolved=False)
            async with self._session().post(s.url, data=body.encode(), headers=headers, allow_redirects=False) as r:
                ms = (time.perf_counter() - t0) * 1000
                ok = 200 <= r.status < 300
                return Delivery(e.id, attempt, DeliveryOutcome.DELIVERED if ok else DeliveryOutcome.FAILED, r.status,
                                "" if ok else clip(f"HTTP {r.status} {r.reason or ''}".rstrip()), ms)
        except AddressRefused as err:
            log.warning("webhook %s dead-lettered at event %s: %s %s %s", s.id, e.id, clip(host),
                        "resolves to" if err.resolved else "is", err)
            return Delivery(e.id, attempt, DeliveryOutcome.DEAD_LETTERED, 0, err.reason(),
                            (time.perf_counter() - t0) * 1000)
        except (aiohttp.ClientError, TimeoutError) as err:
            return Delivery(e.id, attempt, DeliveryOutcome.FAILED, 0, type(err).__name__,
                            (time.perf_counter() - t0) * 1000)


def _rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
