"""Each FeedbackService request is checked in one codec call: a request with several bad fields gets
one INVALID_ARGUMENT whose google.rpc.BadRequest names every one of them (AIP-193), a good one comes
back as the model."""
from __future__ import annotations

import uuid

import pytest
from google.rpc import error_details_pb2

from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.common.errors import InvalidArgument, to_status
from services.feedback import codec
from services.feedback.model.enums import Author, RatingScope, Surface


def _violations(e: InvalidArgument) -> list[str]:
    """The BadRequest field violations the client receives (through errors.to_status)."""
    for d in to_status(e).details:
        if d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            br = error_details_pb2.BadRequest()
            d.Unpack(br)
            return [v.field for v in br.field_violations]
    raise AssertionError("no BadRequest detail")


def test_create_feedback_names_every_bad_field_in_one_error():
    req = pb.CreateFeedbackRequest(request_id="not-a-uuid", feedback=pb.Feedback(
        body="", message="messages/x", author=77, sentiment=99, context_trace_id="ab" * 16))
    with pytest.raises(InvalidArgument) as e:
        codec.create_feedback(req, None)
    assert _violations(e.value) == ["feedback.body", "request_id", "feedback.author", "feedback.context_trace_id",
                                    "feedback.sentiment", "feedback.message"]
    # The first bad field stays the error's headline (ErrorInfo metadata and message), as before.
    assert e.value.metadata["field"] == "feedback.body" and e.value.message.startswith("feedback.body: ")


def test_create_feedback_with_one_bad_field_is_that_fields_error():
    req = pb.CreateFeedbackRequest(request_id=str(uuid.uuid4()), feedback=pb.Feedback(
        body="words", trace_id="ab" * 16))
    with pytest.raises(InvalidArgument) as e:
        codec.create_feedback(req, None)
    assert _violations(e.value) == ["feedback.instance"] and e.value.reason == "INVALID_ARGUMENT"


def test_create_feedback_returns_the_draft():
    rid = uuid.uuid4()
    req = pb.CreateFeedbackRequest(request_id=str(rid), feedback=pb.Feedback(
        body="words", coding=pb.CodingTarget(session="s1", timeline_seq=3)))
    d = codec.create_feedback(req, "Bearer x")
    assert (d.request_id, d.body, d.author, d.surface, d.actor) == (rid, "words", Author.USER, Surface.CODING,
                                                                   "Bearer x")
    assert d.anchor.kind == "coding" and d.anchor.coding_seq == 3 and len(d.fingerprint) == 32


def test_put_rating_names_every_bad_field_in_one_error():
    req = pb.PutRatingRequest(request_id="nope", rating=pb.Rating(
        conversation="conversations/x", turn_index=-1, scope=pb.RATING_SCOPE_MESSAGE, aspect="Bad Aspect",
        sentiment=42, choice="Not A Slug", etag="W/garbage"))
    with pytest.raises(InvalidArgument) as e:
        codec.put_rating(req, 2000)
    assert _violations(e.value) == ["rating.conversation", "rating.aspect", "rating.sentiment", "rating.choice",
                                    "request_id", "rating.etag"]


def test_put_rating_returns_the_write():
    req = pb.PutRatingRequest(rating=pb.Rating(conversation="instances/i", turn_index=2,
                                               scope=pb.RATING_SCOPE_MESSAGE, aspect="reaction", note="ok"))
    put = codec.put_rating(req, 2000)
    assert put.key.scope == RatingScope.MESSAGE and put.key.turn_index == 2 and put.write.note == "ok"
    assert put.version is None and put.request_id is None and put.fingerprint is None


def test_list_feedback_names_every_bad_filter():
    req = pb.ListFeedbackRequest(page_size=-1, instance="nope", status=99, trace_id="zz")
    with pytest.raises(InvalidArgument) as e:
        codec.list_feedback(req)
    assert _violations(e.value) == ["page_size", "instance", "status", "trace_id"]
