"""Webhook rules (services/feedback/webhooks.py, webhook_secrets.py): URLs, event types, backoff, secrets."""
from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from cryptography.fernet import Fernet
from standardwebhooks.webhooks import Webhook

from services.common.errors import InvalidArgument
from services.feedback.model.enums import EventKind, EventType, RatingScope
from services.feedback.model.feed import FeedEvent, Position
from services.feedback.webhook_secrets import SecretBox, derived_key, new_secret
from services.feedback.webhooks import DeliveryPolicy, check_url, event_type


@pytest.mark.parametrize("url", ["https://hooks.example.com/x", "http://127.0.0.1:9/x", "http://[::1]:80/",
                                 "http://localhost/x", "http://127.0.0.2/x"])
def test_https_and_loopback_urls_are_accepted(url):
    assert check_url(url) == url


@pytest.mark.parametrize("url", ["http://example.com/x", "http://10.0.0.1/x", "ftp://127.0.0.1/", "https://", "",
                                 "https://a/\x00", "https://a/" + "x" * 2048,
                                 # unparsable (was INTERNAL), a port no receiver can have, CR LF, a space,
                                 # a C1 control, a bidi override and a zero-width space
                                 "https://[::1", "http://[::1]:99999/x", "http://localhost:0/",
                                 "https://x.example/\r\nX-Injected: 1", "https://exa mple.com/h",
                                 "https://x.example/\x85", "https://\u202ex.example/", "https://x\u200b.example/"])
def test_other_urls_are_invalid_argument_naming_the_field(url):
    with pytest.raises(InvalidArgument) as e:
        check_url(url)
    assert e.value.field_path == "webhook_subscription.url"


def test_event_types_and_backoff():
    e = FeedEvent(Position(1, 1), EventKind.RATING, EventType.UPDATED, "r", "o", RatingScope.MESSAGE, "reaction", False,
                  dt.datetime.now(dt.UTC))
    assert (event_type(e), e.name) == ("rating.updated", "ratings/r")
    ev = dataclasses.replace(e, kind=EventKind.EVALUATION, type=EventType.CREATED)
    assert (event_type(ev), ev.name) == ("evaluation.created", "evaluations/r")
    assert dataclasses.replace(e, kind=EventKind.FEEDBACK, type=EventType.FILED).name == "feedback/r"
    p = DeliveryPolicy(10, 30, 1.0, 300.0)
    assert [p.retry_in(a) for a in (1, 2, 3, 9, 10, 30)] == [1, 2, 4, 256, 300, 300]
    assert sum(p.retry_in(a) for a in range(1, 30)) > 3600  # a receiver down for an hour is still retried


def test_a_secret_signs_per_the_spec_and_is_sealed_under_the_key():
    secret = new_secret()
    assert secret.startswith("whsec_")
    box = SecretBox(Fernet.generate_key().decode())
    sealed = box.seal(secret)
    assert secret.encode() not in sealed and box.open(sealed) == secret
    with pytest.raises(ValueError):
        SecretBox(derived_key("another")).open(sealed)
    now = dt.datetime.now(dt.UTC)
    sig = Webhook(secret).sign("42", now, '{"a":1}')
    assert Webhook(secret).verify('{"a":1}', {"webhook-id": "42", "webhook-timestamp": str(int(now.timestamp())),
                                              "webhook-signature": sig}) == {"a": 1}
