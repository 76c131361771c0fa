"""What counts as a tool call, once: the agent writes its spans this way (`chat/agent/tools.py`), the
feedback service freezes them (`feedback/evidence.py`), and the client tools list and draw them
(`cli/mcp_server.py`, `cli/render.py`).

A tool call is a span named `tool.call`, or any span carrying the OpenTelemetry GenAI attribute
`gen_ai.tool.name` (semantic conventions, "execute_tool" spans); its name is that attribute (else the
span's name), its call id `gen_ai.tool.call.id`. Argument / result previews and the result's size are
read from the GenAI keys first, then the agent's own.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

TOOL_SPAN = "tool.call"
NAME = "gen_ai.tool.name"
CALL_ID = "gen_ai.tool.call.id"
ARGUMENT_KEYS = ("gen_ai.tool.call.arguments", "tool.arguments", "tool.arguments.preview")
RESULT_KEYS = ("gen_ai.tool.call.result", "tool.result", "tool.result.preview")
RESULT_SIZE_KEYS = ("tool.result.size_bytes", "tool.result_size_bytes", "gen_ai.tool.call.result.size_bytes",
                    "tool.result.size")


def is_tool_call(span_name: str, attributes: Mapping[str, Any]) -> bool:
    return span_name == TOOL_SPAN or NAME in attributes


def tool_name(span_name: str, attributes: Mapping[str, Any]) -> str:
    return str(attributes.get(NAME, span_name))


def call_id(attributes: Mapping[str, Any]) -> str:
    return str(attributes.get(CALL_ID, ""))


def first(attributes: Mapping[str, Any], keys: Sequence[str], default: Any = "") -> Any:
    """The first of `keys` with a non-empty value (e.g. ARGUMENT_KEYS), else `default`."""
    for k in keys:
        if k in attributes and attributes[k] not in (None, ""):
            return attributes[k]
    return default
