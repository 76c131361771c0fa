"""Change feed resume tokens and waits (services/feedback/feed_domain.py)."""
from __future__ import annotations

import pytest

from services.common.errors import InvalidArgument
from services.common.pages import encode_page_token
from services.feedback import feed_domain
from services.feedback.model.feed import Position


def test_a_token_names_its_position_and_positions_order_like_the_feed():
    p = Position(2**40 + 7, 12)
    assert feed_domain.position(feed_domain.token(p)) == p
    assert feed_domain.position("") is None
    assert Position(5, 0) < Position(5, 1) < Position(6, 0)


@pytest.mark.parametrize("raw", [{"x": -1, "s": 0}, {"x": 1}, {"x": "1", "s": 2}, {"x": 1, "s": 2, "f": 3},
                                 {"x": 2**63, "s": 0}, {"x": 1.0, "s": 2}, {"x": True, "s": 2}])
def test_a_token_this_service_did_not_issue_is_invalid_argument_naming_resume_token(raw):
    with pytest.raises(InvalidArgument) as e:
        feed_domain.position(encode_page_token(raw))
    assert e.value.field_path == "resume_token"
    with pytest.raises(InvalidArgument):
        feed_domain.position("%%%")


def test_pending_waits_double_from_10_ms_to_at_most_1_s():
    waits = [None]
    for _ in range(10):
        waits.append(feed_domain.next_pending_wait(waits[-1]))
    assert waits[1] == 0.01 and waits[2] == 0.02 and waits[-1] == 1.0 and max(waits[1:]) == 1.0
