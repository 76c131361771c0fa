"""Running code as an RPC's caller without a server: the principal the auth interceptor would set."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from services.common.auth import Principal, reset_current_principal, set_current_principal

T = TypeVar("T")


def as_caller(sub: str, fn: Callable[[], T]) -> T:
    """`fn()` with the current principal `sub` (no scopes, no token), then the previous one again."""
    t = set_current_principal(Principal(sub=sub, scopes=frozenset(), token=""))
    try:
        return fn()
    finally:
        reset_current_principal(t)
