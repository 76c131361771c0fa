"""Optional backend: any OpenAI-compatible `POST {base_url}/chat/completions` endpoint (httpx).

Off unless `AGENTFEEDBACK_AGENT_OPENAI_BASE_URL` and `_MODEL` are set. The model's tool calls go
through the same `ToolRegistry` (same `tool.call` spans, same truncation); at most MAX_ROUNDS
model calls per turn. The workspace operations are offered as tools too (services.chat.agent.workspace_tools):
a call of one is collected as a proposal (the model is told it was proposed; the gateway validates it).
Errors: `BackendError` for a non-2xx answer, a malformed body, or a timeout.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx

from services.chat.agent import workspace_tools
from services.chat.agent.result import AgentResult

if TYPE_CHECKING:
    from services.chat.agent.tools import ToolContext, ToolRegistry

# Model calls per turn (tool rounds + the final answer).
MAX_ROUNDS = 4
# Seconds per model call when the turn has no deadline.
DEFAULT_TIMEOUT_S = 60.0


class BackendError(RuntimeError):
    pass


class OpenAIBackend:
    def __init__(self, base_url: str, model: str, api_key: str = "", client: httpx.AsyncClient | None = None):
        self.model = model
        self._url = base_url.rstrip("/") + "/chat/completions"
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.AsyncClient(headers=headers)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def complete(
        self,
        system: str,
        history: Sequence[tuple[str, str]],
        content: str,
        registry: ToolRegistry,
        ctx: ToolContext,
        deadline_s: float | None,
    ) -> AgentResult:
        """Run the chat-completions loop for one turn; returns the final reply and the tool calls made."""

        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            *({"role": r, "content": c} for r, c in history),
            {"role": "user", "content": content},
        ]
        calls = []
        proposals: list[tuple[str, dict]] = []
        end = time.monotonic() + (deadline_s if deadline_s is not None else DEFAULT_TIMEOUT_S * MAX_ROUNDS)
        for _ in range(MAX_ROUNDS):
            msg = await self._post(
                {"model": self.model, "messages": messages,
                 "tools": [*registry.openai_tools(), *workspace_tools.TOOLS]},
                max(0.001, end - time.monotonic()),
            )
            tool_calls = msg.get("tool_calls") or []
            if not tool_calls:
                return AgentResult(str(msg.get("content") or ""), self.model, calls, workspace_ops=proposals)
            messages.append({"role": "assistant", "content": msg.get("content"), "tool_calls": tool_calls})
            for tc in tool_calls:
                fn = tc.get("function", {})
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except json.JSONDecodeError:
                    args = {"_unparsed": fn.get("arguments")}
                name = str(fn.get("name"))
                if name in workspace_tools.NAMES:
                    proposals.append((name, args if isinstance(args, dict) else {}))
                    messages.append({"role": "tool", "tool_call_id": tc.get("id"),
                                     "content": '{"status": "proposed"}'})
                    continue
                out = await registry.call(
                    str(fn.get("name")), args if isinstance(args, dict) else {}, ctx, call_id=tc.get("id")
                )
                calls.append(out)
                messages.append({"role": "tool", "tool_call_id": out.call_id, "content": out.result})
        raise BackendError(f"no final answer after {MAX_ROUNDS} model calls")

    async def _post(self, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        try:
            r = await self._client.post(self._url, json=body, timeout=min(timeout_s, DEFAULT_TIMEOUT_S))
        except httpx.TimeoutException as e:
            raise BackendError(f"model call timed out: {e}") from e
        except httpx.HTTPError as e:
            raise BackendError(f"model call failed: {e}") from e
        if r.status_code // 100 != 2:
            raise BackendError(f"model endpoint answered {r.status_code}: {r.text[:200]}")
        try:
            return r.json()["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise BackendError(f"malformed chat-completions answer: {e}") from e
