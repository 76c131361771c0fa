"""The webhooks part of the feedback model (issue 24): subscriptions to the change feed and their
delivery attempts. Enum numbers are the proto's (`WebhookSubscription.State`, `WebhookDelivery.Outcome`)."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import IntEnum

from services.feedback.model.feed import FeedFilter, Position


class WebhookState(IntEnum):
    UNSPECIFIED = 0
    ACTIVE = 1
    DEAD_LETTERED = 2


class DeliveryOutcome(IntEnum):
    UNSPECIFIED = 0
    DELIVERED = 1
    FAILED = 2
    DEAD_LETTERED = 3


@dataclass(frozen=True, slots=True)
class WebhookSubscription:
    id: str
    url: str
    filter: FeedFilter
    state: WebhookState
    position: Position
    delivered_event: str
    attempts: int
    next_attempt_at: dt.datetime
    creator: str
    create_time: dt.datetime
    # Encrypted (webhook_secrets.SecretBox); the clear secret only leaves the service once, at create.
    secret_encrypted: bytes = b""
    lease_token: str = ""

    @property
    def name(self) -> str:
        return f"webhookSubscriptions/{self.id}"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One attempt to deliver one event."""

    event_id: str
    attempt: int
    outcome: DeliveryOutcome
    http_status: int
    error: str
    latency_ms: float
    time: dt.datetime | None = None
    id: int = 0
