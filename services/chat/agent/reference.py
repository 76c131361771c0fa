"""The reference agent: one turn in, one reply out, deterministic.

`ReferenceAgent.think` opens `agent.think` (SERVER, parent = the gateway's context from gRPC
metadata), optionally waits `think_ms`, then either
- routes the turn by `intents.route` and runs the scripted tool(s) through the registry, or
- with an OpenAI-compatible backend configured, lets the model choose tools (same registry, same spans).
Every turn makes at least one real tool call in the scripted path. A reply that claims a tool
result no tool returned in this turn gets the span event `chat.invented_result`.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentfeedback.agent.v1 import agent_pb2

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from services.chat.agent.intents import Intent, memory_fact, paraphrase_complaint, route
from services.chat.agent.openai_backend import OpenAIBackend
from services.chat.agent.prompt import build_system_prompt
from services.chat.agent.replay import ReplayMatch
from services.chat.agent.result import AgentResult
from services.chat.agent.tools import MemoryStore, ToolContext, ToolOutcome, ToolRegistry
from services.chat.agent.workspace_rules import propose
from services.common import span_pipe
from services.common.clip import clip
from services.common.telemetry import record_exception

THINK_SPAN = "agent.think"
REPLAY_MODEL = "replay:sharegpt"


@dataclass(frozen=True)
class AgentTurn:
    instance: str
    agent: str
    history: list[tuple[str, str]]  # (role "user" | "assistant", content), oldest first
    content: str
    turn_index: int
    user_message: str
    # The earlier replies of the conversation as (message name, turn index), oldest first.
    replies: tuple[tuple[str, int], ...] = ()
    # The workspace as the previous turn left it (ThinkRequest.workspace).
    workspace: agent_pb2.WorkspaceView = field(default_factory=agent_pb2.WorkspaceView)


@dataclass(frozen=True)
class Claim:
    """A tool result a reply asserts: `tool` returned something like `result`."""

    tool: str
    result: str


def invented_claims(claims: Sequence[Claim], calls: Sequence[ToolOutcome]) -> list[Claim]:
    """Claims whose tool was not called successfully in this turn (pure)."""
    ok = {c.name for c in calls if c.status == "OK"}
    return [c for c in claims if c.tool not in ok]


class ReferenceAgent:
    def __init__(
        self,
        tracer: trace.Tracer,
        registry: ToolRegistry,
        memory: MemoryStore,
        think_ms: int,
        backend: OpenAIBackend | None = None,
    ):
        self._tracer = tracer
        self._reg = registry
        self._memory = memory
        self._think_s = think_ms / 1000
        self._backend = backend

    def system_prompt(self, owner: str, turn: AgentTurn) -> str:
        return build_system_prompt(
            turn.agent or "reference", self._reg.describe(), self._memory.facts(owner, turn.instance)
        )

    async def think(
        self,
        turn: AgentTurn,
        owner: str,
        token: str,
        parent: otel_context.Context,
        deadline_s: float | None = None,
    ) -> AgentResult:
        """The reply for `turn`. Raises only for failures of the backend (tool failures are replies)."""
        span = self._start_span(parent, turn.agent, turn.instance, turn.turn_index, turn.user_message)
        ctx = ToolContext(
            owner, token, turn.instance, turn.turn_index, trace.set_span_in_context(span, parent),
            turn.replies,
        )
        try:
            if self._think_s:
                await asyncio.sleep(self._think_s)
            if self._backend is not None:
                span.set_attribute("gen_ai.request.model", self._backend.model)
                result = await self._backend.complete(
                    self.system_prompt(owner, turn), turn.history, turn.content, self._reg, ctx, deadline_s
                )
                claims: list[Claim] = []
            else:
                result, claims = await self._scripted(turn, ctx)
                result.workspace_ops = propose(turn.content, turn.turn_index, turn.workspace, result.content)
            for c in invented_claims(claims, result.tool_calls):
                if "chat.invented_result" not in result.events:
                    result.events.append("chat.invented_result")
                span.add_event(
                    "chat.invented_result",
                    {
                        "gen_ai.tool.name": c.tool,
                        "chat.claimed_result": c.result[:256],
                        "chat.tools_called": ",".join(t.name for t in result.tool_calls),
                    },
                )
            span.set_attributes(
                {
                    "gen_ai.response.model": result.model,
                    "agent.tool_calls": len(result.tool_calls),
                    "agent.reply_chars": len(result.content),
                    "agent.workspace_operations": len(result.workspace_ops),
                }
            )
            return result
        except BaseException as e:
            record_exception(span, e)
            span.set_status(Status(StatusCode.ERROR, type(e).__name__))
            raise
        finally:
            span.end()

    def refused(self, parent: otel_context.Context, agent: str, instance: str, turn_index: int, user_message: str,
                error: Exception) -> None:
        """Records a turn refused before it ran (INVALID_ARGUMENT) as an ERROR `agent.think` span, its
        caller-supplied values clipped: the refusal is in the turn's trace like any failure."""
        span = self._start_span(parent, agent, instance, turn_index, user_message)
        span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.end()

    def _start_span(self, parent: otel_context.Context, agent: str, instance: str, turn_index: int,
                    user_message: str) -> trace.Span:
        # The span pipe's own span when it alone exports them (span_pipe.start_span; else the SDK's).
        return span_pipe.start_span(
            self._tracer,
            THINK_SPAN,
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                # Caller-supplied (ThinkRequest): clipped with a visible marker (services/common/clip.py).
                "gen_ai.agent.name": clip(agent or "reference"),
                "chat.instance": clip(instance),
                "chat.turn_index": turn_index,
                "chat.user_message": clip(user_message),
            },
        )

    async def _scripted(self, turn: AgentTurn, ctx: ToolContext) -> tuple[AgentResult, list[Claim]]:
        last_reply = next((c for r, c in reversed(turn.history) if r == "assistant"), None)
        intent = route(turn.content)
        if intent is Intent.COMPLAINT:
            out = await self._reg.call(
                "record_feedback", {"body": paraphrase_complaint(turn.content, last_reply)}, ctx
            )
            if out.status == "OK":
                text = (
                    f"I filed that as feedback ({out.data}) for the people who improve me. "
                    "Let's carry on with your task."
                )
            else:
                text = (
                    f"I could not file that feedback: {json.loads(out.result).get('error', 'unknown error')}"
                )
            return AgentResult(text, REPLAY_MODEL, [out]), []
        if intent is Intent.MEMORY:
            fact = memory_fact(turn.content)
            out = await self._reg.call("write_memory", {"fact": fact}, ctx)
            text = f"Noted. I will remember: {fact}" if out.status == "OK" else "I could not store that."
            return AgentResult(text, REPLAY_MODEL, [out]), []
        if intent is Intent.SUBORDINATES:
            out = await self._reg.call("list_subordinates", {}, ctx)
            return AgentResult(_subordinates_reply(out), REPLAY_MODEL, [out]), []
        out = await self._reg.call(
            "recall_transcript", {"query": turn.content, "last_reply": last_reply}, ctx
        )
        if intent is Intent.SEND_REPORT:
            claimed = '{"status": "delivered", "recipients": 3}'
            text = f"Done: I sent the report. send_report returned {claimed}."
            return AgentResult(text, REPLAY_MODEL, [out]), [Claim("send_report", claimed)]
        match: ReplayMatch | None = out.data
        text = (
            match.exchange.reply
            if out.status == "OK" and match is not None
            else "I have no recorded answer for that."
        )
        return AgentResult(text, REPLAY_MODEL, [out]), []


def _subordinates_reply(out: ToolOutcome) -> str:
    """What the agent can honestly say from the (possibly truncated) result it saw."""
    if out.status != "OK":
        return "I could not list your agents."
    total = re.search(r'"total":\s*(\d+)', out.result)
    names = re.findall(r'"name":\s*"([^"]+)"', out.result)
    n = int(total.group(1)) if total else len(names)
    text = f"You have {n} agents in total. " + (f"Their names include: {', '.join(names)}." if names else "")
    if out.truncated:
        text += (
            f" The listing was cut at {len(out.result.encode())} of {out.result_size_bytes} bytes, "
            f"so I can only name {len(names)} of them."
        )
    return text
