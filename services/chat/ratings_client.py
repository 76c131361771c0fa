"""The gateway's calls into the feedback service: FeedbackService.CopyRatings for ForkConversation
(the `RatingsPort` of `services.chat.fork`) and NoteTurnsRemoved for DeleteTurn / ClearMessages (the
`RemovalPort` of `services.chat.removal`). One channel, created at start-up; CopyRatings forwards the
caller's token (the ratings are the caller's, checked where they live), NoteTurnsRemoved carries this
service's own credential and names the owner (it is also sent long after the request, from the
outbox); each with the caller's remaining deadline, at most TIMEOUT_S. No answer (`services.common.depfail.no_answer`: UNAVAILABLE, DEADLINE_EXCEEDED, a stream broken
mid-call) becomes `RatingsUnavailable`;
any other status is re-raised as it is.
"""

from __future__ import annotations

import grpc
from agentfeedback.feedback.v1 import feedback_pb2, feedback_pb2_grpc

from services.common import deadlines
from services.common.depfail import no_answer
from services.common.upstream import upstream_detail

TIMEOUT_S = 5.0


class RatingsUnavailable(Exception):
    """The feedback service could not be reached (or did not answer in time)."""


async def _call(rpc, req, token: str, timeout_s: float | None):
    """`rpc(req)` with the caller's token and remaining deadline (≤ TIMEOUT_S); see the module doc."""
    try:
        return await rpc(req, timeout=deadlines.timeout(TIMEOUT_S, timeout_s),
                         metadata=(("authorization", f"Bearer {token}"),))
    except grpc.aio.AioRpcError as e:
        if no_answer(e):
            raise RatingsUnavailable(upstream_detail(e)) from None
        raise


class RatingsClient:
    def __init__(self, channel: grpc.aio.Channel):
        self._stub = feedback_pb2_grpc.FeedbackServiceStub(channel)

    async def copy(
        self, *, source: str, target: str, through_turn_index: int, request_id: str, token: str,
        timeout_s: float | None,
    ) -> int:
        """Ratings copied (0 on a retry of `request_id`). Raises RatingsUnavailable, grpc.aio.AioRpcError."""
        req = feedback_pb2.CopyRatingsRequest(
            source_conversation=source, target_conversation=target, through_turn_index=through_turn_index,
            request_id=request_id,
        )
        return (await _call(self._stub.CopyRatings, req, token, timeout_s)).copied_count

    async def note_turns_removed(
        self, *, owner: str, conversation: str, turn_indexes: list[int], trace_ids: list[str],
        through_turn_index: int | None, token: str, timeout_s: float | None,
    ) -> int:
        """The owner's ratings deleted (0 on a repeat); `token`: chat's own credential. Raises
        RatingsUnavailable, grpc.aio.AioRpcError."""
        req = feedback_pb2.NoteTurnsRemovedRequest(owner=owner, conversation=conversation, turn_indexes=turn_indexes,
                                                   trace_ids=trace_ids)
        if through_turn_index is not None:
            req.through_turn_index = through_turn_index
        return (await _call(self._stub.NoteTurnsRemoved, req, token, timeout_s)).deleted_rating_count
