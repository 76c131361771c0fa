"""The codec's direct model → proto copies agree with protobuf's json_format reading the JSON the
repository stores (so the fast path and the stored format can never drift apart)."""
from __future__ import annotations

import datetime as dt

import pytest
from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp

from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.common.errors import InvalidArgument
from services.common.ids import parse_timestamp
from services.feedback import domain as d
from services.feedback import evidence
from services.feedback.codec import snapshot_into, trace_into
from services.feedback.model.report import TraceSnapshot
from services.feedback.repository.rows import frozen_from_json, frozen_json, snapshot_from_json, snapshot_json
from tests.helpers.domain import msg, span


def test_snapshot_and_frozen_trace_convert_like_json_format():
    user = msg("ROLE_USER", "q", channel="CHANNEL_VOICE", audio_key="a/1", dictation="heard")
    snap = d.build_snapshot(msg("ROLE_ASSISTANT", "r" * 2100, model="m"), [user], client_version="v1")
    stored = snapshot_json(snap)
    fast, slow = pb.Snapshot(), pb.Snapshot()
    snapshot_into(snapshot_from_json(stored, stored["source"]), fast)
    json_format.ParseDict(stored, slow)
    assert fast == slow and fast.target_text_clipped and fast.context.dictation == "heard"

    frozen = evidence.freeze_trace([
        span("r" * 16, name="chat.turn", dur_ms=9),
        span("t" * 16, parent="r" * 16, name="tool.call", start_ms=2, status="ERROR",
             attributes={"gen_ai.tool.name": "x", "tool.result.size_bytes": 5},
             events=(evidence.SpanEventView("chat.invented_result", 3_000_001_000, {"claim": "42", "n": 1.5}),)),
    ])
    fast_t, slow_t = pb.TraceSnapshot(), pb.TraceSnapshot()
    trace_into(TraceSnapshot(frozen=frozen_from_json(frozen_json(frozen))), fast_t)
    json_format.ParseDict(frozen_json(frozen), slow_t)
    assert fast_t == slow_t and fast_t.tool_calls[0].status == "ERROR" and len(fast_t.events) == 1


@pytest.mark.parametrize("seconds, nanos", [(-10**12, 0), (1, 2_000_000_000), (1, -1), (253_402_300_800, 0),
                                            (-62_135_596_801, 0)])
def test_parse_timestamp_outside_the_documented_range_names_the_field(seconds, nanos):
    with pytest.raises(InvalidArgument) as e:
        parse_timestamp(Timestamp(seconds=seconds, nanos=nanos), "start_time")
    assert e.value.field_path == "start_time"


def test_parse_timestamp_range_ends_are_accepted():
    assert parse_timestamp(Timestamp(seconds=-62_135_596_800), "t") == dt.datetime(1, 1, 1, tzinfo=dt.UTC)
    top = parse_timestamp(Timestamp(seconds=253_402_300_799, nanos=999_999_999), "t")
    assert top == dt.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC)
    assert parse_timestamp(Timestamp(seconds=1, nanos=5_000), "t") == dt.datetime(1970, 1, 1, 0, 0, 1, 5, tzinfo=dt.UTC)


def test_a_copy_frozen_from_a_cut_answer_keeps_the_count_through_storage_and_the_proto():
    """The collector's count of cut values (GetTrace answer budget) rides the capture decision into the
    stored JSON and GetFeedback's TraceSnapshot.truncated_value_count, both ways alike; 0 is not stored."""
    spans = [span("r" * 16, name="chat.turn", dur_ms=9), span("a" * 16, parent="r" * 16, name="agent.think")]
    frozen = evidence.decide_capture(spans, previous_count=2, attempts=1, max_attempts=5, base_backoff_s=0.1,
                                     expired=False, truncated_value_count=7).frozen
    assert frozen is not None and frozen.truncated_value_count == 7
    stored = frozen_json(frozen)
    fast, slow = pb.TraceSnapshot(), pb.TraceSnapshot()
    trace_into(TraceSnapshot(frozen=frozen_from_json(stored)), fast)
    json_format.ParseDict(stored, slow)
    assert fast == slow and fast.truncated_value_count == 7
    assert "truncated_value_count" not in frozen_json(evidence.freeze_trace(spans))
