"""What the scripted reference agent does to the workspace in a turn (pure; no I/O). Deterministic rules,
like `intents.route`, so tests can ask for each behaviour in plain words:

- objective: set from the first request (its text without the preference sentences), and again when the
  owner redirects ("actually…", "instead…", "change of plan…", "forget that…", "new goal…");
- plan: a multi-step request ("first … then … finally …", or a numbered list) becomes the plan, the first
  step DOING; "next" / "continue" / "go on" / "step done" moves the DOING step to DONE and the next to DOING;
- artifacts: "write / draft / create / compose / make / generate X" makes one artifact per item
  ("write a README and a changelog": two, in one turn); "revise / update / edit / rewrite / shorten the X"
  writes a new version of the artifact whose title names X;
- preferences: each sentence with "always" / "never" or starting "keep it / keep them / keep answers …"
  is a preference the owner stated.
A complaint turn changes nothing (it is a report about the agent, not a new goal).
Proposals are `(tool name, arguments)` (services.chat.agent.workspace_tools).
"""

from __future__ import annotations

import re

from agentfeedback.agent.v1 import agent_pb2

from services.chat.agent.intents import Intent, route

Proposal = tuple[str, dict]

_SENTENCES = re.compile(r"(?<=[.!?;])\s+|\n+")
_PREFERENCE = re.compile(
    r"\b(always|never)\b|^\W*(and\s+|also\s+|please\s+)*keep\s+(it|them|things|answers|replies|responses|the\s+\w+)\b",
    re.I)
_REDIRECT = re.compile(
    r"^\W*(actually|instead|change of plans?|new goal|forget (that|it|this|the \w+)|scratch that|let'?s switch|"
    r"on second thought)\b|\binstead\b", re.I)
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+(.+)$", re.M)
_SEQUENCE = re.compile(r"\b(first|then|after that|next|finally|and then)\b[,:]?\s*", re.I)
_ADVANCE = re.compile(r"^\W*(next( step)?|continue|go on|carry on|proceed|(that )?step (is )?done)\b", re.I)
_WRITE = re.compile(r"\b(write|draft|create|compose|make|produce|generate)\s+(me\s+|us\s+)?(?P<what>.+)$", re.I)
_REVISE = re.compile(r"\b(revise|update|edit|rewrite|shorten|expand|fix|improve)\b", re.I)
_ITEM_SPLIT = re.compile(r"\s*(?:,\s*(?:and\s+)?|\s+and\s+)(?=(?:a|an|the|another|one)\s)", re.I)
_ARTICLE = re.compile(r"^(a|an|the|another|one|some)\s+", re.I)
_NOT_A_THING = re.compile(r"^(it|that|this|them|sure|sense|progress|a (mistake|note|decision|choice))\b", re.I)
MAX_TITLE = 80


def _without_preferences(content: str) -> list[str]:
    return [s for s in _SENTENCES.split(content.strip()) if s and not _PREFERENCE.search(s)]


def _objective(content: str) -> str:
    return " ".join(_without_preferences(content)).strip()[:1000]


def _media_type(title: str) -> str:
    t = title.lower()
    if re.search(r"\b(python|script|function|code|program)\b", t):
        return "text/x-python"
    if re.search(r"\b(table|csv|spreadsheet)\b", t):
        return "text/csv"
    if re.search(r"\bjson\b", t):
        return "application/json"
    return "text/markdown"


def _content(title: str, media_type: str, request: str, reply: str, turn_index: int) -> str:
    if media_type == "text/x-python":
        return f'"""{title} (turn {turn_index})."""\n\n\ndef main() -> None:\n    print({title!r})\n'
    if media_type == "text/csv":
        return f"item,note\n{title.replace(',', ' ')},turn {turn_index}\n"
    if media_type == "application/json":
        return '{"title": "%s", "turn": %d}\n' % (title.replace('"', "'"), turn_index)
    body = reply.strip()[:2000] or request.strip()[:2000]
    return f"# {title}\n\n{body}\n"


def _items(what: str) -> list[str]:
    what = re.split(r"[.!?;\n]|,?\s+(?:and\s+)?(?:then|finally|after that)\b", what, maxsplit=1)[0]
    out = []
    for part in _ITEM_SPLIT.split(what):
        title = _ARTICLE.sub("", part.strip()).strip(" ,")
        if title and not _NOT_A_THING.match(part.strip()):
            out.append(title[:MAX_TITLE])
    return out


def _plan_steps(content: str) -> list[str]:
    numbered = [m.group(1).strip() for m in _NUMBERED.finditer(content)]
    if len(numbered) >= 2:
        return numbered[:20]
    if len(_SEQUENCE.findall(content)) < 2:
        return []
    parts = [re.sub(r"[\s,;.]*(\band)?[\s,;.]*$", "", p.strip()) for p in _SEQUENCE.split(content)]
    steps = [p for p in parts if p and not _SEQUENCE.fullmatch(p + " ") and p.lower() not in
             ("first", "then", "after that", "next", "finally", "and then")]
    return [s[:500] for s in steps][:20] if len(steps) >= 2 else []


def propose(content: str, turn_index: int, workspace: agent_pb2.WorkspaceView, reply: str) -> list[Proposal]:
    """The reference agent's workspace operations for one turn (see the module doc)."""
    if route(content) is Intent.COMPLAINT:
        return []
    out: list[Proposal] = []
    objective = _objective(content)
    if objective and (not workspace.objective or _REDIRECT.search(content)):
        out.append(("set_objective", {"text": objective}))
    steps = _plan_steps("\n".join(_without_preferences(content)))
    if steps:
        out.append(("set_plan", {"steps": [{"text": s, "state": "doing" if i == 0 else "pending"}
                                           for i, s in enumerate(steps)]}))
    elif workspace.plan and _ADVANCE.search(content):
        states = [s.state for s in workspace.plan]
        doing = next((i for i, s in enumerate(states) if s == agent_pb2.PLAN_STEP_STATE_DOING), None)
        if doing is not None:
            out.append(("set_plan_step_state", {"step_index": doing, "state": "done"}))
            nxt = next((i for i in range(doing + 1, len(states)) if states[i] == agent_pb2.PLAN_STEP_STATE_PENDING),
                       None)
            if nxt is not None:
                out.append(("set_plan_step_state", {"step_index": nxt, "state": "doing"}))
    if _REVISE.search(content) and workspace.artifacts:
        low = content.lower()
        for a in workspace.artifacts:
            if a.title and a.title.lower() in low:
                out.append(("write_artifact", {
                    "artifact_id": a.artifact_id, "content": _content(a.title, a.media_type, content, reply, turn_index)}))
    else:
        m = _WRITE.search(content)
        for title in _items(m.group("what")) if m else []:
            media = _media_type(title)
            out.append(("write_artifact", {"artifact_id": 0, "title": title, "media_type": media,
                                           "content": _content(title, media, content, reply, turn_index)}))
    known = {p.text for p in workspace.preferences}
    for s in _SENTENCES.split(content.strip()):
        text = s.strip()[:300]
        if text and _PREFERENCE.search(text) and text not in known:
            known.add(text)
            out.append(("add_preference", {"text": text, "source": "owner"}))
    return out
