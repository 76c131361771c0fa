"""Change feed and dataset export resume tokens and the feed's waits (services/feedback/feed_domain.py,
codec_feed; signed by services/common/pages.py)."""
from __future__ import annotations

import pytest
from agentfeedback.feedback.v1 import feedback_pb2 as pb

from services.common import pages
from services.common.errors import InvalidArgument
from services.common.pages import encode_page_token
from services.feedback import codec_feed, feed_domain
from services.feedback.model.feed import Position
from tests.helpers.principal import as_caller


def test_a_token_names_its_position_and_positions_order_like_the_feed():
    p = Position(2**40 + 7, 12)
    assert feed_domain.position(feed_domain.token(p)) == p
    assert feed_domain.position("") is None
    assert Position(5, 0) < Position(5, 1) < Position(6, 0)


@pytest.mark.parametrize("raw", [{"x": -1, "s": 0}, {"x": 1}, {"x": "1", "s": 2}, {"x": 1, "s": 2, "g": 3},
                                 {"x": 2**63, "s": 0}, {"x": 1.0, "s": 2}, {"x": True, "s": 2}])
def test_a_token_this_service_did_not_issue_is_invalid_argument_naming_resume_token(raw):
    # Even signed with our key (a key that leaked), a position out of shape never reaches SQL.
    with pytest.raises(InvalidArgument) as e:
        feed_domain.position(pages.issue(raw, None, pages.FEED_RESUME, bind_caller=False))
    assert e.value.field_path == "resume_token"
    with pytest.raises(InvalidArgument):
        feed_domain.position("%%%")


def _edited(token: str, **change) -> str:
    """`token` with its payload changed and its MAC kept (what a forger can do without the key)."""
    payload, _, mac = token.partition(".")
    body = {**pages.decode_page_token(payload), **change}
    return f"{encode_page_token(body)}.{mac}"


def test_a_forged_edited_or_unsigned_feed_token_is_invalid_argument_naming_resume_token():
    good = feed_domain.token(Position(100, 3))
    forged = [_edited(good, x=5), _edited(good, s=0),
              pages.issue({"x": 100, "s": 3}, None),  # a page token is not a resume token
              encode_page_token({"x": 100, "s": 3})]  # unsigned, as issued before tokens were signed
    for tok in forged:
        with pytest.raises(InvalidArgument) as e:
            codec_feed.watch_feedback(pb.WatchFeedbackRequest(resume_token=tok))
        assert e.value.field_path == "resume_token", tok
    with pytest.raises(InvalidArgument) as e:
        feed_domain.position(encode_page_token({"x": 100, "s": 3}))
    assert e.value.description == pages.UNSIGNED


def test_a_feed_token_is_not_bound_to_its_caller_but_a_dataset_token_is():
    """Webhook events carry feed tokens and every feed read is scoped to its caller; an export's
    position is the caller's own."""
    feed = as_caller("ops", lambda: feed_domain.token(Position(7, 1)))
    assert as_caller("bob", lambda: feed_domain.position(feed)) == Position(7, 1)
    ds = as_caller("alice", lambda: pages.issue({"v": "instances/a", "t": 2}, None, pages.DATASET_RESUME))
    req = pb.ExportDatasetRequest(resume_token=ds)
    assert as_caller("alice", lambda: codec_feed.export_dataset(req)[1]) == ("instances/a", 2)
    with pytest.raises(InvalidArgument) as e:
        as_caller("bob", lambda: codec_feed.export_dataset(req))
    assert e.value.field_path == "resume_token"


def test_a_forged_or_unsigned_dataset_token_is_invalid_argument_naming_resume_token():
    good = pages.issue({"v": "instances/a", "t": 2}, None, pages.DATASET_RESUME)
    for tok in (_edited(good, v="instances/b"), _edited(good, t=0), encode_page_token({"c": "instances/a", "t": 2}),
                pages.issue({"v": "instances/a", "t": 2}, None, pages.FEED_RESUME)):
        with pytest.raises(InvalidArgument) as e:
            codec_feed.export_dataset(pb.ExportDatasetRequest(resume_token=tok))
        assert e.value.field_path == "resume_token", tok


def test_pending_waits_double_from_10_ms_to_at_most_1_s():
    waits = [None]
    for _ in range(10):
        waits.append(feed_domain.next_pending_wait(waits[-1]))
    assert waits[1] == 0.01 and waits[2] == 0.02 and waits[-1] == 1.0 and max(waits[1:]) == 1.0
