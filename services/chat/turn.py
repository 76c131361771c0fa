"""The turn (docs/architecture.md "The turn"): one new trace per turn, the user message stored before the agent
is called, the agent called with the turn's context, the reply stored with the same trace id.

No grpc and no SQL here: the agent is reached through `AgentPort` (`services.chat.agent_client`
adapts gRPC), rows through `services.chat.repository.Repository`. OpenTelemetry is the one
dependency, because making the turn addressable *is* this module's job.

Spans and events of a turn (all under one trace id minted here):
- `chat.turn` (SERVER, root): started at t0 with an empty parent context; the caller's
  `traceparent` (if any) only as a span link. Attributes: `chat.instance`, `chat.turn_index`,
  `chat.user_message`, `chat.reply_message`, `chat.request_id`.
- event `chat.in` at t0 (the same clock reading as the user message's create_time);
- event `chat.reply_sanitized` when the agent's reply held NUL characters (count);
- event `chat.out` when the reply is stored;
- one child span `workspace.update` per workspace operation applied with the reply (attributes
  `workspace.component`, `workspace.operation`, `workspace.artifact_id`, `workspace.artifact_version`),
  and the event `workspace.operation_dropped` per operation dropped as invalid
  (`workspace.operation_index`, `workspace.operation`, `workspace.drop_reason`: a server-written reason);
- the agent's `agent.think` / `tool.call` spans are children (context injected into gRPC metadata).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import NoReturn, Protocol

from google.rpc import code_pb2
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from services.chat.domain import (
    AgentCallError,
    AgentReply,
    HistoryMessage,
    Message,
    Role,
    ThinkInput,
    TurnInput,
    TurnRecord,
    agent_timeout,
    sanitize_reply,
    time_from_ns,
)
from services.chat.repository import Repository, RequestRace
from services.chat.workspace import Applied, State
from services.chat.workspace_store import WorkspaceStore
from services.common import deadlines, span_pipe
from services.common.clip import clip
from services.common.depfail import database_unavailable, dependency_error
from services.common.errors import Cancelled, DeadlineExceeded, DomainError, Internal, NotFound, Unavailable
from services.common.incidents import INCIDENTS
from services.common.telemetry import REQUEST_TRACE_ID, span_headers
from services.common.metrics import LocalCounter
from services.common.ids import check_same_request, new_id

log = logging.getLogger(__name__)

TURN_SPAN = "chat.turn"
WORKSPACE_SPAN = "workspace.update"
# Stored outcomes a retry with the same request_id runs again (the agent is called again, the stored
# user message is reused): the agent was unreachable, ran out of time, or its caller went away. Every
# other outcome (a reply, AGENT_FAILED, the gateway's own failure) replays as stored.
RETRYABLE_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED")
# How often a retry polls a turn that another request with the same request_id is still running.
RETRY_POLL_S = 0.05
# A RUNNING turn has no live owner once its attempt began more than `agent_timeout_cap_s` + this margin
# ago (ChatSettings.turn_stale_margin_s): every live attempt's agent call ends within the cap, and the
# margin covers storing the outcome (SQL statements are bounded by db_command_timeout_s). Such a turn
# (its process was killed mid-turn, or could not store its outcome) is retried like a FAILED
# UNAVAILABLE one: a retry with its request_id claims it in one statement and runs the agent again.
# An attempt whose owner process is known dead (its liveness lock is gone: services.chat.liveness) is
# claimed the same way at once; this time rule is the fallback (no owner recorded, or a partition).
STALE_MARGIN_S = 60.0


class AgentPort(Protocol):
    """How the gateway reaches the agent (gRPC in production: `services.chat.agent_client`)."""

    async def think(
        self, req: ThinkInput, *, timeout_s: float, metadata: tuple[tuple[str, str], ...]
    ) -> AgentReply: ...

    def stream(
        self, req: ThinkInput, *, timeout_s: float, metadata: tuple[tuple[str, str], ...]
    ) -> AsyncIterator[str | AgentReply]: ...


@dataclass(frozen=True)
class TurnCall:
    """One SendMessage/StreamMessage call: the owner (`sub`) and their token (forwarded to the agent),
    the validated input, the caller's span context (kept as a link only) and remaining seconds."""

    owner: str
    token: str
    turn: TurnInput
    caller: trace.SpanContext | None
    caller_remaining_s: float | None


@dataclass(frozen=True)
class TurnResult:
    user_message: Message
    reply: Message
    trace_id: str


@dataclass(frozen=True)
class StreamStart:
    """First event of a streamed turn: the stored user message."""

    user_message: Message
    trace_id: str


@dataclass(frozen=True)
class Replayed:
    """`_start`'s answer to a request_id retry: the stored turn (no agent call)."""

    result: TurnResult


@dataclass(frozen=True)
class Started:
    """`_start`'s answer to a new turn (or a retried failed one): its root span (open; the caller ends
    it), the stored user message, the history the agent gets, the caller's deadline and the workspace
    the agent gets when it was read with the user message (None: read it before the agent call)."""

    span: trace.Span
    user: Message
    history: list[HistoryMessage]
    deadline: float | None
    workspace: State | None = None


class TurnRunner:
    """Runs turns. One per gateway process; `repo` and `agent` are created once at start-up."""

    def __init__(
        self, repo: Repository, agent: AgentPort, tracer: trace.Tracer, cap_s: float, history_messages: int,
        meter=None, stale_margin_s: float = STALE_MARGIN_S, workspace: WorkspaceStore | None = None,
    ):
        # `agentfeedback.chat.turns` by `outcome` (OK, or the error's ErrorInfo reason: low cardinality).
        self._turns = LocalCounter(
            meter, "agentfeedback.chat.turns", unit="{turn}", description="Turns run, by outcome (OK or the error reason)."
        ) if meter is not None else None
        self._repo = repo
        self._agent = agent
        self._tracer = tracer
        self._cap_s = cap_s
        self._history = history_messages
        self._stale_s = cap_s + stale_margin_s  # a RUNNING attempt older than this has no live owner
        self._workspace = workspace  # None: the agent sees an empty workspace (its operations still apply)

    async def send(self, call: TurnCall) -> TurnResult:
        """One complete turn (SendMessage). Raises NotFound (`instance`), DeadlineExceeded,
        Unavailable, or DomainError(INTERNAL, AGENT_FAILED) — the last three with ErrorInfo metadata
        `trace_id` and `user_message` (the stored, addressable user message).
        A `turn.request_id` seen before returns the stored turn without calling the agent again.
        """
        started = await self._start(call)
        if isinstance(started, Replayed):
            return started.result
        span, user = started.span, started.user
        try:
            think_input, timeout, metadata = await self._agent_call(call, started)
            reply = await self._agent.think(think_input, timeout_s=timeout, metadata=metadata)
            stored = await self._store_reply(call.owner, span, user, reply)
            self._count("OK")
            return TurnResult(user, stored, user.trace_id)
        except BaseException as err:
            await self._fail(call.owner, span, user, err)
        finally:
            span.end()

    async def stream(self, call: TurnCall) -> AsyncIterator[StreamStart | str | Message]:
        """The streamed turn (StreamMessage): yields StreamStart, then reply chunks (str), then the
        stored reply (Message). Same rules and errors as `send`; no partial reply is ever stored.
        """
        started = await self._start(call)
        if isinstance(started, Replayed):  # a retry: replay the stored turn
            r = started.result
            yield StreamStart(r.user_message, r.trace_id)
            yield r.reply.content
            yield r.reply
            return
        span, user = started.span, started.user
        try:
            yield StreamStart(user, user.trace_id)
            think_input, timeout, metadata = await self._agent_call(call, started)
            final: AgentReply | None = None
            async for item in self._agent.stream(think_input, timeout_s=timeout, metadata=metadata):
                if isinstance(item, AgentReply):
                    final = item
                else:
                    yield sanitize_reply(item)[0]
            if final is None:
                raise AgentCallError("FAILED", "the agent's stream ended without a final reply")
            yield await self._store_reply(call.owner, span, user, final)
            self._count("OK")
        except BaseException as err:
            await self._fail(call.owner, span, user, err)
        finally:
            span.end()

    # -- steps ---------------------------------------------------------------------------------

    async def _start(self, call: TurnCall) -> Replayed | Started:
        """Steps 1–2, shared by `send` and `stream`: a request_id retry is answered from the stored
        turn (`Replayed`: no new span, no agent call); else the root span at t0 and the stored user
        message (`Started`; the caller ends the span). When the stored turn failed with one of
        RETRYABLE_CODES, the turn runs again in a new trace (linked to the failed one) with the stored
        user message (span attribute `chat.retry_of_trace` names the failed trace)."""
        received_ns = time.time_ns()
        deadline = deadlines.at(call.caller_remaining_s)
        turn = call.turn
        failed: TurnRecord | None = None
        if turn.request_id is not None:
            try:
                done = await self._replay(call.owner, turn, call.caller_remaining_s)
            except Exception as err:  # noqa: BLE001 - only a dependency failure is handled here
                self._unreachable_before_turn(turn, received_ns, err)
                raise
            if isinstance(done, TurnResult):
                return Replayed(done)
            failed = done
        # t0 is this attempt's start, read after _replay's wait for a running turn (up to the agent
        # cap): a claim of a stale turn stores it as the attempt time, and an attempt time seconds
        # old made the new attempt look stale at once to the other retries, which took it over while
        # its agent still ran (two replies answered; tests/fuzz/test_faults.py).
        t0_ns = time.time_ns()
        links = [Link(call.caller)] if call.caller is not None and call.caller.is_valid else None
        attributes = {"chat.instance": f"instances/{turn.instance_id}", "rpc.system": "grpc"}
        if turn.request_id is not None:  # set at creation: each later set_attribute takes the span's lock
            attributes["chat.request_id"] = str(turn.request_id)
        span = span_pipe.start_span(  # the span pipe's own span when it alone exports them (else the SDK's)
            self._tracer,
            TURN_SPAN,
            context=otel_context.Context(),
            kind=SpanKind.SERVER,
            start_time=t0_ns,
            links=links,
            attributes=attributes,
        )
        trace_id = format(span.get_span_context().trace_id, "032x")
        REQUEST_TRACE_ID.set(trace_id)  # log lines of this turn name its trace (services.common.telemetry)
        try:
            began = await self._store_user(call, failed, span, trace_id, time_from_ns(t0_ns))
        except BaseException as err:
            if not isinstance(err, NotFound):
                span.set_status(Status(StatusCode.ERROR, type(err).__name__))
            span.end()
            dep = dependency_error(err, trace_id=trace_id) if isinstance(err, Exception) else None
            if dep is not None and not isinstance(err, DomainError):  # the turn's trace id, in the error
                self._count(dep.reason)
                INCIDENTS.failure(dep.reason, f"turn {trace_id}: {type(err).__name__}", err)
                raise dep from err
            raise
        if isinstance(began, Replayed):  # lost a race with the same request_id
            span.end()
            return began
        user, history, workspace = began
        span.set_attributes({"chat.turn_index": user.turn_index, "chat.user_message": user.name})
        span.add_event(
            "chat.in",
            {
                "chat.message": user.name,
                "chat.content_chars": len(user.content),
                "chat.channel": user.channel.name,
            },
            timestamp=t0_ns,
        )
        return Started(span, user, history, deadline, workspace)

    async def _store_user(self, call: TurnCall, failed: TurnRecord | None, span: trace.Span, trace_id: str,
                          t0: datetime) -> tuple[Message, list[HistoryMessage], State | None] | Replayed:
        """Step 2: the user message stored under the new trace (or the failed turn `failed` claimed for
        this retry) with the turn's history and, for a new turn with a workspace store, the workspace
        the agent gets (same statement); `Replayed` when another request with the same request_id
        stored its turn first. NOT_FOUND (`instance`) when the instance is not the caller's."""
        owner, turn = call.owner, call.turn
        try:
            if failed is not None:
                assert turn.request_id is not None
                span.set_attribute("chat.retry_of_trace", failed.trace_id)
                began = await self._repo.retry_turn(owner, failed, turn.request_id, trace_id, RETRYABLE_CODES,
                                                    self._history, t0, self._stale_before())
                if began is None:  # another retry claimed it first: wait for that one
                    began = await self._replay(owner, turn, call.caller_remaining_s, rerun=False)
            elif self._workspace is not None:
                began = await self._repo.begin_turn_in_workspace(owner, turn, trace_id, new_id(), t0, self._history)
            else:
                began = await self._repo.begin_turn(owner, turn, trace_id, new_id(), t0, self._history)
        except RequestRace:
            if turn.request_id is None:
                raise
            began = await self._replay(owner, turn, call.caller_remaining_s)
            if began is None:
                raise
        if began is None:
            span.set_attribute("rpc.grpc.status_code", code_pb2.NOT_FOUND)
            raise NotFound(f"instances/{turn.instance_id}")
        if isinstance(began, TurnRecord | TurnResult):  # lost a race with the same request_id
            span.set_attribute("chat.duplicate_request", True)
        if isinstance(began, TurnRecord):  # the other request's turn is stored: wait for its outcome
            began = await self._replay(owner, turn, call.caller_remaining_s, rerun=False)
        if isinstance(began, TurnResult):
            return Replayed(began)
        if began is None or isinstance(began, TurnRecord):  # its messages were deleted meanwhile
            raise NotFound(f"instances/{turn.instance_id}")
        return began if len(began) == 3 else (*began, None)

    async def _agent_call(self, call: TurnCall, s: Started
                          ) -> tuple[ThinkInput, float, tuple[tuple[str, str], ...]]:
        """Step 3's arguments: what the agent gets, its timeout (measured now, after the database
        writes) and the metadata carrying the turn's context and the owner's token."""
        timeout = agent_timeout(deadlines.left(s.deadline), self._cap_s)
        think_input = await self._think_input(call.owner, call.turn, s.user, s.history, s.user.agent, s.workspace)
        return think_input, timeout, self._metadata(s.span, call.token)

    async def _replay(
        self, owner: str, turn: TurnInput, caller_remaining_s: float | None, rerun: bool = True
    ) -> TurnResult | TurnRecord | None:
        """The stored outcome of a request_id already used: its TurnResult, its error re-raised, the
        TurnRecord of a turn that failed with one of RETRYABLE_CODES (when `rerun`: the caller runs it
        again), or (while the first request still runs) waiting for it within the caller's time."""
        assert turn.request_id is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + agent_timeout(caller_remaining_s, self._cap_s)
        while True:
            rec = await self._repo.turn_by_request(owner, turn.instance_id, turn.request_id)
            if rec is None:
                return None
            check_same_request(rec.request_fingerprint, turn.request_fingerprint)
            if rec.state == "DONE" and rec.reply is not None:
                return TurnResult(rec.user_message, rec.reply, rec.trace_id)
            if rerun and rec.state == "RUNNING" and (rec.owner_dead or (
                    rec.attempt_time and rec.attempt_time < self._stale_before())):
                return rec  # its process died mid-turn (liveness lock gone, or STALE_MARGIN_S): run it again
            if rec.state == "FAILED":
                if rerun and rec.error_code in RETRYABLE_CODES:
                    return rec
                raise _turn_error(
                    rec.error_code or "FAILED", rec.error_message or "", rec.trace_id, rec.user_message.name
                )
            if loop.time() >= deadline:  # the first attempt is alive elsewhere: not the agent's failure
                raise DeadlineExceeded(
                    "the first request with this request_id is still running; retry with it later",
                    reason="TURN_IN_PROGRESS", trace_id=rec.trace_id, user_message=rec.user_message.name,
                )
            await asyncio.sleep(RETRY_POLL_S)

    def replays_as_stored(self, rec: TurnRecord) -> bool:
        """Whether a retry of `rec`'s request replays it or waits for it (False: it runs the agent again)."""
        stale = rec.state == "RUNNING" and (rec.owner_dead or (
            rec.attempt_time is not None and rec.attempt_time < self._stale_before()))
        return not stale and not (rec.state == "FAILED" and rec.error_code in RETRYABLE_CODES)

    def _stale_before(self) -> datetime:
        """RUNNING attempts that began before this have no live owner (STALE_MARGIN_S)."""
        return datetime.now(UTC) - timedelta(seconds=self._stale_s)

    async def _think_input(
        self, owner: str, turn: TurnInput, user: Message, history: list[HistoryMessage], agent: str,
        workspace: State | None = None,
    ) -> ThinkInput:
        """What the agent gets: the turn, its history and the workspace the previous turn left
        (`workspace` when read with the user message, else read now)."""
        ws = ThinkInput.workspace
        if workspace is not None:
            ws = workspace
        elif self._workspace is not None:
            ws = await self._workspace.before_turn(owner, turn.instance_id, user.turn_index)
        return ThinkInput(
            instance=f"instances/{turn.instance_id}",
            agent=agent,
            history=history,
            content=user.content,
            turn_index=user.turn_index,
            user_message=user.name,
            workspace=ws,
        )

    @staticmethod
    def _metadata(span: trace.Span, token: str) -> tuple[tuple[str, str], ...]:
        """Step 3: the turn's W3C context + the caller's token (the agent acts on the owner's behalf)."""
        return (("authorization", f"Bearer {token}"), *span_headers(span))

    async def _store_reply(self, owner: str, span: trace.Span, user: Message, reply: AgentReply) -> Message:
        """Step 5: the reply (same trace id and turn index), then `chat.out`."""
        text, replaced = sanitize_reply(reply.content)
        if replaced:
            span.add_event("chat.reply_sanitized", {"chat.nul_replaced": replaced})
        now_ns = time.time_ns()
        msg = Message(
            instance_id=user.instance_id,
            id=new_id(),
            role=Role.ASSISTANT,
            content=text,
            trace_id=user.trace_id,
            turn_index=user.turn_index,
            create_time=time_from_ns(now_ns),
            model=reply.model,
            agent=user.agent,
        )
        ws_start_ns = time.time_ns()
        applied = await asyncio.shield(
            self._repo.finish_turn(owner, msg, reply.defects, reply.defect_tools, reply.workspace_ops))
        if applied is None:
            log.warning("turn %s: a retry took the turn over (STALE_MARGIN_S); this reply is not stored", user.trace_id)
        else:
            self._record_workspace(span, applied, ws_start_ns)
        span.set_attribute("chat.reply_message", msg.name)
        span.add_event(
            "chat.out",
            {"chat.message": msg.name, "chat.content_chars": len(text), "gen_ai.response.model": reply.model},
            timestamp=now_ns,
        )
        return msg

    def _record_workspace(self, span: trace.Span, applied: Applied, start_ns: int) -> None:
        """What the turn did to the workspace, in its trace: a `workspace.update` child span per applied
        operation (stored in the reply's transaction, which ran from `start_ns` until now), and the event
        `workspace.operation_dropped` per dropped one."""
        ctx = trace.set_span_in_context(span)
        end_ns = time.time_ns()
        for u in applied.updates:
            attrs: dict[str, str | int] = {"workspace.component": u.component, "workspace.operation": u.operation}
            if u.artifact_id:
                attrs |= {"workspace.artifact_id": u.artifact_id, "workspace.artifact_version": u.artifact_version}
            span_pipe.start_span(self._tracer, WORKSPACE_SPAN, context=ctx, attributes=attrs,
                                 start_time=start_ns).end(end_ns)
        for d in applied.dropped:
            span.add_event("workspace.operation_dropped", {
                "workspace.operation_index": d.index, "workspace.operation": d.kind, "workspace.drop_reason": d.reason,
            })
        if applied.changed:
            span.set_attribute("workspace.changed", list(applied.changed))

    async def _fail(self, owner: str, span: trace.Span, user: Message, err: BaseException) -> NoReturn:
        """Step 6: the root span ERROR, the turn marked FAILED (the user message stays); raises the
        error the caller gets (ErrorInfo metadata: `trace_id`, `user_message`); a cancellation
        is re-raised as it is."""
        if isinstance(err, AgentCallError):
            code, detail = err.kind, err.detail
        elif isinstance(err, (asyncio.CancelledError, GeneratorExit)):
            code, detail = "CANCELLED", "the caller cancelled the turn"
        elif isinstance(err, DomainError):
            code, detail = err.reason, err.message
        elif (dep := dependency_error(err)) is not None:
            code, detail = dep.reason, dep.message
            INCIDENTS.failure(dep.reason, f"turn {user.trace_id}: {type(err).__name__}", err)
        else:
            code, detail = "INTERNAL", type(err).__name__
            log.error("turn %s failed", user.trace_id, exc_info=err)
        span.set_status(Status(StatusCode.ERROR, clip(f"{code}: {detail}")))
        span.set_attribute("error.type", code)
        try:
            await asyncio.shield(
                self._repo.fail_turn(owner, user.instance_id, user.trace_id, code, detail[:1000])
            )
        except Exception as e:  # noqa: BLE001 - the caller's error matters more than the bookkeeping
            if dependency_error(e) is not None:  # the database is down: counted in its incident
                INCIDENTS.failure("DATABASE_UNAVAILABLE", f"could not mark turn {user.trace_id} failed", e)
            else:
                log.exception("could not mark turn %s failed", user.trace_id)
        self._count(code)
        if not isinstance(err, Exception):  # CancelledError, GeneratorExit, KeyboardInterrupt
            raise err
        raise _turn_error(code, detail, user.trace_id, user.name) from err


    def _unreachable_before_turn(self, turn: TurnInput, t0_ns: int, err: Exception) -> None:
        """The request_id look-up failed because a dependency is down: the attempt still gets a trace
        (one ERROR `chat.turn` span) and the UNAVAILABLE it raises names that trace id."""
        if isinstance(err, DomainError) or dependency_error(err) is None:
            return
        span = span_pipe.start_span(self._tracer, TURN_SPAN, context=otel_context.Context(), kind=SpanKind.SERVER,
                                    attributes={"chat.instance": f"instances/{turn.instance_id}"}, start_time=t0_ns)
        trace_id = format(span.get_span_context().trace_id, "032x")
        REQUEST_TRACE_ID.set(trace_id)
        dep = dependency_error(err, trace_id=trace_id)
        assert dep is not None
        span.set_status(Status(StatusCode.ERROR, dep.reason))
        span.set_attribute("error.type", dep.reason)
        span.end()
        self._count(dep.reason)
        INCIDENTS.failure(dep.reason, f"turn {trace_id}: {type(err).__name__}", err)
        raise dep from err

    def _count(self, outcome: str) -> None:
        if self._turns is not None:
            self._turns.add(1, {"outcome": outcome})


def _turn_error(code: str, detail: str, trace_id: str, user_message: str) -> BaseException:
    md = {"trace_id": trace_id, "user_message": user_message}
    if code == "DEADLINE_EXCEEDED":
        return DeadlineExceeded(
            f"the agent did not answer in time: {detail}", reason="AGENT_DEADLINE_EXCEEDED", **md
        )
    if code == "UNAVAILABLE":
        return Unavailable(
            f"the agent is unreachable: {detail}", retry_after_s=1.0, reason="AGENT_UNAVAILABLE", **md
        )
    if code == "DATABASE_UNAVAILABLE":
        return database_unavailable(**md)
    if code in ("UPSTREAM_UNAVAILABLE", "DEPENDENCY_UNAVAILABLE"):
        return Unavailable(f"the turn failed: {detail}", retry_after_s=1.0, reason=code, **md)
    if code == "CANCELLED":
        return Cancelled("the turn was cancelled by its caller", reason="TURN_CANCELLED", **md)
    if code == "FAILED":
        return Internal(f"the agent failed: {detail}", reason="AGENT_FAILED", **md)
    # The gateway's own failure (e.g. storing the reply): INTERNAL, still naming the turn.
    return Internal(f"the turn failed ({detail})", reason="TURN_FAILED", **md)
