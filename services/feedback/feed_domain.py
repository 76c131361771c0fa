"""Pure rules of the change feed (issue 24): resume tokens and how a watcher's retry waits.

A resume token carries `{"x": xid, "s": seq}`, a `model.feed.Position`, signed by the shared signer
(`pages.issue` / `pages.read`, purpose FEED_RESUME) and bound to neither filters (a watcher may resume
with others) nor caller (webhook events carry tokens; every read is scoped to its caller anyway). An
edited, foreign or unsigned (issued before tokens were signed) token is INVALID_ARGUMENT naming
`resume_token`; a watcher holding an unsigned one reconnects
with `from_oldest` (event ids deduplicate).
"""
from __future__ import annotations

from services.common.errors import InvalidArgument
from services.common import pages
from services.feedback.model.feed import Position

TOKEN_FIELD = "resume_token"
_MAX = 2**63 - 1
# Looking again while committed events wait behind a transaction that is still running (model.feed.FeedPage
# `pending`): 10 ms, doubling, at most 1 s; a transaction's end sends no wake-up of its own when it wrote
# no event (another service's, or a long one of ours that has not committed yet).
PENDING_FIRST_S, PENDING_MAX_S = 0.01, 1.0


def token(p: Position) -> str:
    """The opaque resume token of a position."""
    return pages.issue({"x": p.xid, "s": p.seq}, None, pages.FEED_RESUME, bind_caller=False)


def position(resume_token: str) -> Position | None:
    """The position a token names; None for no token. INVALID_ARGUMENT naming `resume_token` when it is
    not one this service issued."""
    raw = pages.read(resume_token, None, pages.FEED_RESUME, TOKEN_FIELD, bind_caller=False)
    if raw is None:
        return None
    x, s = raw.get("x"), raw.get("s")
    if type(x) is not int or type(s) is not int or not (0 <= x <= _MAX and 0 <= s <= _MAX) or set(raw) != {"x", "s", "f", "c"}:
        raise InvalidArgument(TOKEN_FIELD, "is not a token this service issued")
    return Position(x, s)


def next_pending_wait(previous_s: float | None) -> float:
    """The wait before looking again while events are pending behind a running transaction."""
    return PENDING_FIRST_S if previous_s is None else min(previous_s * 2, PENDING_MAX_S)
