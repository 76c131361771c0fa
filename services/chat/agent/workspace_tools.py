"""The workspace operations as the agent's tools (agent.proto `WorkspaceOperation`), one shape for both
backends: a proposal is `(tool name, arguments)`, exactly what an OpenAI-compatible model calls
(`TOOLS` is offered to it beside the registry's tools), and what the scripted reference agent emits
(`services.chat.agent.workspace_rules`). `to_operation` turns one into the proto the gateway validates.

These tools do not run anything in the agent: their "result" to a model is that the change was proposed;
the gateway decides (an invalid one is dropped with a span event, the turn still succeeds).
"""

from __future__ import annotations

from typing import Any

from agentfeedback.agent.v1 import agent_pb2

_STATES = {"pending": 1, "doing": 2, "done": 3, "dropped": 4}
_SOURCES = {"owner": 1, "agent": 2}
_STEP = {"type": "object", "properties": {"text": {"type": "string"},
                                          "state": {"type": "string", "enum": list(_STATES)}},
         "required": ["text"]}


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


TOOLS: list[dict[str, Any]] = [
    _tool("set_objective", "Replace the conversation's objective: what you believe the owner's goal is "
          "(at most 1000 characters). Call it on the first request and whenever the owner redirects.",
          {"text": {"type": "string"}}, ["text"]),
    _tool("set_plan", "Replace the plan: the ordered steps (at most 20, each at most 500 characters) of a "
          "multi-step request, each with a state.", {"steps": {"type": "array", "items": _STEP}}, ["steps"]),
    _tool("set_plan_step_state", "Change the state of one plan step (0-based index).",
          {"step_index": {"type": "integer"}, "state": {"type": "string", "enum": list(_STATES)}},
          ["step_index", "state"]),
    _tool("write_artifact", "Create a document, code or table (artifact_id 0 or absent) or write a new version "
          "of an existing artifact (its id). Content at most 32768 bytes; media type like text/markdown.",
          {"artifact_id": {"type": "integer"}, "title": {"type": "string"}, "media_type": {"type": "string"},
           "content": {"type": "string"}}, ["content"]),
    _tool("add_preference", "Record a preference of the owner about how they want things (at most 300 "
          "characters): source 'owner' when they said it, 'agent' when you inferred it.",
          {"text": {"type": "string"}, "source": {"type": "string", "enum": list(_SOURCES)}}, ["text"]),
    _tool("remove_preference", "Remove the preference with exactly this text.", {"text": {"type": "string"}},
          ["text"]),
]
NAMES = frozenset(t["function"]["name"] for t in TOOLS)


def _str(args: dict[str, Any], key: str) -> str:
    v = args.get(key, "")
    return v if isinstance(v, str) else str(v)


def _int(args: dict[str, Any], key: str) -> int:
    v = args.get(key, 0)
    try:
        n = int(v)
    except (TypeError, ValueError, OverflowError):
        return -1  # the gateway drops it (not a step / not an artifact)
    return n if -(2**31) <= n < 2**31 else -1


def to_operation(name: str, args: dict[str, Any]) -> agent_pb2.WorkspaceOperation | None:
    """The proto of one proposal; None when `name` is not a workspace tool. Values are passed on as
    given (bad ones are the gateway's to drop); unknown state/source names become UNSPECIFIED."""
    op = agent_pb2.WorkspaceOperation()
    if name == "set_objective":
        op.set_objective.text = _str(args, "text")
    elif name == "set_plan":
        steps = args.get("steps") if isinstance(args.get("steps"), list) else []
        op.set_plan.SetInParent()
        for s in steps:
            s = s if isinstance(s, dict) else {"text": str(s)}
            op.set_plan.steps.add(text=_str(s, "text"), state=_STATES.get(_str(s, "state"), 0))
    elif name == "set_plan_step_state":
        op.set_plan_step_state.step_index = _int(args, "step_index")
        op.set_plan_step_state.state = _STATES.get(_str(args, "state"), 0)
    elif name == "write_artifact":
        a = op.put_artifact
        a.artifact_id, a.title, a.media_type = _int(args, "artifact_id"), _str(args, "title"), _str(args, "media_type")
        a.content = _str(args, "content")
    elif name == "add_preference":
        op.add_preference.text = _str(args, "text")
        op.add_preference.source = _SOURCES.get(_str(args, "source"), 0)
    elif name == "remove_preference":
        op.remove_preference.text = _str(args, "text")
    else:
        return None
    return op
