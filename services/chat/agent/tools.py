"""The agent's one tool registry: every tool call (scripted or from an LLM backend) goes through
`ToolRegistry.call`, which records it as a `tool.call` span (child of `agent.think`):

attributes (OpenTelemetry GenAI semantic conventions where they exist):
  `gen_ai.operation.name` = "execute_tool", `gen_ai.tool.name`, `gen_ai.tool.call.id`,
  `gen_ai.tool.call.arguments` / `gen_ai.tool.call.result` (previews, at most PREVIEW_BYTES UTF-8 bytes),
  `tool.arguments.size_bytes`, `tool.result.size_bytes` (full sizes), `tool.result.truncated`.
events: `chat.truncated` when the result exceeded `max_result_bytes` and was cut by this layer
  (`tool.result.original_bytes`, `tool.result.kept_bytes`); an exception event on failure.
status: ERROR when the tool raised (the model sees `{"error": ...}` as the result).

Tools: `recall_transcript` (the recorded reply), `record_feedback` (FeedbackService.CreateFeedback on
the owner's behalf, author AGENT, target = the reply complained about — the previous assistant message
unless the call names another — with the complaint turn's trace id as `context_trace_id`),
`write_memory` (in-process store), `list_subordinates` (a large listing).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from services.chat.agent.replay import LazyReplay
from services.common import span_pipe, toolcalls
from services.common.telemetry import record_exception

log = logging.getLogger(__name__)

TOOL_SPAN = toolcalls.TOOL_SPAN  # what counts as a tool call: services/common/toolcalls.py
# Previews of arguments/results on the span (the full sizes are attributes too).
PREVIEW_BYTES = 1024


def cut_utf8(text: str, max_bytes: int) -> tuple[str, int, bool]:
    """`text` cut to at most `max_bytes` UTF-8 bytes on a character boundary.
    Returns (kept text, original size in bytes, cut?)."""
    raw = text.encode()
    if len(raw) <= max_bytes:
        return text, len(raw), False
    return raw[:max_bytes].decode(errors="ignore"), len(raw), True


@dataclass
class ToolContext:
    """What a tool may use: the caller's identity (for on-behalf-of calls) and the turn."""

    owner: str
    token: str
    instance: str
    turn_index: int
    otel: otel_context.Context = field(default_factory=otel_context.Context)
    # The conversation's earlier replies as (message name, turn index), oldest first.
    replies: tuple[tuple[str, int], ...] = ()

    @property
    def trace_id(self) -> str:
        """The current turn's trace id, read from the OpenTelemetry context (32 hex)."""
        return format(trace.get_current_span(self.otel).get_span_context().trace_id, "032x")


@dataclass(frozen=True)
class ToolOutcome:
    call_id: str
    name: str
    status: str  # OK | ERROR
    result: str  # what the model sees (cut to max_result_bytes)
    result_size_bytes: int
    truncated: bool
    data: Any = None  # the tool's structured return value (not shown to a model)


ToolFn = Callable[[dict[str, Any], ToolContext], Awaitable[tuple[str, Any]]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    # JSON Schema of the arguments (OpenAI "function" tool format).
    parameters: dict[str, Any]
    fn: ToolFn


class ToolRegistry:
    def __init__(self, tracer: trace.Tracer, max_result_bytes: int):
        self._tracer = tracer
        self._max = max_result_bytes
        self._tools: dict[str, Tool] = {}

    def register(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def describe(self) -> list[tuple[str, str]]:
        """(name, description) of each tool, for the system prompt."""
        return [(t.name, t.description) for t in self._tools.values()]

    def openai_tools(self) -> list[dict[str, Any]]:
        """The tools in OpenAI chat-completions format."""
        return [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in self._tools.values()
        ]

    async def call(
        self, name: str, args: dict[str, Any], ctx: ToolContext, call_id: str | None = None
    ) -> ToolOutcome:
        """Run tool `name` under a `tool.call` span (child of `ctx.otel`). Never raises for a tool's
        own failure: the outcome has status ERROR and an `{"error": ...}` result."""
        call_id = call_id or f"call_{uuid.uuid4().hex[:24]}"
        args_text = json.dumps(args, ensure_ascii=False)
        span = span_pipe.start_span(  # the span pipe's own span when it alone exports them
            self._tracer,
            TOOL_SPAN,
            context=ctx.otel,
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                toolcalls.NAME: name,
                toolcalls.CALL_ID: call_id,
                "gen_ai.tool.call.arguments": cut_utf8(args_text, PREVIEW_BYTES)[0],
                "tool.arguments.size_bytes": len(args_text.encode()),
            },
        )
        tool_ctx = dataclasses.replace(ctx, otel=trace.set_span_in_context(span))
        status, data = "OK", None
        try:
            tool = self._tools.get(name)
            if tool is None:
                raise LookupError(f"unknown tool {name!r}")
            result, data = await tool.fn(args, tool_ctx)
        except Exception as e:  # noqa: BLE001 - a tool failure is the model's problem, recorded on the span
            status = "ERROR"
            result = json.dumps({"error": f"{type(e).__name__}: {e}"[:500]})
            record_exception(span, e)
            span.set_status(Status(StatusCode.ERROR, type(e).__name__))
        kept, size, cut = cut_utf8(result, self._max)
        if cut:
            span.add_event(
                "chat.truncated",
                {
                    toolcalls.NAME: name,
                    toolcalls.CALL_ID: call_id,
                    "tool.result.original_bytes": size,
                    "tool.result.kept_bytes": len(kept.encode()),
                },
            )
        span.set_attributes(
            {
                "gen_ai.tool.call.result": cut_utf8(kept, PREVIEW_BYTES)[0],
                "tool.result.size_bytes": size,
                "tool.result.truncated": cut,
            }
        )
        span.end()
        return ToolOutcome(call_id, name, status, kept, size, cut, data)


# -- the tools ---------------------------------------------------------------------------------------


class FeedbackPort(Protocol):
    async def create(
        self, *, trace_id: str, instance: str, body: str, token: str, otel: otel_context.Context,
        message: str = "",
    ) -> str:
        """Creates an AGENT-authored feedback row about `message` (empty: about the turn `trace_id`);
        returns its name. Raises on failure."""
        ...


def complained_about(args: dict[str, Any], ctx: ToolContext) -> str:
    """The reply a `record_feedback` call is about: `message` (a message name of this instance) or the
    reply of turn `turn_index` when the call names one, else the previous assistant message; '' when
    the conversation has no earlier reply (the report is then about the current turn). ValueError for a
    message of another instance or a turn without a reply."""
    named = str(args.get("message") or "")
    if named:
        if not named.startswith(f"{ctx.instance}/messages/"):
            raise ValueError(f"message must be a message of {ctx.instance}")
        return named
    if args.get("turn_index") is not None:
        want = int(args["turn_index"])
        for name, turn in reversed(ctx.replies):
            if turn == want:
                return name
        raise ValueError(f"turn {want} has no reply in this conversation")
    return ctx.replies[-1][0] if ctx.replies else ""


class MemoryStore:
    """`write_memory`'s store: in-process, per (owner, instance), bounded to the newest `limit` facts."""

    def __init__(self, limit: int = 100):
        self._facts: dict[tuple[str, str], list[str]] = {}
        self._limit = limit

    def add(self, owner: str, instance: str, fact: str) -> int:
        facts = self._facts.setdefault((owner, instance), [])
        facts.append(fact)
        del facts[: -self._limit]
        return len(facts)

    def facts(self, owner: str, instance: str) -> list[str]:
        return list(self._facts.get((owner, instance), ()))


SUBORDINATE_COUNT = 120
_FIRST = ["Ada", "Basil", "Cora", "Dmitri", "Esme", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kaia", "Lior"]
_ROLES = ["researcher", "scheduler", "coder", "reviewer", "writer", "analyst"]


def subordinates(owner: str) -> list[dict[str, str]]:
    """The owner's agents in the reference world: SUBORDINATE_COUNT deterministic entries."""
    return [
        {
            "id": f"agent-{i:03d}",
            "name": f"{_FIRST[i % len(_FIRST)]} {i:03d}",
            "role": _ROLES[i % len(_ROLES)],
            "status": "active" if i % 7 else "paused",
            "owner": owner,
        }
        for i in range(SUBORDINATE_COUNT)
    ]


def build_registry(
    tracer: trace.Tracer,
    max_result_bytes: int,
    replay: LazyReplay,
    feedback: FeedbackPort,
    memory: MemoryStore,
    run_blocking: Callable[[Callable[[], Any]], Awaitable[Any]],
) -> ToolRegistry:
    """The registry with the four tools. `run_blocking` runs a blocking call off the event loop."""
    reg = ToolRegistry(tracer, max_result_bytes)

    async def recall_transcript(args: dict[str, Any], ctx: ToolContext) -> tuple[str, Any]:
        index = replay.loaded or await run_blocking(replay.get)
        match = index.lookup(str(args.get("query", "")), args.get("last_reply"), ctx.turn_index)
        e = match.exchange
        return json.dumps(
            {"conversation": e.conversation_id, "exchange": e.index, "exact": match.exact, "reply": e.reply},
            ensure_ascii=False,
        ), match

    async def record_feedback(args: dict[str, Any], ctx: ToolContext) -> tuple[str, Any]:
        body = str(args.get("body", "")).strip()
        if not body:
            raise ValueError("body is required: the owner's complaint in their words")
        about = complained_about(args, ctx)
        name = await feedback.create(
            trace_id=ctx.trace_id, instance=ctx.instance, body=body, token=ctx.token, otel=ctx.otel,
            message=about,
        )
        return json.dumps({"feedback": name, "about": about or ctx.trace_id, "trace_id": ctx.trace_id}), name

    async def write_memory(args: dict[str, Any], ctx: ToolContext) -> tuple[str, Any]:
        fact = str(args.get("fact", "")).strip()
        if not fact:
            raise ValueError("fact is required")
        n = memory.add(ctx.owner, ctx.instance, fact)
        return json.dumps({"stored": True, "facts": n}), fact

    async def list_subordinates(args: dict[str, Any], ctx: ToolContext) -> tuple[str, Any]:
        agents = subordinates(ctx.owner)
        return json.dumps({"total": len(agents), "agents": agents}), agents

    reg.register(
        Tool(
            "recall_transcript",
            "Find the recorded reply to the owner's message in real conversations.",
            {
                "type": "object",
                "properties": {"query": {"type": "string"}, "last_reply": {"type": "string"}},
                "required": ["query"],
            },
            recall_transcript,
        )
    )
    reg.register(
        Tool(
            "record_feedback",
            "File the owner's complaint about your own behaviour as feedback for the people who improve "
            "you (not a memory).",
            {
                "type": "object",
                "properties": {
                    "body": {"type": "string", "maxLength": 4000},
                    "message": {"type": "string", "description": "The reply complained about "
                                "(instances/{i}/messages/{m}); default: your previous reply."},
                    "turn_index": {"type": "integer", "description": "Or: the turn whose reply it is about."},
                },
                "required": ["body"],
            },
            record_feedback,
        )
    )
    reg.register(
        Tool(
            "write_memory",
            "Remember a fact the owner told you about themselves or their work.",
            {"type": "object", "properties": {"fact": {"type": "string"}}, "required": ["fact"]},
            write_memory,
        )
    )
    reg.register(
        Tool(
            "list_subordinates",
            "List the owner's agents (id, name, role, status).",
            {"type": "object", "properties": {}},
            list_subordinates,
        )
    )
    return reg
