"""What one agent turn produced, shared by the agent's backends (`reference.py`, `openai_backend.py`)
and its servicer, so the backends never import each other."""
from __future__ import annotations

from dataclasses import dataclass, field

from services.chat.agent.tools import ToolOutcome


@dataclass
class AgentResult:
    """The reply's text, the model that wrote it, the tool calls made, and the span events of note
    recorded during the turn (ThinkResponse.events), each name once, and the workspace changes it proposes."""

    content: str
    model: str
    tool_calls: list[ToolOutcome] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    # Proposed workspace changes as (tool name, arguments), in order (services.chat.agent.workspace_tools).
    workspace_ops: list[tuple[str, dict]] = field(default_factory=list)
