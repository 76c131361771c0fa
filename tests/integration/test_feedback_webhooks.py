"""Signed webhooks (issue 24) over real gRPC, a real PostgreSQL and a real HTTP receiver (aiohttp on
loopback) that verifies every request with the Standard Webhooks library: a receiver that is down while
changes happen gets every event, in feed order, once it is back; a subscription whose receiver never
answers is dead-lettered after its attempts and, resumed, delivers what it stopped at; the delivery log
and the secret's handling (shown once, encrypted at rest); the address guard (no delivery to a private,
link-local or other non-public address, named literally or resolved from a name, unless the operator
allows private networks)."""
from __future__ import annotations

import asyncio
import json
import time

import asyncpg
import grpc
import pytest
from agentfeedback.feedback.v1 import feedback_pb2 as pb

from services.common.auth import SCOPE_FEEDBACK_ADMIN, SCOPE_FEEDBACK_WRITE
from services.common.errors import error_info
from tests.helpers.cli import _cli
from tests.helpers.feedback import expect_error, flag, new_instance, rid, send
from tests.helpers.webhooks import HostsResolver, Listener, Receiver, feed_event_ids
from tests.stack import start_stack

FAST = {"webhook_backoff_first_s": 0.1, "webhook_backoff_max_s": 0.4}


async def _wait(cond, timeout_s: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_a_receiver_down_while_changes_happen_gets_every_event_signed_and_in_order(database_url, tmp_path):
    stack = await start_stack(database_url, tmp_path, feedback=FAST)
    receiver = Receiver()
    try:
        await receiver.up()
        await receiver.down()  # its port is known; nothing listens there now
        fb = stack.feedback()
        admin = stack.md("ops", (SCOPE_FEEDBACK_ADMIN,))
        req = pb.CreateWebhookSubscriptionRequest(webhook_subscription=pb.WebhookSubscription(url=receiver.url),
                                                  request_id=rid())
        sub = await fb.CreateWebhookSubscription(req, metadata=admin)
        assert sub.secret.startswith("whsec_") and sub.state == pb.WebhookSubscription.STATE_ACTIVE
        receiver.secret = sub.secret
        again = await fb.CreateWebhookSubscription(req, metadata=admin)  # a retry: the same one
        assert (again.name, again.secret) == (sub.name, sub.secret)
        listed = await fb.ListWebhookSubscriptions(pb.ListWebhookSubscriptionsRequest(), metadata=admin)
        assert [s.name for s in listed.webhook_subscriptions] == [sub.name] and listed.webhook_subscriptions[0].secret == ""
        conn = await asyncpg.connect(database_url, server_settings={"search_path": "feedback"})
        stored = await conn.fetchval("SELECT secret_encrypted FROM webhook_subscriptions")
        await conn.close()
        assert sub.secret.encode() not in bytes(stored) and sub.secret[6:].encode() not in bytes(stored)

        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        report = await flag(stack, t.reply.name, "alice's words")
        for sentiment in (pb.RATING_SENTIMENT_NEGATIVE, pb.RATING_SENTIMENT_POSITIVE):
            await fb.PutRating(pb.PutRatingRequest(rating=pb.Rating(
                conversation=inst, turn_index=t.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE, aspect="reaction",
                sentiment=sentiment, note="alice's note"), request_id=rid()), metadata=stack.md())
        await fb.DeleteFeedback(pb.DeleteFeedbackRequest(name=report.name), metadata=stack.md())

        async def failures() -> list[pb.WebhookDelivery]:
            log = await fb.ListWebhookDeliveries(pb.ListWebhookDeliveriesRequest(parent=sub.name), metadata=admin)
            return list(log.deliveries)

        deadline = time.monotonic() + 20
        while len(await failures()) < 3:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        log = await failures()
        assert {d.outcome for d in log} == {pb.WebhookDelivery.OUTCOME_FAILED} and {d.http_status for d in log} == {0}
        assert len({d.event_id for d in log}) == 1  # in order: it keeps retrying the first event, nothing after it
        assert receiver.got == []

        await receiver.up()  # back: everything arrives, in feed order, each signature verified
        expected = await feed_event_ids(database_url)
        await _wait(lambda: [p["data"]["id"] for p in receiver.got] == expected, what=f"got {receiver.got}")
        assert receiver.bad == []
        assert [p["type"] for p in receiver.got] == ["feedback.created", "rating.created", "rating.updated",
                                                     "feedback.deleted"]
        assert "alice's" not in str(receiver.got)  # no owner's words leave through a webhook
        assert "feedback" not in receiver.got[0]["data"]  # deleted since: the event names it, as it is now
        assert receiver.got[1]["data"]["textOmitted"] is True and "note" not in receiver.got[1]["data"]["rating"]
        log = await failures()
        assert log[0].outcome == pb.WebhookDelivery.OUTCOME_DELIVERED and log[0].http_status == 204
        assert log[0].latency_ms > 0
        current = (await fb.ListWebhookSubscriptions(pb.ListWebhookSubscriptionsRequest(), metadata=admin)
                   ).webhook_subscriptions[0]
        assert current.delivered_event_id == expected[-1] and current.failed_attempts == 0

        await fb.DeleteWebhookSubscription(pb.DeleteWebhookSubscriptionRequest(name=sub.name), metadata=admin)
        await expect_error(fb.DeleteWebhookSubscription(pb.DeleteWebhookSubscriptionRequest(name=sub.name),
                                                        metadata=admin), grpc.StatusCode.NOT_FOUND)
    finally:
        await receiver.down()
        await stack.stop()


async def test_a_subscription_that_fails_every_attempt_is_dead_lettered_and_resumes_where_it_stopped(
        database_url, tmp_path):
    stack = await start_stack(database_url, tmp_path, feedback={**FAST, "webhook_max_attempts": 3})
    receiver = Receiver()
    try:
        await receiver.up()
        await receiver.down()
        fb = stack.feedback()
        admin = stack.md("ops", (SCOPE_FEEDBACK_ADMIN,))
        sub = await fb.CreateWebhookSubscription(pb.CreateWebhookSubscriptionRequest(
            webhook_subscription=pb.WebhookSubscription(url=receiver.url, kind=pb.FEEDBACK_EVENT_KIND_FEEDBACK)),
            metadata=admin)
        receiver.secret = sub.secret
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        report = await flag(stack, t.reply.name, "wrong")

        async def state() -> pb.WebhookSubscription:
            return (await fb.ListWebhookSubscriptions(pb.ListWebhookSubscriptionsRequest(), metadata=admin)
                    ).webhook_subscriptions[0]

        deadline = time.monotonic() + 20
        while (await state()).state != pb.WebhookSubscription.STATE_DEAD_LETTERED:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        log = (await fb.ListWebhookDeliveries(pb.ListWebhookDeliveriesRequest(parent=sub.name), metadata=admin)).deliveries
        assert [(d.attempt, d.outcome) for d in log] == [(3, pb.WebhookDelivery.OUTCOME_DEAD_LETTERED),
                                                         (2, pb.WebhookDelivery.OUTCOME_FAILED),
                                                         (1, pb.WebhookDelivery.OUTCOME_FAILED)]
        await receiver.up()
        await asyncio.sleep(1.0)
        assert receiver.got == []  # dead-lettered: nothing is sent, even to a receiver that is back
        await fb.ResumeWebhookSubscription(pb.ResumeWebhookSubscriptionRequest(name=sub.name), metadata=admin)
        await fb.UpdateFeedback(pb.UpdateFeedbackRequest(feedback=pb.Feedback(name=report.name, status=pb.STATUS_FILED),
                                                         update_mask={"paths": ["status"]}), metadata=stack.md())
        await _wait(lambda: len(receiver.got) == 2, what=f"got {receiver.got}")
        assert [p["type"] for p in receiver.got] == ["feedback.created", "feedback.filed"]
    finally:
        await receiver.down()
        await stack.stop()


@pytest.mark.parametrize("url", ["http://example.com/hook", "ftp://127.0.0.1/x", "not a url", "https://", "",
                                 "https://[::1", "https://hooks.example.com/\r\nX-Injected: 1"])
async def test_a_subscription_needs_https_or_a_loopback_url_and_feedback_admin(stack, url):
    fb = stack.feedback()
    e = await expect_error(fb.CreateWebhookSubscription(pb.CreateWebhookSubscriptionRequest(
        webhook_subscription=pb.WebhookSubscription(url=url)), metadata=stack.md("ops", (SCOPE_FEEDBACK_ADMIN,))),
        grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "webhook_subscription.url"
    await expect_error(fb.CreateWebhookSubscription(pb.CreateWebhookSubscriptionRequest(
        webhook_subscription=pb.WebhookSubscription(url="https://hooks.example.com/x")),
        metadata=stack.md("alice", (SCOPE_FEEDBACK_WRITE,))), grpc.StatusCode.PERMISSION_DENIED)


# One literal address of each kind that is not public (the create refuses them all, naming the field).
NOT_PUBLIC = ["https://10.0.0.5/hook", "https://192.168.1.1/", "https://172.16.0.1/", "https://[fd00::1]/",
              "https://169.254.169.254/latest/meta-data/", "https://[fe80::1]/", "https://100.64.0.1/",
              "https://224.0.0.1/", "https://[ff02::1]/", "https://0.0.0.0/", "https://[::]/", "https://240.0.0.1/",
              "https://[::ffff:10.0.0.5]/", "https://[fd00:ec2::254]/", "https://2130706433/",
              "https://１６９.２５４.１６９.２５４/latest", "https://192。168。1。1/", "https://10.0.0.5./"]


async def test_a_subscription_to_an_address_that_is_not_public_is_refused_naming_the_field(stack):
    fb = stack.feedback()
    admin = stack.md("ops", (SCOPE_FEEDBACK_ADMIN,))
    for url in NOT_PUBLIC + ["https://10.0.0.5/" + "x" * 2000]:
        e = await expect_error(fb.CreateWebhookSubscription(pb.CreateWebhookSubscriptionRequest(
            webhook_subscription=pb.WebhookSubscription(url=url), request_id=rid()), metadata=admin),
            grpc.StatusCode.INVALID_ARGUMENT)
        assert error_info(e).metadata["field"] == "webhook_subscription.url", url
        assert len(e.details()) < 300 and "xxxx" not in e.details(), e.details()  # short, the URL not echoed
    listed = await fb.ListWebhookSubscriptions(pb.ListWebhookSubscriptionsRequest(), metadata=admin)
    assert list(listed.webhook_subscriptions) == []


# Names the delivery looks up in a fixed table (HostsResolver: what /etc/hosts would say); the system's
# resolver knows none of them (`.test` is reserved), so a connection to 127.0.0.1 can only come from this table.
NAMES = {"loopback.hooks.test": ["127.0.0.1"], "private.hooks.test": ["10.0.0.5"],
         "mixed.hooks.test": ["93.184.215.14", "10.0.0.5"]}


async def test_a_name_that_resolves_to_a_loopback_or_private_address_is_refused_at_delivery_and_dead_lettered(
        database_url, tmp_path):
    resolver = HostsResolver(NAMES)
    stack = await start_stack(database_url, tmp_path, feedback=FAST, feedback_kw={"webhook_resolver": resolver})
    listener = Listener()
    try:
        await listener.start()
        fb = stack.feedback()
        admin = stack.md("ops", (SCOPE_FEEDBACK_ADMIN,))
        subs = {}
        for name, kind in (("loopback.hooks.test", "loopback"), ("private.hooks.test", "private"),
                           ("mixed.hooks.test", "private")):  # a name is checked at delivery, not at create
            subs[kind, name] = await fb.CreateWebhookSubscription(pb.CreateWebhookSubscriptionRequest(
                webhook_subscription=pb.WebhookSubscription(url=f"https://{name}:{listener.port}/hook"),
                request_id=rid()), metadata=admin)
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        await flag(stack, t.reply.name, "wrong")

        async def states() -> set[int]:
            got = await fb.ListWebhookSubscriptions(pb.ListWebhookSubscriptionsRequest(), metadata=admin)
            return {s.state for s in got.webhook_subscriptions}

        deadline = time.monotonic() + 20
        while await states() != {pb.WebhookSubscription.STATE_DEAD_LETTERED}:
            assert time.monotonic() < deadline, await states()
            await asyncio.sleep(0.1)
        for (kind, _name), sub in subs.items():
            log = (await fb.ListWebhookDeliveries(pb.ListWebhookDeliveriesRequest(parent=sub.name),
                                                  metadata=admin)).deliveries
            # Refused at once: a retry would be refused again. The log says why, as the CLI and console show it.
            assert [(d.attempt, d.outcome, d.http_status) for d in log] == [
                (1, pb.WebhookDelivery.OUTCOME_DEAD_LETTERED, 0)]
            assert log[0].error.startswith(f"refused: the host resolves to a {kind} address"), log[0].error
            assert "10.0.0.5" not in log[0].error and "127.0.0.1" not in log[0].error
        assert listener.connections == 0  # nothing reached the address
        assert set(NAMES) <= set(resolver.asked)
        await asyncio.sleep(0.5)
        assert listener.connections == 0 and await states() == {pb.WebhookSubscription.STATE_DEAD_LETTERED}
    finally:
        await listener.stop()
        await stack.stop()


async def test_allowing_private_networks_lets_a_private_subscription_be_created_and_delivered_to(
        database_url, tmp_path):
    stack = await start_stack(database_url, tmp_path, feedback={**FAST, "webhook_allow_private_networks": True},
                              feedback_kw={"webhook_resolver": HostsResolver(NAMES)})
    listener = Listener()
    try:
        await listener.start()
        fb = stack.feedback()
        admin = stack.md("ops", (SCOPE_FEEDBACK_ADMIN,))
        for url in ("https://10.0.0.5/hook", "https://[fd00::1]/hook", "https://100.64.0.1/hook"):
            made = await fb.CreateWebhookSubscription(pb.CreateWebhookSubscriptionRequest(
                webhook_subscription=pb.WebhookSubscription(url=url), request_id=rid()), metadata=admin)
            # Nothing listens there: deleted before any event, so no delivery waits on an unreachable address.
            await fb.DeleteWebhookSubscription(pb.DeleteWebhookSubscriptionRequest(name=made.name), metadata=admin)
        for url in ("https://169.254.169.254/latest/meta-data/", "https://[fd00:ec2::254]/", "http://10.0.0.5/hook"):
            e = await expect_error(fb.CreateWebhookSubscription(pb.CreateWebhookSubscriptionRequest(
                webhook_subscription=pb.WebhookSubscription(url=url), request_id=rid()), metadata=admin),
                grpc.StatusCode.INVALID_ARGUMENT)  # metadata and link-local stay refused; private is https too
            assert error_info(e).metadata["field"] == "webhook_subscription.url"
        sub = await fb.CreateWebhookSubscription(pb.CreateWebhookSubscriptionRequest(
            webhook_subscription=pb.WebhookSubscription(url=f"https://loopback.hooks.test:{listener.port}/hook"),
            request_id=rid()), metadata=admin)
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        await flag(stack, t.reply.name, "wrong")
        await _wait(lambda: listener.connections > 0, what="no connection")  # to the address the name resolved to
        deadline = time.monotonic() + 20
        while not (log := (await fb.ListWebhookDeliveries(pb.ListWebhookDeliveriesRequest(parent=sub.name),
                                                          metadata=admin)).deliveries):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        # The listener closes without a TLS handshake: an ordinary failure, retried, not a refusal.
        assert log[-1].outcome == pb.WebhookDelivery.OUTCOME_FAILED and not log[-1].error.startswith("refused")
    finally:
        await listener.stop()
        await stack.stop()


async def test_the_cli_creates_lists_resumes_and_deletes_a_subscription(stack):
    empty = await _cli(stack, "webhook", "list", sub="ops")
    assert empty.exit_code == 0 and empty.stdout == "" and empty.stderr == "no webhook subscriptions\n"
    made = await _cli(stack, "webhook", "create", "https://hooks.example.com/feedback", "--kind", "rating",
                      sub="ops")
    assert made.exit_code == 0, made.output
    name, secret_line = made.output.splitlines()[:2]
    assert name.startswith("webhookSubscriptions/") and secret_line.startswith("secret (shown once): whsec_")
    listed = await _cli(stack, "webhook", "list", sub="ops")
    (row,) = [json.loads(x) for x in listed.output.splitlines()]
    assert row["name"] == name and row["kind"] == "FEEDBACK_EVENT_KIND_RATING" and "secret" not in row
    assert (await _cli(stack, "webhook", "resume", name, sub="ops")).exit_code == 0
    assert (await _cli(stack, "webhook", "deliveries", name, sub="ops")).exit_code == 0
    assert (await _cli(stack, "webhook", "delete", name, sub="ops")).output.strip() == f"deleted {name}"
    gone = await _cli(stack, "webhook", "delete", name, sub="ops")
    assert gone.exit_code == 1 and gone.output.startswith("NOT_FOUND")
    assert (await _cli(stack, "webhook", "list", sub="ops")).stderr == "no webhook subscriptions\n"
