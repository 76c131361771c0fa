"""Helpers of the feedback integration tests (tests/integration/test_feedback_*.py): a conversation
turn to report on, a report made, read, listed or waited for, a second feedback replica, error checks."""
from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import grpc
import pytest
from google.protobuf import field_mask_pb2

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.traces.v1 import traces_pb2
from services.common.auth import (
    ACTOR_METADATA,
    SCOPE_FEEDBACK_AGENT,
    SCOPE_FEEDBACK_READ,
    SCOPE_FEEDBACK_TURN_REMOVAL,
    mint_token,
)
from services.feedback.server import create_server
from services.feedback.settings import FeedbackSettings
from tests.stack import TEST_JWT_SECRET, Stack

PENDING, CAPTURED, EXPIRED = pb.TRACE_SNAPSHOT_STATE_PENDING, pb.TRACE_SNAPSHOT_STATE_CAPTURED, pb.TRACE_SNAPSHOT_STATE_EXPIRED


def rid() -> str:
    return str(uuid.uuid4())


async def new_instance(stack: Stack, sub: str = "alice") -> str:
    inst = await stack.chat().CreateInstance(
        chat_pb2.CreateInstanceRequest(instance=chat_pb2.Instance(display_name=f"{sub}'s agent", agent="reference")),
        metadata=stack.md(sub))
    return inst.name


async def send(stack: Stack, instance: str, content: str, sub: str = "alice", **kw) -> chat_pb2.SendMessageResponse:
    return await stack.chat().SendMessage(
        chat_pb2.SendMessageRequest(instance=instance, content=content, request_id=rid(), **kw), metadata=stack.md(sub))


async def flag(stack: Stack, message: str, body: str = "that's wrong", sub: str = "alice", **kw) -> pb.Feedback:
    return await stack.feedback().CreateFeedback(
        pb.CreateFeedbackRequest(feedback=pb.Feedback(message=message, body=body, **kw), request_id=rid()),
        metadata=stack.md(sub))


async def get(stack: Stack, name: str, sub: str = "alice") -> pb.Feedback:
    return await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=name), metadata=stack.md(sub))


async def wait_state(stack: Stack, name: str, state: int, timeout_s: float = 20.0) -> pb.Feedback:
    deadline = time.monotonic() + timeout_s
    while True:
        fb = await get(stack, name)
        if fb.trace_snapshot.state == state:
            return fb
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} stayed {pb.TraceSnapshotState.Name(fb.trace_snapshot.state)}")
        await asyncio.sleep(0.1)


async def list_all(stack: Stack, sub: str = "alice", **filters) -> list[pb.Feedback]:
    out, token = [], ""
    while True:
        resp = await stack.feedback().ListFeedback(pb.ListFeedbackRequest(page_token=token, **filters),
                                                   metadata=stack.md(sub))
        out += resp.feedback
        token = resp.next_page_token
        if not token:
            return out


def assert_clipped(snapshot_text: str, clipped: bool, original: str, limit: int = 2000) -> None:
    """A snapshot text is the original, or its first `limit` code points flagged as clipped."""
    assert snapshot_text == original[:limit]
    assert clipped == (len(original) > limit)


def agent_md(stack: Stack, sub: str = "alice", actor_scopes: tuple[str, ...] = (SCOPE_FEEDBACK_AGENT,)):
    """The user's metadata plus the agent's own credential (`x-agentfeedback-actor`), as the reference
    agent sends it."""
    actor = mint_token(TEST_JWT_SECRET, "svc:agent", actor_scopes, 600)
    return (*stack.md(sub), (ACTOR_METADATA, f"Bearer {actor}"))


def chat_service_md(stack: Stack):
    """The chat gateway's own credential (FeedbackService.NoteTurnsRemoved), as services/chat/server.py mints it."""
    return stack.md("svc:chat", (SCOPE_FEEDBACK_TURN_REMOVAL,))


async def expect_error(awaitable, code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await awaitable
    assert e.value.code() == code, e.value.details()
    return e.value


async def start_feedback(stack: Stack, data_dir: Path, clock=None, run_worker: bool = True, **overrides):
    """Another feedback server process-equivalent on the stack's database (its own pool and worker)."""
    values = dict(
        listen="127.0.0.1:0", chat_target=f"127.0.0.1:{stack.ports['chat']}",
        traces_target=f"127.0.0.1:{stack.ports['query']}", capture_poll_s=0.2, capture_backoff_s=0.2,
        database_url=stack.database_url, data_dir=data_dir, jwt_secret=TEST_JWT_SECRET, shutdown_grace_s=0.5, shutdown_drain_s=0,
        tracker_markdown_dir=str(data_dir / "tickets"))
    settings = FeedbackSettings(**{**values, **overrides})
    return await create_server(settings, database_url=stack.database_url, clock=clock, run_worker=run_worker,
                               tracer_provider=stack.providers["feedback"])


def channel_to(stack: Stack, port: int) -> grpc.aio.Channel:
    """A loopback channel to `port`, closed with the stack."""
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stack.channels.append(ch)
    return ch


async def get_as(stack: Stack, name: str, sub: str) -> pb.Feedback:
    return await stack.feedback().GetFeedback(pb.GetFeedbackRequest(name=name),
                                              metadata=stack.md(sub, (SCOPE_FEEDBACK_READ,)))


async def wait_until(fetch, done, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while not done(got := await fetch()):
        assert time.monotonic() < deadline, f"condition never held; last: {got}"
        await asyncio.sleep(0.1)
    return got


async def created_events(stack: Stack, trace_id: str) -> list:
    """Every `feedback.created` event on the trace as stored by the collector (after a flush)."""
    await stack.aflush_spans()
    t = await stack.traces().GetTrace(traces_pb2.GetTraceRequest(trace_id=trace_id), metadata=stack.md())
    return [(sp, e) for sp in t.spans for e in sp.events if e.name == "feedback.created"]


def rating(conversation: str, turn: int, aspect: str = "reaction", scope: int = pb.RATING_SCOPE_MESSAGE,
           **kw) -> pb.Rating:
    return pb.Rating(conversation=conversation, turn_index=turn, scope=scope, aspect=aspect, **kw)


async def put(stub, r: pb.Rating, md, mask: list[str] | None = None) -> pb.Rating:
    req = pb.PutRatingRequest(rating=r, request_id=str(uuid.uuid4()))
    if mask:
        req.update_mask.CopyFrom(field_mask_pb2.FieldMask(paths=mask))
    return await stub.PutRating(req, metadata=md)


async def ratings_of(stack: Stack, conversation: str, sub: str = "alice", turn: int | None = None) -> list[pb.Rating]:
    req = pb.ListRatingsRequest(conversation=conversation)
    if turn is not None:
        req.turn_index = turn
    return list((await stack.feedback().ListRatings(req, metadata=stack.md(sub))).ratings)
