"""Which addresses a webhook delivery may connect to: the guard against server-side request forgery.

A subscription's URL comes from a client (`feedback:admin`) and the delivery worker POSTs to it from
inside the deployment's network, so without a guard `https://169.254.169.254/…` (a cloud's metadata
endpoint), `https://10.0.0.5/…` or a name that resolves there would reach what only the service can.

- An address is *public* when `ipaddress` calls it global and it is neither multicast nor reserved. An
  IPv4 address inside an IPv6 one (`::ffff:a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) is judged as
  the IPv4 address.
- Loopback is allowed where `webhooks.check_url` allowed it before this guard: a literal loopback address,
  or the name `localhost` while it resolves to loopback (tests, a sidecar). Any other name that resolves
  to loopback is refused.
- `webhook_allow_private_networks` (deployments whose receivers are on a private network) also allows
  private, loopback and shared (100.64.0.0/10) addresses. Link-local (169.254.0.0/16, fe80::/10),
  multicast, unspecified, reserved and the clouds' metadata addresses stay refused.

This is checked twice. At create, a literal address is checked (INVALID_ARGUMENT from `webhooks.check_url`).
At delivery, `GuardedResolver` checks every address a name resolves to. aiohttp connects to the addresses
its resolver returned, so the connection goes to the addresses that were checked: a name cannot give the
check one answer and the connection another (DNS rebinding).
"""
from __future__ import annotations

import ipaddress
import socket

import yarl
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

LOOPBACK_NAMES = frozenset({"localhost"})
SHARED = ipaddress.ip_network("100.64.0.0/10")  # RFC 6598: carrier-grade NAT, Alibaba Cloud's metadata
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052's well-known prefix
# Metadata endpoints that are not link-local: AWS's over IPv6 (a ULA) and Alibaba Cloud's (in SHARED).
METADATA = frozenset({ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200")})
# The kinds `webhook_allow_private_networks` allows; every other kind stays refused.
PRIVATE_KINDS = frozenset({"private", "loopback", "shared (100.64.0.0/10)", "site-local"})
NUMERIC = "non-canonical numeric"


class AddressRefused(Exception):
    """A delivery's host is, or resolves to, an address the guard refuses. `kind` says which kind of address
    (`private`, `link-local`, …). `address` is the address itself, for the service's log only."""

    def __init__(self, kind: str, address: str, resolved: bool):
        super().__init__(f"a {kind} address ({address})")
        self.kind, self.address, self.resolved = kind, address, resolved

    def reason(self) -> str:
        """The delivery log's words: short, without the address (the subscriber sees the log)."""
        how = "resolves to" if self.resolved else "is"
        hint = " (allowed by AGENTFEEDBACK_FEEDBACK_WEBHOOK_ALLOW_PRIVATE_NETWORKS)" if self.kind in PRIVATE_KINDS else ""
        return f"refused: the host {how} a {self.kind} address, not a public one{hint}"


def _embedded(ip: IPAddress) -> IPAddress:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)
        if ip.sixtofour is not None:
            return ip.sixtofour
    return ip


def _kind(ip: IPAddress) -> str | None:
    checks = ((ip.is_unspecified, "unspecified"), (ip.is_link_local, "link-local"), (ip.is_multicast, "multicast"),
              (ip in METADATA, "cloud metadata"), (ip.is_loopback, "loopback"), (ip.is_reserved, "reserved"),
              (ip in SHARED, "shared (100.64.0.0/10)"),
              (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local, "site-local"), (not ip.is_global, "private"))
    return next((kind for hit, kind in checks if hit), None)


def refusal(ip: IPAddress, allow_private: bool) -> str | None:
    """None when a delivery may connect to `ip`. Otherwise the kind of address it is, e.g. `private`,
    `link-local`, `loopback` (loopback is refused here; its exceptions are `host_refusal`'s)."""
    kind = _kind(_embedded(ip))
    return None if kind is None or (allow_private and kind in PRIVATE_KINDS) else kind


def delivery_host(url: str) -> str | None:
    """`url`'s host as the HTTP client connects to it: yarl's ASCII form (IDNA applied, so Unicode digits
    and dots such as `１０.０.０.５` or `10。0。0。5` become `10.0.0.5`; lower case; IPv6 without brackets).
    Every check of a subscription's host reads this, not `urllib.parse`'s form, which keeps the Unicode
    (a literal private address written so passed the check, and aiohttp then connected to it without
    asking the resolver). None when the URL has no host or the host is not a valid name."""
    try:
        return yarl.URL(url).raw_host
    except (ValueError, UnicodeError):
        return None


def host_refusal(host: str, allow_private: bool) -> str | None:
    """For a URL's hostname (IPv6 without brackets): the kind of a literal address the guard refuses, or
    `NUMERIC` for an IPv4 address that is not written as a dotted quad (`2130706433`, `0x7f.1`, `127.1`:
    the system resolver reads these as addresses). None for a name (`GuardedResolver` checks it at delivery),
    a public address or a loopback address."""
    host = host.rstrip(".")  # `10.0.0.5.` (a fully qualified form) is the same address
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        try:
            socket.inet_aton(host)
        except OSError:
            return None
        return NUMERIC
    return None if ip.is_loopback else refusal(ip, allow_private)


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver: `inner`'s answers when every address in them may be reached, else AddressRefused
    (one refused address refuses the name). `inner` defaults to the system's resolver (aiohttp's
    `ThreadedResolver`: getaddrinfo, /etc/hosts included)."""

    def __init__(self, allow_private: bool, inner: AbstractResolver | None = None):
        self._allow_private = allow_private
        self._inner = inner or ThreadedResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        answers = await self._inner.resolve(host, port, family)
        loopback_name = host.lower() in LOOPBACK_NAMES
        for a in answers:
            ip = ipaddress.ip_address(a["host"])
            kind = None if loopback_name and ip.is_loopback else refusal(ip, self._allow_private)
            if kind is not None:
                raise AddressRefused(kind, a["host"], resolved=True)
        return answers

    async def close(self) -> None:
        await self._inner.close()
