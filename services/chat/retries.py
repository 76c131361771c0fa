"""Which chat write requests are retries whose answer is stored: the write quota's `answered` checks
(services/common/quota.py), asked only when the quota would refuse the call (the feedback service's
twin: services/feedback/retries.py).

- SendMessage, StreamMessage: the request id's turn replays as stored, or is still running
  (`TurnRunner.replays_as_stored`); a turn a retry would run again (failed retryably, or stale) is a
  new write and pays the quota.
- CreateInstance, ForkConversation: the instance (or fork) the request id created.
The handler still decides (a request id reused for another request is INVALID_ARGUMENT there).
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from services.chat.repository import Repository
from services.chat.turn import TurnRunner
from services.common.errors import InvalidArgument
from services.common.ids import parse_name, request_id_of


def answered_checks(repo: Repository, turns: TurnRunner) -> dict[str, Callable[[str, Any], Awaitable[bool]]]:
    """Method short name → `(owner, request) → bool` (True: a retry whose answer is stored)."""

    async def turn(owner: str, request: Any) -> bool:
        rid = request_id_of(request)
        try:
            (instance_id,) = parse_name(request.instance, "instances/{}", "instance")
        except InvalidArgument:
            return False
        rec = await repo.turn_by_request(owner, instance_id, rid) if rid is not None else None
        return rec is not None and turns.replays_as_stored(rec)

    async def instance(owner: str, request: Any) -> bool:
        rid = request_id_of(request)
        return rid is not None and await repo.instance_by_request(owner, rid) is not None

    return {"SendMessage": turn, "StreamMessage": turn, "CreateInstance": instance, "ForkConversation": instance}
