"""Which evaluations the collector reads from an OTLP Export (services/tracecollector/evaluations.py):
both conventions, the rated trace (own span or first link), defaults, one per key, our namespace skipped;
and the GenAI event as an OTLP log record (the logs receiver), mapped by the same code."""
from __future__ import annotations

from agentfeedback.feedback.v1 import feedback_pb2 as fpb
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1 import resource_pb2

from services.common.evaluation_rules import evaluation_problem
from services.feedback import domain
from services.feedback.model.enums import RatingSentiment as S
from services.tracecollector import evaluations
from services.tracecollector.ingest import Window, flatten

RATED = bytes.fromhex("11" * 16)
CARRIER = bytes.fromhex("22" * 16)


def _kv(k: str, v: object) -> common_pb2.KeyValue:
    kv = common_pb2.KeyValue(key=k)
    if isinstance(v, str):
        kv.value.string_value = v
    else:
        kv.value.double_value = float(v)
    return kv


def _request(namespace: str = "", service: str = "judge") -> tuple[trace_service_pb2.ExportTraceServiceRequest, list]:
    req = trace_service_pb2.ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend([_kv("service.name", service)] + ([_kv("service.namespace", namespace)] if namespace else []))
    spans = rs.scope_spans.add().spans
    ev_span = spans.add(trace_id=RATED, span_id=b"\x01" * 8, name="evaluate", start_time_unix_nano=10**18,
                        end_time_unix_nano=10**18 + 1)
    ev_span.events.add(name="gen_ai.evaluation.result", attributes=[
        _kv("gen_ai.evaluation.name", "relevance"), _kv("gen_ai.evaluation.score.value", 0.5),
        _kv("gen_ai.response.id", "instances/i/messages/m")])
    carrier = spans.add(trace_id=CARRIER, span_id=b"\x02" * 8, name="annotation", start_time_unix_nano=10**18,
                        end_time_unix_nano=10**18 + 1)
    carrier.attributes.extend([_kv("annotations.0.annotation.name", "correctness"),
                               _kv("annotations.0.annotation.label", "incorrect"),
                               _kv("annotations.0.annotation.annotator_kind", "CODE"),
                               _kv("annotations.1.annotation.name", "tone"), _kv("annotations.1.annotation.score", 1)])
    carrier.links.add(trace_id=RATED, span_id=b"\x03" * 8)
    # Both forms on one span for one name (our emitter's shape): one evaluation.
    carrier.events.add(name="gen_ai.evaluation.result", attributes=[_kv("gen_ai.evaluation.name", "correctness")])
    return req, flatten(req, Window(0, 2 * 10**18)).marked


def test_both_conventions_are_read_with_the_rated_trace_and_their_defaults():
    req, marked = _request()
    got = {e.name: e for e in evaluations.extract(req, marked, "agentfeedback")}
    assert set(got) == {"relevance", "correctness", "tone"}
    rel, cor, tone = got["relevance"], got["correctness"], got["tone"]
    assert rel.trace_id == cor.trace_id == tone.trace_id == RATED.hex()  # own span's trace; the carrier's link
    assert (rel.convention, rel.author_kind, rel.identifier, rel.score, rel.response_id) == (
        fpb.EVALUATION_CONVENTION_GEN_AI_EVENT, fpb.AUTHOR_KIND_LLM, "judge", 0.5, "instances/i/messages/m")
    assert (cor.convention, cor.author_kind, cor.label, cor.identifier) == (
        fpb.EVALUATION_CONVENTION_OPENINFERENCE, fpb.AUTHOR_KIND_CODE, "incorrect", "judge")
    assert tone.author_kind == fpb.AUTHOR_KIND_LLM and tone.score == 1.0


def test_our_own_namespace_is_skipped_and_a_repeat_is_one_key():
    req, marked = _request(namespace="agentfeedback", service="feedback")
    assert evaluations.extract(req, marked, "agentfeedback") == []
    req, marked = _request()
    twice = trace_service_pb2.ExportTraceServiceRequest(resource_spans=[*req.resource_spans, *req.resource_spans])
    marked2 = flatten(twice, Window(0, 2 * 10**18)).marked
    assert len(evaluations.extract(twice, marked2, "agentfeedback")) == 3


def test_spans_without_either_form_are_not_marked():
    req = trace_service_pb2.ExportTraceServiceRequest()
    sp = req.resource_spans.add().scope_spans.add().spans.add(trace_id=RATED, span_id=b"\x01" * 8, name="x",
                                                               start_time_unix_nano=10**18, end_time_unix_nano=10**18)
    sp.events.add(name="chat.out")
    sp.attributes.append(_kv("annotations", "not an annotation"))
    assert flatten(req, Window(0, 2 * 10**18)).marked == []


def test_evaluation_sentiment_comes_from_a_telling_label_else_the_score_sign():
    assert domain.evaluation_sentiment("Incorrect", 0.9) == S.NEGATIVE
    assert domain.evaluation_sentiment("pass", None) == S.POSITIVE
    assert [domain.evaluation_sentiment("", s) for s in (0.2, 0.0, -1.0)] == [S.POSITIVE, S.NEUTRAL, S.NEGATIVE]
    assert domain.evaluation_sentiment("A+", None) == S.UNSPECIFIED
    assert evaluation_problem("ab" * 16, "x", "", None, "", "", "id", "", True) == \
        "an evaluation needs a label or a score"
    assert evaluation_problem("ab" * 16, "x", "l", float("nan"), "", "", "id", "", True) == "score must be finite"
    assert evaluation_problem("ab" * 16, "tone\u202e", "l", None, "", "", "id", "", True) == \
        "name must not contain control or bidi formatting characters"
    assert evaluation_problem("ab" * 16, "tone", "l", None, "", "", "judge\n2", "", True) == \
        "identifier must not contain control or bidi formatting characters"
    # The explanation is free text: a line break or a right-to-left word is the evaluator's to write.
    assert evaluation_problem("ab" * 16, "tone", "l", None, "line 1\nline 2 \u202b", "", "id", "", True) == ""


def _logs_request(records: list[logs_pb2.LogRecord], namespace: str = "") -> logs_service_pb2.ExportLogsServiceRequest:
    res = [_kv("service.name", "judge")] + ([_kv("service.namespace", namespace)] if namespace else [])
    return logs_service_pb2.ExportLogsServiceRequest(resource_logs=[logs_pb2.ResourceLogs(
        resource=resource_pb2.Resource(attributes=res), scope_logs=[logs_pb2.ScopeLogs(log_records=records)])])


def _record(attrs: dict[str, object], event_name: str = "gen_ai.evaluation.result", trace_id: bytes = RATED):
    return logs_pb2.LogRecord(event_name=event_name, trace_id=trace_id, span_id=b"\x01" * 8,
                              attributes=[_kv(k, v) for k, v in attrs.items()])


def test_a_log_record_event_maps_as_the_span_event_does():
    attrs = {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": 0.5,
             "gen_ai.response.id": "instances/i/messages/m"}
    req, marked = _request()
    from_span = {e.name: e for e in evaluations.extract(req, marked, "agentfeedback")}["relevance"]
    got = evaluations.extract_logs(_logs_request([_record(attrs)]), "agentfeedback")
    assert (got.events, got.rejected, got.error_message) == (1, 0, "")
    assert got.found == [from_span]  # the same Evaluation, so the same outbox key and rating


def test_log_records_are_events_by_event_name_or_the_older_attribute_and_others_are_ignored():
    old_sdk = _record({"event.name": "gen_ai.evaluation.result", "gen_ai.evaluation.name": "tone",
                       "gen_ai.evaluation.score.label": "polite"}, event_name="")
    plain = logs_pb2.LogRecord(body=common_pb2.AnyValue(string_value="GET /health 200"), trace_id=RATED)
    other_event = _record({"gen_ai.evaluation.name": "x", "gen_ai.evaluation.score.value": 1},
                          event_name="gen_ai.client.inference.operation.details")
    # event_name wins over the attribute: a record named otherwise is not an evaluation.
    renamed = _record({"event.name": "gen_ai.evaluation.result", "gen_ai.evaluation.name": "y",
                       "gen_ai.evaluation.score.value": 1}, event_name="app.click")
    got = evaluations.extract_logs(_logs_request([old_sdk, plain, other_event, renamed]), "agentfeedback")
    assert [(e.name, e.label, e.author_kind, e.identifier) for e in got.found] == [
        ("tone", "polite", fpb.AUTHOR_KIND_LLM, "judge")]
    assert (got.events, got.rejected) == (1, 0)


def test_log_record_events_that_can_never_be_ratings_are_rejected_with_reasons_and_ours_skipped():
    name = {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.label": "relevant"}
    records = [_record(name, trace_id=b""), _record(name, trace_id=bytes(16)),
               _record({"gen_ai.evaluation.score.value": 1.0}), _record({"gen_ai.evaluation.name": "n"}),
               _record(name)]
    got = evaluations.extract_logs(_logs_request(records), "agentfeedback")
    assert (got.events, got.rejected, len(got.found)) == (5, 4, 1)
    msg = got.error_message
    assert "2 trace_id is not 16 non-zero bytes" in msg and "1 gen_ai.evaluation.name is missing" in msg, msg
    assert "1 neither gen_ai.evaluation.score.value nor gen_ai.evaluation.score.label" in msg, msg
    assert msg.endswith("(first: resource_logs[0].scope_logs[0].log_records[0])")
    ours = evaluations.extract_logs(_logs_request(records, namespace="agentfeedback"), "agentfeedback")
    assert (ours.events, ours.rejected, ours.found) == (5, 0, [])


def test_log_record_events_the_feedback_service_would_refuse_are_rejected_at_ingest_with_its_reason():
    # Acknowledged before, then refused by AcceptEvaluations at delivery and dropped (only logged).
    records = [_record({"gen_ai.evaluation.name": "n" * 129, "gen_ai.evaluation.score.label": "good"}),
               _record({"gen_ai.evaluation.name": "tone", "gen_ai.evaluation.score.label": "L" * 257}),
               _record({"gen_ai.evaluation.name": "tone", "gen_ai.evaluation.score.value": 1,
                        "gen_ai.evaluation.explanation": "e" * 8193}),
               _record({"gen_ai.evaluation.name": "tone", "gen_ai.evaluation.score.label": "a\x00b"}),
               _record({"gen_ai.evaluation.name": "tone", "gen_ai.evaluation.score.label": "L" * 256})]
    got = evaluations.extract_logs(_logs_request(records), "agentfeedback")
    assert (got.events, got.rejected, [e.label for e in got.found]) == (5, 4, ["L" * 256])
    msg = got.error_message
    for reason in ("1 name must be 1 to 128 characters", "1 label must be at most 256 characters",
                   "1 explanation must be at most 8192 UTF-8 bytes", "1 text must not contain NUL"):
        assert reason in msg, msg
    assert "nnnn" not in msg and "LLLL" not in msg  # reasons only, never the producer's values
