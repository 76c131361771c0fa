"""The main job: real ShareGPT conversations replayed through the chat gateway, one reply flagged
in the owner's words, and that feedback's evidence printed (words, snapshot, trace id, the turn's
spans from the collector, the frozen tool calls).
"""
from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import grpc

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2
from agentfeedback.traces.v1 import traces_pb2
from services.cli.client import Clients
from services.cli.render import render_feedback, render_waterfall
from services.common.errors import error_info

OWNER_WORDS = (
    "That's wrong. I asked for something specific and this reply doesn't answer it; "
    "please look at what the agent did on this turn."
)


def demo_turns(conversations: int, turns: int) -> list[list[str]]:
    """User turns of the first `conversations` ShareGPT conversations with at least 2 human turns.

    Only a conversation's first record (id `<conv>_0`): ShareGPT V3 splits long conversations into
    records `<conv>_0`, `<conv>_1`, …, and a later one starts mid-conversation."""
    from services.chat.agent.replay import load_sharegpt  # noqa: PLC0415 - the one dataset reader

    out: list[list[str]] = []
    for conv in load_sharegpt(limit=50).conversations:
        if conv[0].conversation_id.rpartition("_")[2] not in ("0", conv[0].conversation_id):
            continue  # a continuation record
        human = [e.human for e in conv if e.human.strip()]
        if len(human) >= 2 and all(len(h) < 4000 for h in human[:turns]):
            out.append(human[:turns])
        if len(out) >= conversations:
            break
    return out


# Namespace of the demo agents' CreateInstance request_ids (uuid5 of the conversation number).
DEMO_NAMESPACE = uuid.UUID("5f0b9f1e-6a43-4d2e-9c1f-2b7a51d0c0de")


def demo_instance_request_id(i: int) -> str:
    """The CreateInstance request_id of demo agent `i` (0-based): the same on every run, so a second
    `make run` finds the agents of the first (AIP-155: same request_id + same request = the first
    result) instead of adding three more. Request ids are per owner, so each owner gets their own."""
    return str(uuid.uuid5(DEMO_NAMESPACE, f"demo-agent-{i}"))


def demo_turn_request_id(i: int, j: int) -> str:
    """The SendMessage request_id of user turn `j` of demo conversation `i`: a retried or repeated
    send of the same turn answers the first result (AIP-155) instead of adding the turn again."""
    return str(uuid.uuid5(DEMO_NAMESPACE, f"demo-turn-{i}-{j}"))


def demo_flag_request_id(message: str, after_deleted: str = "") -> str:
    """The CreateFeedback request_id of the demo's report on `message` (a message name): the same on
    every run, so a rerun answers the first report (AIP-155) instead of filing another. When the owner
    deleted that report, `after_deleted` (the deleted report's name, `feedback/{id}`) derives the id
    of the next report: still the same on every run, one per deleted report."""
    key = f"demo-flag-{message}" + (f"-after-{after_deleted}" if after_deleted else "")
    return str(uuid.uuid5(DEMO_NAMESPACE, key))


def _deleted_report(e: grpc.aio.AioRpcError) -> str | None:
    """The deleted report's name (`feedback/{id}`) when CreateFeedback answered NOT_FOUND because the
    report its request_id created was deleted (reason FEEDBACK_DELETED); None for any other error."""
    info = error_info(e) if e.code() == grpc.StatusCode.NOT_FOUND else None
    if info is None or info.reason != "FEEDBACK_DELETED":
        return None
    return info.metadata.get("resource") or None


async def _flag(fb_stub, c: Clients, flagged: chat_pb2.Message,
                echo: Callable[[str], None]) -> feedback_pb2.Feedback:
    """CreateFeedback of the owner's words on `flagged`, under `demo_flag_request_id`. The owner may
    have deleted the report an earlier run filed (`agentfeedback feedback delete`): its request id then
    answers NOT_FOUND (FEEDBACK_DELETED) for 24 h, and the reply is flagged again as a new report under
    the id derived from the deleted one, said in one line. Each step follows one deleted report, so the
    chain ends; any other error (or a chain that repeats itself) is raised as grpc.aio.AioRpcError."""
    request_id, deleted, seen = demo_flag_request_id(flagged.name), "", set()
    while True:
        try:
            fb = await fb_stub.CreateFeedback(
                feedback_pb2.CreateFeedbackRequest(
                    feedback=feedback_pb2.Feedback(message=flagged.name, body=OWNER_WORDS,
                                                   sentiment=feedback_pb2.SENTIMENT_BAD,
                                                   category=feedback_pb2.CATEGORY_BROKEN_RESPONSE,
                                                   surface=feedback_pb2.SURFACE_CHAT),
                    request_id=request_id),
                metadata=c.md, timeout=c.settings.timeout_s)
        except grpc.aio.AioRpcError as e:
            gone = _deleted_report(e)
            if gone is None or gone in seen:
                raise
            seen.add(gone)
            deleted, request_id = gone, demo_flag_request_id(flagged.name, after_deleted=gone)
            continue
        if deleted:
            echo(f"  (the demo's earlier report {deleted} was deleted; flagged the reply again as {fb.name})")
        return fb


async def _existing_report(fb_stub, c: Clients, instance: str, message: str) -> feedback_pb2.Feedback | None:
    """The demo's report on `message` when an earlier run filed it (the owner's words on that reply)."""
    resp = await fb_stub.ListFeedback(feedback_pb2.ListFeedbackRequest(instance=instance, page_size=100),
                                      metadata=c.md, timeout=c.settings.timeout_s)
    return next((f for f in resp.feedback if f.message == message and f.body == OWNER_WORDS), None)


async def run_demo(c: Clients, conversations: int = 3, turns: int = 3, echo: Callable[[str], None] = print) -> str:
    """Run the demo; returns the feedback name. Raises grpc.aio.AioRpcError when a service fails.

    Idempotent across runs: the demo agents are the same (`demo_instance_request_id`), turns already
    in an agent are shown, not sent again (a run stopped half-way is completed; `demo_turn_request_id`
    makes a repeated send answer its first result), and the reply to the second user turn of the first
    conversation is flagged once (an earlier run's report is shown again; when the owner deleted it,
    the reply is flagged again as a new report, `_flag`)."""
    t_start = time.monotonic()
    chat = c.chat()
    fb_stub = c.feedback()
    traces = c.traces()
    flagged: chat_pb2.Message | None = None
    for i, user_turns in enumerate(demo_turns(conversations, turns)):
        inst = await chat.CreateInstance(
            chat_pb2.CreateInstanceRequest(
                instance=chat_pb2.Instance(display_name=f"ShareGPT replay {i + 1}", agent="reference"),
                request_id=demo_instance_request_id(i)),
            metadata=c.md, timeout=c.settings.timeout_s)
        echo(f"\n== {inst.name} ({inst.display_name})")
        held = list((await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=inst.name, page_size=2 * len(user_turns)),
                                             metadata=c.md, timeout=c.settings.timeout_s)).messages)
        replies = {m.turn_index: m for m in held if m.role == chat_pb2.ROLE_ASSISTANT}
        for j, text in enumerate(user_turns):
            reply, earlier = replies.get(j), " (from an earlier run)" if j in replies else ""
            if reply is None:
                r = await chat.SendMessage(
                    chat_pb2.SendMessageRequest(instance=inst.name, content=text, request_id=demo_turn_request_id(i, j),
                                                channel=chat_pb2.CHANNEL_TEXT),
                    metadata=c.md, timeout=c.settings.timeout_s)
                reply = r.reply
            echo(f"  user  [{reply.trace_id}] {text[:90]!r}{earlier}")
            echo(f"  agent [{reply.trace_id}] {reply.content[:90]!r}")
            if i == 0 and j == 1:
                flagged = reply
    if flagged is None:
        raise RuntimeError("no conversation with two user turns was replayed")

    echo(f"\n== the owner flags {flagged.name}: {OWNER_WORDS!r}")
    instance = flagged.name.partition("/messages/")[0]
    fb = await _existing_report(fb_stub, c, instance, flagged.name) or await _flag(fb_stub, c, flagged, echo)
    # The turn's spans reach the collector a moment later; the feedback service freezes them.
    deadline = time.monotonic() + 30
    while fb.trace_snapshot.state == feedback_pb2.TRACE_SNAPSHOT_STATE_PENDING and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        fb = await fb_stub.GetFeedback(feedback_pb2.GetFeedbackRequest(name=fb.name), metadata=c.md,
                                       timeout=c.settings.timeout_s)
    echo("\n== the feedback row (evidence)")
    echo(render_feedback(fb))
    echo("\n== the turn's spans, from the trace collector")
    try:
        t = await traces.GetTrace(traces_pb2.GetTraceRequest(trace_id=fb.snapshot.trace_id), metadata=c.md,
                                  timeout=c.settings.timeout_s)
        echo(render_waterfall(t))
    except grpc.aio.AioRpcError as e:
        echo(f"  (GetTrace: {e.code().name}: {e.details()})")
    echo(f"\nevidence reached in {time.monotonic() - t_start:.1f} s.  Next: agentfeedback feedback show "
         f"{fb.name.removeprefix('feedback/')}")
    return fb.name
