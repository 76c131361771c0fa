"""Deterministic intent routing of the reference agent (pure; no I/O).

The reference agent is a test instrument, so what it does with a user turn is a fixed rule, checked
in this order (first match wins):
1. COMPLAINT — the owner says the agent itself was wrong ("that's wrong, write that down",
   "remember that you got that wrong", "you made a mistake"). → `record_feedback`, never
   `write_memory`: a complaint is a report for the people who improve the agent, not a fact to
   remember or a manner to adopt (docs/architecture.md "The life of a report": never in a prompt).
2. MEMORY — "remember that …", "note that …", "keep in mind …" about anything else → `write_memory`.
3. SUBORDINATES — questions about the owner's agents/subordinates → `list_subordinates`.
4. SEND_REPORT — "send/email the report …": the scripted reply claims a `send_report` result that
   no tool returned (the agent has no such tool) → span event `chat.invented_result`.
5. REPLAY — anything else → `recall_transcript` (the recorded ShareGPT reply).
"""

from __future__ import annotations

import re
from enum import Enum


class Intent(Enum):
    COMPLAINT = "complaint"
    MEMORY = "memory"
    SUBORDINATES = "subordinates"
    SEND_REPORT = "send_report"
    REPLAY = "replay"


_WRONG = r"(wrong|incorrect|not right|not true|inaccurate|mistaken|a mistake|an error|made that up|nonsense)"
_COMPLAINT = [
    re.compile(rf"\b(that|this|it)(\s+is|'s|’s|\s+was)\s+(\w+\s+){{0,3}}{_WRONG}", re.I),
    re.compile(rf"\byou(\s+are|'re|’re|\s+were)\s+(\w+\s+){{0,3}}{_WRONG}", re.I),
    re.compile(
        r"\byou\s+(got|get|have\s+got|had)\s+(that|this|it|them|those|the \w+)\s+(\w+\s+){0,2}wrong\b", re.I
    ),
    re.compile(r"\byou\s+(made|make)\s+(a|an)\s+(mistake|error)\b", re.I),
    re.compile(r"\byou\s+(messed|screwed)\s+(that\s+|it\s+)?up\b", re.I),
    re.compile(r"\bwrong\s+(answer|again)\b", re.I),
]
_MEMORY = re.compile(r"^\W*(please\s+)?(remember|note|keep in mind|don'?t forget|make a note)\b", re.I)
_SUBORDINATES = re.compile(
    r"\b(subordinates?|direct reports|how many agents|agents do (you|i) have|list (my|your|all|the) agents"
    r"|who reports to me|names of (my|your|the) agents)\b",
    re.I,
)
_SEND_REPORT = re.compile(r"\b(send|email|e-mail|mail|forward)\b.{0,40}\breport\b", re.I)


def route(content: str) -> Intent:
    """The intent of one user turn (see the module doc for the rules and their order)."""
    if any(p.search(content) for p in _COMPLAINT):
        return Intent.COMPLAINT
    if _MEMORY.search(content):
        return Intent.MEMORY
    if _SUBORDINATES.search(content):
        return Intent.SUBORDINATES
    if _SEND_REPORT.search(content):
        return Intent.SEND_REPORT
    return Intent.REPLAY


# The feedback body limit of the feedback service (proto `Feedback.body`: ≤ 4000 chars); the quote is kept shorter.
MAX_QUOTE_CHARS = 3000


def paraphrase_complaint(content: str, previous_reply: str | None) -> str:
    """The owner's words, paraphrased for `record_feedback` (≤ 4000 characters, no NUL).

    It says who complained about what and quotes the owner exactly; the quote is cut (marked with
    "…") only beyond MAX_QUOTE_CHARS.
    """
    quote = content.replace("\x00", "\ufffd")
    if len(quote) > MAX_QUOTE_CHARS:
        quote = quote[:MAX_QUOTE_CHARS] + "…"
    about = "the agent's previous reply" if previous_reply else "the agent's behaviour"
    return f'The owner says {about} was wrong and asked for it to be recorded. In their words: "{quote}"'


def memory_fact(content: str) -> str:
    """The fact of a "remember that …" turn, without the leading instruction."""
    m = _MEMORY.search(content)
    fact = content[m.end() :] if m else content
    return re.sub(r"^\s*(that\s+)?", "", fact).strip(" .") or content.strip()
