"""The gateway's one call into the feedback service: FeedbackService.CopyRatings for ForkConversation
(the `RatingsPort` of `services.chat.fork`). One channel, created at start-up; the caller's token is
forwarded (the ratings are the caller's, checked where they live) with the caller's remaining deadline,
at most TIMEOUT_S. A transport failure (UNAVAILABLE, DEADLINE_EXCEEDED) becomes `RatingsUnavailable`;
any other status is re-raised as it is.
"""

from __future__ import annotations

import grpc
from agentfeedback.feedback.v1 import feedback_pb2, feedback_pb2_grpc

from services.common import deadlines
from services.common.upstream import upstream_detail

TIMEOUT_S = 5.0
_TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class RatingsUnavailable(Exception):
    """The feedback service could not be reached (or did not answer in time)."""


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
        timeout = deadlines.timeout(TIMEOUT_S, timeout_s)
        try:
            md = (("authorization", f"Bearer {token}"),)
            resp = await self._stub.CopyRatings(req, timeout=timeout, metadata=md)
        except grpc.aio.AioRpcError as e:
            if e.code() in _TRANSIENT:
                raise RatingsUnavailable(upstream_detail(e)) from None
            raise
        return resp.copied_count
