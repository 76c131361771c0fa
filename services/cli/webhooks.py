"""`agentfeedback webhook create|list|delete|resume|deliveries` (issue 24; needs `feedback:admin`).

Each command is one FeedbackService RPC with the caller's token; `create` prints the signing secret, which
the service never shows again (keep it where the receiver verifies signatures).
"""
from __future__ import annotations

import json
import uuid

import click
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from google.protobuf.json_format import MessageToDict

from services.cli.client import Clients
from services.cli.triage import EVENT_KINDS, KIND_HELP, _run


def _name(value: str) -> str:
    return value if value.startswith("webhookSubscriptions/") else f"webhookSubscriptions/{value}"


@click.group()
def webhook() -> None:
    """Signed webhooks of the change feed (Standard Webhooks)."""


@webhook.command("create")
@click.argument("url")
@click.option("--owner", default="", help="Only this owner's changes.")
@click.option("--kind", type=click.Choice(["feedback", "rating", "evaluation"]), default=None, help=KIND_HELP)
@click.option("--aspect", default="", help="Only ratings of this aspect (evaluations of this name).")
@_run
async def create_cmd(c: Clients, url: str, owner: str, kind: str | None, aspect: str):
    """Subscribe URL (https to a public address, or http to loopback) to every change from now on; prints the
    secret once."""
    sub = await c.feedback().CreateWebhookSubscription(pb.CreateWebhookSubscriptionRequest(
        webhook_subscription=pb.WebhookSubscription(url=url, owner=owner, kind=EVENT_KINDS[kind], aspect=aspect),
        request_id=str(uuid.uuid4())), metadata=c.md, timeout=c.settings.timeout_s)
    click.echo(f"{sub.name}\nsecret (shown once): {sub.secret}")


@webhook.command("list")
@_run
async def list_cmd(c: Clients):
    """Every subscription with its state and the last event delivered, as JSON lines (none: one line on
    stderr saying so, as `feedback list` does, so stdout stays JSON lines)."""
    token, shown = "", 0
    while True:
        resp = await c.feedback().ListWebhookSubscriptions(pb.ListWebhookSubscriptionsRequest(page_token=token),
                                                           metadata=c.md, timeout=c.settings.timeout_s)
        for s in resp.webhook_subscriptions:
            click.echo(json.dumps(MessageToDict(s)))
        shown += len(resp.webhook_subscriptions)
        token = resp.next_page_token
        if not token:
            break
    if not shown:
        click.echo("no webhook subscriptions", err=True)


@webhook.command("delete")
@click.argument("name")
@_run
async def delete_cmd(c: Clients, name: str):
    """Stop sending to a subscription and forget it."""
    await c.feedback().DeleteWebhookSubscription(pb.DeleteWebhookSubscriptionRequest(name=_name(name)),
                                                 metadata=c.md, timeout=c.settings.timeout_s)
    click.echo(f"deleted {_name(name)}")


@webhook.command("resume")
@click.argument("name")
@_run
async def resume_cmd(c: Clients, name: str):
    """A dead-lettered subscription delivers again, from the event it stopped at."""
    s = await c.feedback().ResumeWebhookSubscription(pb.ResumeWebhookSubscriptionRequest(name=_name(name)),
                                                     metadata=c.md, timeout=c.settings.timeout_s)
    click.echo(json.dumps(MessageToDict(s)))


@webhook.command("deliveries")
@click.argument("name")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 1000))
@_run
async def deliveries_cmd(c: Clients, name: str, limit: int):
    """The latest delivery attempts (event, attempt, outcome, HTTP status, latency), newest first."""
    resp = await c.feedback().ListWebhookDeliveries(pb.ListWebhookDeliveriesRequest(parent=_name(name), page_size=limit),
                                                    metadata=c.md, timeout=c.settings.timeout_s)
    for d in resp.deliveries:
        click.echo(json.dumps(MessageToDict(d)))
