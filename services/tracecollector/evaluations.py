"""Evaluations other systems send with their spans (issue 24): recognised in an OTLP Export, in the two
conventions LLM observability tools write, and turned into `agentfeedback.feedback.v1.Evaluation`s for
the feedback service. Pure: no I/O (the outbox that keeps them is `evaluation_outbox.py`).

- OpenTelemetry GenAI `gen_ai.evaluation.result` (semantic-conventions-genai `model/gen-ai/events.yaml`,
  stability "development"): "This event SHOULD be parented to GenAI operation span being evaluated when
  possible or set `gen_ai.response.id` when span id is not available"; attributes
  `gen_ai.evaluation.name` (required), `gen_ai.evaluation.score.value` and `.score.label` (conditionally
  required, "if applicable"), `gen_ai.evaluation.explanation` (recommended), `gen_ai.response.id`
  (recommended). Read here as a span event: the rated trace is the span's own (the event parented to
  the evaluated span), or, on a carrier span with a link, the first link's (how our own emitter and
  other out-of-trace evaluators attach it). The convention names no evaluator kind or identifier: the
  author kind is LLM (an evaluator pipeline) unless the span's OpenInference annotation says otherwise,
  the identifier the producer's `service.name`. (The spec models events as log records too; this
  collector receives traces only, so a log-record event is not read: docs/architecture.md.)
- OpenInference annotations (Arize-ai/openinference `spec/annotations.md`): flattened
  `annotations.{i}.annotation.{name,label,score,explanation,annotator_kind,identifier}` (zero-based,
  contiguous) on a carrier span with one span link to the rated span: the rated trace is the link's (no
  link: the span's own). `annotator_kind` HUMAN / LLM / CODE; `identifier` the producer's stable id for
  results of one name and target (none: the producer's `service.name`). A span carrying both forms for
  one name (our emitter does) is one evaluation, read from the annotation.

Our own evaluations must not come back as new ratings: a resource whose `service.namespace` is ours
(`CollectorSettings.evaluations_own_namespace`, `agentfeedback`: every service here sets it,
services/common/telemetry.py) is skipped whole.
"""
from __future__ import annotations

import hashlib
import math

from agentfeedback.feedback.v1 import feedback_pb2 as fpb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from services.tracecollector.ingest import EVALUATION_EVENT, attributes_dict

_NAME, _LABEL, _VALUE = "gen_ai.evaluation.name", "gen_ai.evaluation.score.label", "gen_ai.evaluation.score.value"
_EXPLANATION, _RESPONSE_ID = "gen_ai.evaluation.explanation", "gen_ai.response.id"
_ANNOTATION = "annotations.{}.annotation."
_KINDS = {"HUMAN": fpb.AUTHOR_KIND_HUMAN, "LLM": fpb.AUTHOR_KIND_LLM, "CODE": fpb.AUTHOR_KIND_CODE}
# Bounds of what is read from one Export (the feedback service checks the shapes; this bounds memory).
MAX_PER_REQUEST = 10_000
_TEXT_MAX = 8192


def _text(v: object) -> str:
    if v is None:
        return ""
    s = v if isinstance(v, str) else str(v)
    return s[:_TEXT_MAX + 1]  # one over: the feedback service's check names the field


def _score(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        try:
            v = float(v) if isinstance(v, str) and v else None
        except ValueError:
            return None
    return float(v) if v is not None and math.isfinite(v) else None


def _annotations(attrs: dict[str, object]) -> list[dict[str, object]]:
    out = []
    for i in range(1000):
        prefix = _ANNOTATION.format(i)
        if prefix + "name" not in attrs:
            break
        out.append({k[len(prefix):]: v for k, v in attrs.items() if k.startswith(prefix)})
    return out


def key(e: fpb.Evaluation) -> str:
    """The outbox key: a digest of (scope MESSAGE, target trace, name, identifier), the feedback
    service's idempotency key, so a repeat replaces the pending one."""
    return hashlib.sha256("\x1f".join(("MESSAGE", e.trace_id, e.name, e.identifier)).encode()).hexdigest()


def extract(request: trace_service_pb2.ExportTraceServiceRequest, marked: list[tuple[int, int, int]],
            own_namespace: str) -> list[fpb.Evaluation]:
    """The evaluations of `request`'s `marked` spans ((resource, scope, span) indices of accepted spans
    that may carry one: ingest.Flattened.marked), per the module docstring; the last one per key, at most
    MAX_PER_REQUEST."""
    found: dict[str, fpb.Evaluation] = {}
    resources: dict[int, tuple[bool, str]] = {}
    for ri, si, pi in marked:
        if len(found) >= MAX_PER_REQUEST:
            break
        rs = request.resource_spans[ri]
        if ri not in resources:
            res = attributes_dict(rs.resource.attributes)
            resources[ri] = (bool(own_namespace) and res.get("service.namespace") == own_namespace,
                             _text(res.get("service.name"))[:256])
        own_resource, source = resources[ri]
        if own_resource:
            continue
        sp = rs.scope_spans[si].spans[pi]
        rated = sp.links[0].trace_id if sp.links and len(sp.links[0].trace_id) == 16 else sp.trace_id
        if rated == bytes(16):
            continue
        for e in _of_span(sp, rated.hex(), source):
            found[key(e)] = e
    return list(found.values())


def _of_span(sp, trace_id: str, source: str) -> list[fpb.Evaluation]:
    out = []
    annotated = set()
    kind_of_span = fpb.AUTHOR_KIND_LLM
    for a in _annotations(attributes_dict(sp.attributes)):
        name = _text(a.get("name"))
        # Missing: LLM (an evaluator); an unknown word: UNSPECIFIED, which the feedback service rejects.
        given = _text(a.get("annotator_kind")).upper()
        kind = _KINDS.get(given, fpb.AUTHOR_KIND_UNSPECIFIED) if given else fpb.AUTHOR_KIND_LLM
        kind_of_span = kind or kind_of_span
        e = fpb.Evaluation(trace_id=trace_id, name=name, label=_text(a.get("label")),
                           explanation=_text(a.get("explanation")), author_kind=kind,
                           identifier=_text(a.get("identifier")) or source or "unknown",
                           source=source, convention=fpb.EVALUATION_CONVENTION_OPENINFERENCE)
        if (s := _score(a.get("score"))) is not None:
            e.score = s
        annotated.add(name)
        out.append(e)
    for ev in sp.events:
        if ev.name != EVALUATION_EVENT:
            continue
        ea = attributes_dict(ev.attributes)
        name = _text(ea.get(_NAME))
        if not name or name in annotated:
            continue
        e = fpb.Evaluation(trace_id=trace_id, name=name, label=_text(ea.get(_LABEL)),
                           explanation=_text(ea.get(_EXPLANATION)), response_id=_text(ea.get(_RESPONSE_ID)),
                           author_kind=kind_of_span, identifier=source or "unknown", source=source,
                           convention=fpb.EVALUATION_CONVENTION_GEN_AI_EVENT)
        if (s := _score(ea.get(_VALUE))) is not None:
            e.score = s
        out.append(e)
    return out
