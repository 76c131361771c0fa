"""Suspected defects: the turns in which the platform caught its own agent misbehaving (issue 13).

Signals (agentfeedback.chat.v1.DefectKind): a tool result cut by the tool layer (`chat.truncated`),
a result no tool returned (`chat.invented_result`), a tool call with OTLP status ERROR, a failed turn.
The gateway records them on the turn's row when the turn ends — from what the agent reported of its own
spans (ThinkResponse.events / tool_calls) and the turn's own outcome — so listing them is one indexed
read of the chat schema, never a scan of the collector. Each row names its trace id: the spans are a
TraceQueryService.GetTrace away. Listing is owner-scoped per instance, or every owner's for an
operator (scope `feedback:admin`), newest first, keyset paged on (turn start, trace id).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum

from services.common import pages
from services.common.clip import truncate
from services.common.ids import parse_name, parse_trace_id

DEFECT_PATTERN = "instances/{}/suspectedDefects/{}"
ALL_INSTANCES = "-"
USER_TEXT_MAX_CHARS = 1000
MAX_TOOLS = 20


class DefectKind(IntEnum):
    """Mirrors agentfeedback.chat.v1.DefectKind."""

    UNSPECIFIED = 0
    TRUNCATED = 1
    INVENTED_RESULT = 2
    TOOL_ERROR = 3
    TURN_ERROR = 4


# What each kind is called in the trace (SuspectedDefect.event).
EVENT_NAMES = {
    DefectKind.TRUNCATED: "chat.truncated",
    DefectKind.INVENTED_RESULT: "chat.invented_result",
    DefectKind.TOOL_ERROR: "tool.call ERROR",
    DefectKind.TURN_ERROR: "chat.turn ERROR",
}
_EVENT_KINDS = {"chat.truncated": DefectKind.TRUNCATED, "chat.invented_result": DefectKind.INVENTED_RESULT}


@dataclass(frozen=True)
class ToolSignal:
    """One tool call as the agent reported it (agentfeedback.agent.v1.ToolCall)."""

    name: str
    status: str  # OK | ERROR
    truncated: bool


def kinds_of(events: Iterable[str], tools: Iterable[ToolSignal]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The defect kinds (sorted, distinct) and the tools involved (≤ 20, in order) of one agent reply.
    Unknown event names are ignored (the agent may report more than the gateway lists)."""
    kinds = {_EVENT_KINDS[e] for e in events if e in _EVENT_KINDS}
    names: list[str] = []
    for t in tools:
        if t.truncated:
            kinds.add(DefectKind.TRUNCATED)
        if t.status == "ERROR":
            kinds.add(DefectKind.TOOL_ERROR)
        if (t.truncated or t.status == "ERROR") and t.name not in names and len(names) < MAX_TOOLS:
            names.append(t.name[:128])
    return tuple(sorted(int(k) for k in kinds)), tuple(names)


@dataclass(frozen=True)
class SuspectedDefect:
    owner: str
    instance_id: str
    trace_id: str
    turn_index: int
    time: datetime
    kinds: tuple[int, ...]
    tools: tuple[str, ...]
    user_message_id: str
    user_text: str

    @property
    def name(self) -> str:
        return DEFECT_PATTERN.format(self.instance_id, self.trace_id)

    @property
    def event(self) -> str:
        return EVENT_NAMES.get(DefectKind(self.kinds[0]), "") if self.kinds else ""

    @property
    def clipped_text(self) -> tuple[str, bool]:
        return truncate(self.user_text, USER_TEXT_MAX_CHARS)


def parse_parent(parent: str) -> str | None:
    """`instances/{id}` → id; `instances/-` → None (every owner's); else INVALID_ARGUMENT `parent`."""
    (instance_id,) = parse_name(parent, "instances/{}", "parent")
    return None if instance_id == ALL_INSTANCES else instance_id


def parse_defect_name(name: str, field_path: str = "name") -> tuple[str, str]:
    """`instances/{i}/suspectedDefects/{trace_id}` → (instance id, trace id)."""
    instance_id, trace_id = parse_name(name, DEFECT_PATTERN, field_path)
    return instance_id, parse_trace_id(trace_id, field_path)


def page_key(d: SuspectedDefect) -> dict[str, int | str]:
    """The page-token position after `d`: (turn start, trace id)."""
    from services.chat.domain import to_us  # noqa: PLC0415 - one clock helper for the package

    return {"t": to_us(d.time), "id": d.trace_id}


def page_position(pos: dict) -> tuple[datetime, str]:
    """A page token's keyset position (turn start, trace id), each value checked."""
    from services.chat.domain import from_us  # noqa: PLC0415

    return from_us(pages.page_token_us(pos.get("t"))), pages.page_token_text(pos.get("id"))
