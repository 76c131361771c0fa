"""The one check of an http(s) URL a client gives the feedback service (a report's tracker link, a
webhook's receiver): the characters, the parse and the port, before any rule of its own.

`split_http_url(url, field, max_chars)` → `urllib.parse.SplitResult` of an absolute `http://` or
`https://` URL with a host and, when given, a port in 1..65535 (RFC 3986; a link we could never open or
a receiver we could never reach is refused when it is set, not found out at every delivery). Refused
(INVALID_ARGUMENT naming `field`, never echoing the URL): empty, longer than `max_chars`, any
whitespace, any control character (C0, DEL, C1: a CR LF would split a request line) or format
character (Unicode Cf: bidi overrides such as U+202E and zero-width characters make a link read as
another host), and what `urlsplit` cannot parse (`https://[::1`: its ValueError was INTERNAL).
"""
from __future__ import annotations

import unicodedata
import urllib.parse

from services.common.errors import InvalidArgument


def _hidden(c: str) -> bool:
    return c.isspace() or unicodedata.category(c) in ("Cc", "Cf")


def split_http_url(url: str, field: str, max_chars: int) -> urllib.parse.SplitResult:
    """The parts of `url` (see the module); InvalidArgument naming `field` when it is not such a URL."""
    if not url or len(url) > max_chars:
        raise InvalidArgument(field, f"must be an absolute http:// or https:// URL of at most {max_chars} characters")
    if any(_hidden(c) for c in url):
        raise InvalidArgument(field, "must not contain whitespace, control or format (bidi, zero-width) characters")
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        raise InvalidArgument(field, "is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidArgument(field, "must be an absolute http:// or https:// URL with a host")
    if port == 0:
        raise InvalidArgument(field, "port must be within 1..65535")
    return parts
