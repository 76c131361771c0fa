"""The rules an evaluation from another system must pass to be stored (AcceptEvaluations; the proto's
Evaluation comments), shared by the feedback service, which enforces them, and the trace collector, which
checks them at ingest so an OTLP Export is told what could never be stored (its `partial_success`)
instead of being acknowledged and the evaluation dropped at delivery.

`evaluation_problem(...)` → '' when the evaluation can be stored, else the first bad field and what is
wrong with it (English, no client value).
"""
from __future__ import annotations

import math
import re

from services.common.ids import UNSAFE_IN_LABEL

EVALUATION_NAME_MAX_CHARS = 128
EVALUATION_TEXT_MAX_CHARS = 256
EVALUATION_EXPLANATION_MAX_BYTES = 8192
ACCEPT_EVALUATIONS_MAX = 100


def evaluation_problem(trace_id: str, name: str, label: str, score: float | None, explanation: str,
                       response_id: str, identifier: str, source: str, author_known: bool) -> str:
    """Why an evaluation cannot be stored ('' = it can): the first bad field and what is wrong with it."""
    if not re.fullmatch(r"[0-9a-f]{32}", trace_id) or trace_id == "0" * 32:
        return "trace_id must be 32 lowercase hexadecimal characters, not all zeros"
    if not name or len(name) > EVALUATION_NAME_MAX_CHARS:
        return f"name must be 1 to {EVALUATION_NAME_MAX_CHARS} characters"
    if not identifier or len(identifier) > EVALUATION_TEXT_MAX_CHARS:
        return f"identifier must be 1 to {EVALUATION_TEXT_MAX_CHARS} characters"
    for field, v in (("label", label), ("response_id", response_id), ("source", source)):
        if len(v) > EVALUATION_TEXT_MAX_CHARS:
            return f"{field} must be at most {EVALUATION_TEXT_MAX_CHARS} characters"
    if len(explanation.encode()) > EVALUATION_EXPLANATION_MAX_BYTES:
        return f"explanation must be at most {EVALUATION_EXPLANATION_MAX_BYTES} UTF-8 bytes"
    if any("\x00" in v for v in (name, label, explanation, response_id, identifier, source)):
        return "text must not contain NUL"
    # The one-line fields are shown as labels (the console, tickets, the CLI): a control or bidi
    # override there reorders what a reader sees around it (services.common.ids.UNSAFE_IN_LABEL).
    for field, v in (("name", name), ("label", label), ("identifier", identifier), ("source", source),
                     ("response_id", response_id)):
        if UNSAFE_IN_LABEL.search(v):
            return f"{field} must not contain control or bidi formatting characters"
    if score is not None and not math.isfinite(score):
        return "score must be finite"
    if not label and score is None:
        return "an evaluation needs a label or a score"
    if not author_known:
        return "author_kind must be HUMAN, LLM or CODE"
    return ""
