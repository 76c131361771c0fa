"""`record_feedback`'s way to the feedback service: FeedbackService.CreateFeedback over gRPC with the
owner's forwarded token (on behalf of), the tool span's context as `traceparent`, a fresh UUID4
request_id, author AGENT, surface CHAT, sentiment BAD, target = the reply complained about (its message
name) with the complaint turn's trace id as `context_trace_id`, or the turn's trace id when the
conversation has no earlier reply. Author AGENT is
only accepted with the agent's own service credential (scope `feedback:agent`) in metadata
`x-agentfeedback-actor: Bearer <jwt>`; `actor_token()` supplies it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import grpc
from agentfeedback.feedback.v1 import feedback_pb2, feedback_pb2_grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate

from services.common import deadlines
from services.common.auth import ACTOR_METADATA

# Seconds CreateFeedback may take (it resolves a snapshot from the chat service itself).
TIMEOUT_S = 5.0


class FeedbackClient:
    def __init__(self, channel: grpc.aio.Channel, actor_token: Callable[[], str], timeout_s: float = TIMEOUT_S):
        self._stub = feedback_pb2_grpc.FeedbackServiceStub(channel)
        self._actor_token = actor_token
        self._timeout = timeout_s

    async def create(
        self, *, trace_id: str, instance: str, body: str, token: str, otel: otel_context.Context,
        message: str = "",
    ) -> str:
        """Creates the row; returns its name (`feedback/{id}`). Raises grpc.aio.AioRpcError on failure."""
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=otel)
        req = feedback_pb2.CreateFeedbackRequest(
            feedback=feedback_pb2.Feedback(
                **({"message": message, "context_trace_id": trace_id} if message else {"trace_id": trace_id}),
                instance=instance,
                body=body,
                author=feedback_pb2.AUTHOR_AGENT,
                surface=feedback_pb2.SURFACE_CHAT,
                sentiment=feedback_pb2.SENTIMENT_BAD,
            ),
            request_id=str(uuid.uuid4()),
        )
        resp = await self._stub.CreateFeedback(
            req,
            timeout=deadlines.timeout(self._timeout),
            metadata=(
                ("authorization", f"Bearer {token}"),
                (ACTOR_METADATA, f"Bearer {self._actor_token()}"),
                *carrier.items(),
            ),
        )
        return resp.name
