"""Pure rules of the change feed (issue 24): resume tokens and how a watcher's retry waits.

A resume token is the URL-safe base64 of `{"x": xid, "s": seq}`, a `model.feed.Position`. It is opaque
but not signed: a position reveals nothing (every read is scoped to the caller anyway), and a forged one
can only skip or repeat the forger's own events. Anything else is INVALID_ARGUMENT naming the field.
"""
from __future__ import annotations

from services.common.errors import InvalidArgument
from services.common.pages import decode_page_token, encode_page_token
from services.feedback.model.feed import Position

TOKEN_FIELD = "resume_token"
_MAX = 2**63 - 1
# Looking again while committed events wait behind a transaction that is still running (model.feed.FeedPage
# `pending`): 10 ms, doubling, at most 1 s; a transaction's end sends no wake-up of its own when it wrote
# no event (another service's, or a long one of ours that has not committed yet).
PENDING_FIRST_S, PENDING_MAX_S = 0.01, 1.0


def token(p: Position) -> str:
    """The opaque resume token of a position."""
    return encode_page_token({"x": p.xid, "s": p.seq})


def position(resume_token: str) -> Position | None:
    """The position a token names; None for no token. INVALID_ARGUMENT naming `resume_token` when it is
    not one this service issued."""
    raw = decode_page_token(resume_token, TOKEN_FIELD)
    if raw is None:
        return None
    x, s = raw.get("x"), raw.get("s")
    if type(x) is not int or type(s) is not int or not (0 <= x <= _MAX and 0 <= s <= _MAX) or set(raw) != {"x", "s"}:
        raise InvalidArgument(TOKEN_FIELD, "is not a token this service issued")
    return Position(x, s)


def next_pending_wait(previous_s: float | None) -> float:
    """The wait before looking again while events are pending behind a running transaction."""
    return PENDING_FIRST_S if previous_s is None else min(previous_s * 2, PENDING_MAX_S)
