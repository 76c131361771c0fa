"""Webhook rules (services/feedback/webhooks.py, webhook_addresses.py, webhook_secrets.py): URLs, the
addresses a delivery may reach, event types, backoff, secrets."""
from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from cryptography.fernet import Fernet
from standardwebhooks.webhooks import Webhook

from services.common.errors import InvalidArgument
from services.feedback.model.enums import EventKind, EventType, RatingScope
from services.feedback.model.feed import FeedEvent, Position
from services.feedback.webhook_addresses import AddressRefused, GuardedResolver, delivery_host, host_refusal
from services.feedback.webhook_secrets import SecretBox, derived_key, new_secret
from services.feedback.webhooks import DeliveryPolicy, check_url, event_type
from tests.helpers.webhooks import HostsResolver


@pytest.mark.parametrize("url", ["https://hooks.example.com/x", "http://127.0.0.1:9/x", "http://[::1]:80/",
                                 "http://localhost/x", "http://127.0.0.2/x", "https://127.0.0.1/x",
                                 "https://93.184.215.14/x", "https://[2001:4860:4860::8888]/x",
                                 "https://[::ffff:93.184.215.14]/x", "https://[2002:5db8:d70e::]/x"])
def test_https_and_loopback_urls_are_accepted(url):
    assert check_url(url) == url


# Each kind of address that is not public, as a literal host (IPv4 inside IPv6 is judged as the IPv4 one).
NOT_PUBLIC = {"https://10.0.0.5/hook": "private", "https://172.16.0.1/": "private", "https://192.168.1.1/": "private",
              "https://[fd00::1]/": "private", "https://192.0.2.1/": "private", "https://100.64.0.1/": "shared",
              "https://169.254.169.254/latest/meta-data/": "link-local", "https://[fe80::1]/": "link-local",
              "https://[fe80::1%25eth0]/": "link-local", "https://224.0.0.1/": "multicast",
              "https://[ff02::1]/": "multicast", "https://0.0.0.0/": "unspecified", "https://[::]/": "unspecified",
              "https://240.0.0.1/": "reserved", "https://255.255.255.255/": "reserved",
              "https://[fd00:ec2::254]/": "cloud metadata", "https://100.100.100.200/": "cloud metadata",
              "https://[::ffff:10.0.0.5]/": "private", "https://[::ffff:169.254.169.254]/": "link-local",
              "https://[64:ff9b::a00:5]/": "private", "https://[2002:a00:5::]/": "private",
              "https://[::ffff:127.0.0.1]/": "loopback", "https://[fec0::1]/": "site-local",
              # Written as the HTTP client reads them (IDNA folds Unicode digits and dots), and fully qualified.
              "https://１０.０.０.５/": "private", "https://10。0。0。5/": "private", "https://①⓪.0.0.5/": "private",
              "https://１６９.２５４.１６９.２５４/latest": "link-local", "https://10.0.0.5./": "private"}


@pytest.mark.parametrize("url", NOT_PUBLIC)
def test_a_literal_address_that_is_not_public_is_refused_naming_the_field_and_its_kind(url):
    with pytest.raises(InvalidArgument) as e:
        check_url(url)
    assert e.value.field_path == "webhook_subscription.url"
    assert NOT_PUBLIC[url] in str(e.value) and "public" in str(e.value)
    long = url + "x" * 2000
    with pytest.raises(InvalidArgument) as e:
        check_url(long)
    assert len(str(e.value)) < 200 and "xxxx" not in str(e.value)  # the URL is never echoed


@pytest.mark.parametrize("url", ["https://2130706433/", "https://0x7f.1/", "https://127.1/", "https://1.2.3/",
                                 "https://012.0.0.5/"])
def test_a_numeric_host_that_is_not_a_dotted_quad_is_refused(url):
    with pytest.raises(InvalidArgument) as e:
        check_url(url)
    assert e.value.field_path == "webhook_subscription.url" and "dotted-quad" in str(e.value)


@pytest.mark.parametrize("url", ["https://10.0.0.5/hook", "https://192.168.1.1/", "https://[fd00::1]/",
                                 "https://100.64.0.1/", "https://[::ffff:10.0.0.5]/"])
def test_allowing_private_networks_allows_private_addresses(url):
    assert check_url(url, allow_private=True) == url


@pytest.mark.parametrize("url", ["https://169.254.169.254/", "https://[fe80::1]/", "https://[fd00:ec2::254]/",
                                 "https://100.100.100.200/", "https://0.0.0.0/", "https://224.0.0.1/",
                                 "https://240.0.0.1/", "http://10.0.0.5/hook"])
def test_allowing_private_networks_still_refuses_metadata_link_local_and_plain_http(url):
    with pytest.raises(InvalidArgument) as e:
        check_url(url, allow_private=True)
    assert e.value.field_path == "webhook_subscription.url"


TABLE = {"public.test": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
         "mixed.test": ["93.184.215.14", "10.0.0.5"], "private.test": ["10.0.0.5"], "loopback.test": ["127.0.0.2"],
         "metadata.test": ["169.254.169.254"], "localhost": ["127.0.0.1", "::1"], "bad-localhost": ["10.0.0.5"]}


async def test_the_guard_passes_a_name_whose_every_address_is_public_and_refuses_one_with_any_other():
    guard = GuardedResolver(False, HostsResolver(TABLE))
    answers = await guard.resolve("public.test", 443, 0)
    assert [a["host"] for a in answers] == TABLE["public.test"]  # what aiohttp then connects to: the addresses checked
    assert [a["host"] for a in await guard.resolve("localhost", 80, 0)] == ["127.0.0.1", "::1"]
    for name, kind in (("mixed.test", "private"), ("private.test", "private"), ("loopback.test", "loopback"),
                       ("metadata.test", "link-local")):
        with pytest.raises(AddressRefused) as e:
            await guard.resolve(name, 443, 0)
        assert e.value.kind == kind and e.value.resolved
        assert e.value.reason().startswith(f"refused: the host resolves to a {kind} address") and len(e.value.reason()) <= 200
    guard = GuardedResolver(False, HostsResolver({"localhost": ["10.0.0.5"]}))
    with pytest.raises(AddressRefused):  # `localhost` is allowed as loopback, not as whatever it resolves to
        await guard.resolve("localhost", 80, 0)
    with pytest.raises(OSError):  # a name that does not resolve fails as before (a retried failure)
        await guard.resolve("nowhere.test", 443, 0)


async def test_allowing_private_networks_lets_names_resolve_to_private_addresses_but_not_link_local():
    guard = GuardedResolver(True, HostsResolver(TABLE))
    for name in ("mixed.test", "private.test", "loopback.test"):
        assert [a["host"] for a in await guard.resolve(name, 443, 0)] == TABLE[name]
    with pytest.raises(AddressRefused) as e:
        await guard.resolve("metadata.test", 443, 0)
    assert e.value.kind == "link-local"


async def test_the_guard_over_the_system_resolver():
    guard = GuardedResolver(False)  # getaddrinfo: /etc/hosts has localhost on every machine
    assert {a["host"] for a in await guard.resolve("localhost", 80, 0)} <= {"127.0.0.1", "::1"}
    with pytest.raises(AddressRefused) as e:  # getaddrinfo reads a numeric form as 127.0.0.1: a name, not localhost
        await guard.resolve("0x7f.1", 443, 0)
    assert e.value.kind == "loopback"
    await guard.close()


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


def test_the_delivery_judges_the_host_the_http_client_connects_to():
    """A subscription stored with a host the HTTP client folds to a private address (Unicode digits or
    dots, IDNA) is refused at delivery too: the delivery reads the host as aiohttp (yarl) does, not as
    urllib.parse keeps it."""
    assert delivery_host("https://１０.０.０.５/h") == "10.0.0.5"
    assert delivery_host("https://10。0。0。5/h") == "10.0.0.5"
    assert delivery_host("https://１６９.２５４.１６９.２５４/latest") == "169.254.169.254"
    assert delivery_host("https://Bücher.example/h") == "xn--bcher-kva.example"
    assert delivery_host("https://[::1]:8/") == "::1"
    assert host_refusal(delivery_host("https://１０.０.０.５/h"), False) == "private"
    assert host_refusal(delivery_host("https://10.0.0.5./h"), False) == "private"
    assert host_refusal(delivery_host("https://Bücher.example/h"), False) is None  # a name: the resolver checks it


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
