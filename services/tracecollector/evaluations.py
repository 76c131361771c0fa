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
  the identifier the producer's `service.name`.
- The same event as a log record (`extract_logs`, the OTLP logs receiver `logs.py`): semantic-conventions
  `docs/general/events.md`: "Events are implemented as a specific type of LogRecord"; "An event MUST
  have an event name" (OTLP `LogRecord.event_name`, opentelemetry-proto `logs/v1/logs.proto`: "Presence
  of event_name on the log record identifies this record as an event"; older SDKs set the now
  deprecated attribute `event.name` instead: read when `event_name` is empty). The rated trace is the
  record's `trace_id` (the event "parented to" the evaluated span = emitted in its context); the same
  attributes, author kind (LLM) and identifier as the span event, mapped by the one `gen_ai_event`.
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

from dataclasses import dataclass, field

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

from services.common.evaluation_rules import evaluation_problem
from services.tracecollector.ingest import EVALUATION_EVENT, attributes_dict

_NAME, _LABEL, _VALUE = "gen_ai.evaluation.name", "gen_ai.evaluation.score.label", "gen_ai.evaluation.score.value"
_EXPLANATION, _RESPONSE_ID = "gen_ai.evaluation.explanation", "gen_ai.response.id"
_ANNOTATION = "annotations.{}.annotation."
# The attribute older SDKs name an event with (semantic-conventions registry: `event.name` deprecated,
# "MUST now be set as the value of the EventName field on the LogRecord").
EVENT_NAME_ATTRIBUTE = "event.name"
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


def _resource(attributes, own_namespace: str) -> tuple[bool, str]:
    """(whether the resource is our own — skipped —, its `service.name` as the source)."""
    res = attributes_dict(attributes)
    return (bool(own_namespace) and res.get("service.namespace") == own_namespace,
            _text(res.get("service.name"))[:256])


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
            resources[ri] = _resource(rs.resource.attributes, own_namespace)
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
        if _text(ea.get(_NAME)) in annotated:
            continue
        if (e := gen_ai_event(ea, trace_id, source, kind_of_span)) is not None:
            out.append(e)
    return out


def gen_ai_event(attrs: dict[str, object], trace_id: str, source: str,
                 author_kind: int = fpb.AUTHOR_KIND_LLM) -> fpb.Evaluation | None:
    """The evaluation of one `gen_ai.evaluation.result` event's attributes (span event or log record:
    the one mapping), naming `trace_id` (32 hex); None without `gen_ai.evaluation.name`."""
    name = _text(attrs.get(_NAME))
    if not name:
        return None
    e = fpb.Evaluation(trace_id=trace_id, name=name, label=_text(attrs.get(_LABEL)),
                       explanation=_text(attrs.get(_EXPLANATION)), response_id=_text(attrs.get(_RESPONSE_ID)),
                       author_kind=author_kind, identifier=source or "unknown", source=source,
                       convention=fpb.EVALUATION_CONVENTION_GEN_AI_EVENT)
    if (s := _score(attrs.get(_VALUE))) is not None:
        e.score = s
    return e


# --- log records ---------------------------------------------------------------------------------

_LOG_REASONS = {
    "trace_id": "trace_id is not 16 non-zero bytes (emit the event in the evaluated span's context)",
    "name": "gen_ai.evaluation.name is missing",
    "score": "neither gen_ai.evaluation.score.value nor gen_ai.evaluation.score.label is set",
    "too_many": f"more than {MAX_PER_REQUEST} evaluation events in one request",
}


@dataclass
class LogEvaluations:
    """What the log records of one Export hold: `found` (last per key), how many records are evaluation
    events (`events`, our own included), how many of them were `rejected` and why."""

    found: list[fpb.Evaluation] = field(default_factory=list)
    events: int = 0
    rejected: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    first_bad: str = ""

    def reject(self, reason: str, where: str) -> None:
        self.rejected += 1
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if not self.first_bad:
            self.first_bad = where

    @property
    def error_message(self) -> str:
        """English, for `partial_success.error_message` ("" when nothing was rejected)."""
        if not self.rejected:
            return ""
        parts = "; ".join(f"{n} {_LOG_REASONS.get(r, r)}" for r, n in self.counts.items())
        return f"rejected {self.rejected} gen_ai.evaluation.result log record(s): {parts} (first: {self.first_bad})"


def stored_problem(e: fpb.Evaluation) -> str:
    """Why the feedback service would refuse `e` ('' = it would not): its own rule
    (services/common/evaluation_rules.py), e.g. "label must be at most 256 characters"."""
    return evaluation_problem(e.trace_id, e.name, e.label, e.score if e.HasField("score") else None,
                              e.explanation, e.response_id, e.identifier, e.source, True)


def is_evaluation_record(lr) -> bool:
    """The log record is a `gen_ai.evaluation.result` event (`event_name`, else attribute `event.name`)."""
    if lr.event_name:
        return lr.event_name == EVALUATION_EVENT
    return any(kv.key == EVENT_NAME_ATTRIBUTE and kv.value.string_value == EVALUATION_EVENT for kv in lr.attributes)


def count_log_records(request: logs_service_pb2.ExportLogsServiceRequest) -> int:
    return sum(len(sl.log_records) for rl in request.resource_logs for sl in rl.scope_logs)


def extract_logs(request: logs_service_pb2.ExportLogsServiceRequest, own_namespace: str) -> LogEvaluations:
    """The evaluations of `request`'s `gen_ai.evaluation.result` log records (module docstring); other
    records are not looked at further. An event without a valid trace id, a name, or a label or score,
    or one the feedback service's rules refuse (a name over 128 characters, a label over 256, an
    explanation over 8192 bytes, a NUL: `stored_problem`) is rejected (the feedback service could never
    anchor or keep it), as is any past MAX_PER_REQUEST;
    our own resources' are skipped (neither kept nor rejected)."""
    out = LogEvaluations()
    found: dict[str, fpb.Evaluation] = {}
    for ri, rl in enumerate(request.resource_logs):
        resource = None
        for si, sl in enumerate(rl.scope_logs):
            for li, lr in enumerate(sl.log_records):
                if not is_evaluation_record(lr):
                    continue
                out.events += 1
                if resource is None:
                    resource = _resource(rl.resource.attributes, own_namespace)
                own, source = resource
                if own:
                    continue
                where = f"resource_logs[{ri}].scope_logs[{si}].log_records[{li}]"
                if len(found) >= MAX_PER_REQUEST:
                    out.reject("too_many", where)
                    continue
                tid = lr.trace_id
                if len(tid) != 16 or tid == bytes(16):
                    out.reject("trace_id", where)
                    continue
                e = gen_ai_event(attributes_dict(lr.attributes), tid.hex(), source)
                if e is None:
                    out.reject("name", where)
                elif not e.label and not e.HasField("score"):
                    out.reject("score", where)
                elif problem := stored_problem(e):
                    # Acknowledged, it would be refused by AcceptEvaluations at delivery and dropped.
                    out.reject(problem, where)
                else:
                    found[key(e)] = e
    out.found = list(found.values())
    return out
