"""Page tokens are signed (HMAC under the deployment's key) and bound to the caller and the filters: an
edited token, or one sent by another owner, is INVALID_ARGUMENT naming `page_token`. Behind the
signature every list still checks the values a token carries: forgeries signed with the key (as if it
leaked; the stack runs in this process) are INVALID_ARGUMENT naming `page_token` too — never INTERNAL
(a NUL byte PostgreSQL cannot store, a number no column holds) — and the real token must still work."""
from __future__ import annotations

import base64
import json

import grpc
import pytest

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.common import pages
from services.common.errors import error_info
from tests.helpers.feedback import expect_error, flag, new_instance, send

BIG = 10**30
# What a forger may put into a token's keyset values (numbers, ids).
FORGED_NUMBERS = [BIG, -BIG, True, 1.5, "12", None]
FORGED_IDS = ["\u0000", "a\u0000b", "x" * 10_000, 7, None, ["a"]]
# Feedback tokens carry an ISO 8601 time: these parse, but are out of PostgreSQL's range once in UTC.
FORGED_TIMES = ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59.999999-12:00", "2026-01-01T00:00:00", 17, None]


def _decode(token: str) -> dict:
    payload = token.partition(".")[0]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def _unsigned(d: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")


def _encode(d: dict) -> str:
    """A forgery signed with the key the in-process stack signs with (what a leaked key allows)."""
    payload = _unsigned(d)
    return f"{payload}.{pages._mac(payload)}"


def _forgeries(token: str, number_key: str | None, id_key: str, time_key: str | None = None):
    real = _decode(token)
    for v in FORGED_NUMBERS if number_key else []:
        yield _encode({**real, number_key: v})
    for v in FORGED_TIMES if time_key else []:
        yield _encode({**real, time_key: v})
    for v in FORGED_IDS:
        yield _encode({**real, id_key: v})


async def _all_refused(call, real_token: str, number_key: str | None, id_key: str, time_key: str | None = None) -> None:
    for forged in _forgeries(real_token, number_key, id_key, time_key):
        e = await expect_error(call(forged), grpc.StatusCode.INVALID_ARGUMENT)
        assert error_info(e).metadata["field"] == "page_token", (forged, e.details())
    await call(real_token)  # the genuine token still pages on


async def _two_reports_first_page(stack) -> pb.ListFeedbackResponse:
    """alice's two reports on one reply; the first page of one (its token leads to the second)."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "one")
    for words in ("a", "b"):
        await flag(stack, turn.reply.name, words, sentiment=pb.SENTIMENT_BAD)
    return await stack.feedback().ListFeedback(pb.ListFeedbackRequest(page_size=1), metadata=stack.md())


async def test_forged_chat_page_tokens_are_invalid_argument(stack):
    chat, md = stack.chat(), stack.md()
    inst = await new_instance(stack)
    await new_instance(stack)
    await send(stack, inst, "one")
    page = await chat.ListInstances(chat_pb2.ListInstancesRequest(page_size=1), metadata=md)
    await _all_refused(lambda t: chat.ListInstances(chat_pb2.ListInstancesRequest(page_size=1, page_token=t),
                                                    metadata=md), page.next_page_token, "t", "id")
    msgs = await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=inst, page_size=1), metadata=md)
    await _all_refused(lambda t: chat.ListMessages(chat_pb2.ListMessagesRequest(parent=inst, page_size=1, page_token=t),
                                                   metadata=md), msgs.next_page_token, "t", "id")


async def test_forged_feedback_page_tokens_are_invalid_argument(stack):
    fb, md = stack.feedback(), stack.md()
    page = await _two_reports_first_page(stack)
    await _all_refused(lambda t: fb.ListFeedback(pb.ListFeedbackRequest(page_size=1, page_token=t), metadata=md),
                       page.next_page_token, None, "i", "t")
    recent = await fb.ListRecentFeedback(pb.ListRecentFeedbackRequest(page_size=1), metadata=md)
    await _all_refused(lambda t: fb.ListRecentFeedback(pb.ListRecentFeedbackRequest(page_size=1, page_token=t),
                                                       metadata=md), recent.next_page_token, None, "i", "t")


@pytest.mark.parametrize("position", [0, 1, 2, 3])
async def test_forged_rating_page_tokens_are_invalid_argument(stack, position):
    fb, md = stack.feedback(), stack.md()
    inst = await new_instance(stack)
    for i in range(2):
        turn = await send(stack, inst, f"q{i}")
        await fb.PutRating(pb.PutRatingRequest(rating=pb.Rating(
            conversation=inst, turn_index=turn.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE, aspect="reaction",
            sentiment=pb.RATING_SENTIMENT_NEGATIVE)), metadata=md)
    page = await fb.ListRatings(pb.ListRatingsRequest(conversation=inst, page_size=1), metadata=md)
    real = _decode(page.next_page_token)
    forged_values = FORGED_NUMBERS if position < 2 else FORGED_IDS
    for v in forged_values:
        key = list(real["k"])
        key[position] = v
        e = await expect_error(fb.ListRatings(pb.ListRatingsRequest(conversation=inst, page_size=1,
                                                                    page_token=_encode({**real, "k": key})),
                                              metadata=md), grpc.StatusCode.INVALID_ARGUMENT)
        assert error_info(e).metadata["field"] == "page_token"


async def test_a_rating_etag_that_is_not_one_we_issued_is_invalid_argument(stack):
    """`rating.etag` beyond a bigint, with non-ASCII digits ('²' passes str.isdigit) or unbalanced
    quotes: INVALID_ARGUMENT naming `rating.etag`, the stored rating untouched (was INTERNAL)."""
    fb, md = stack.feedback(), stack.md()
    inst = await new_instance(stack)
    turn = await send(stack, inst, "q")

    def put(etag: str, sentiment=pb.RATING_SENTIMENT_POSITIVE):
        return fb.PutRating(pb.PutRatingRequest(rating=pb.Rating(
            conversation=inst, turn_index=turn.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE, aspect="reaction",
            sentiment=sentiment, etag=etag)), metadata=md)

    first = await put("", pb.RATING_SENTIMENT_NEGATIVE)
    for bad in ("99999999999999999999", '"9223372036854775808"', "\u00b2", '"\u0663"', '"1', "W/1", "1.0", "-1"):
        e = await expect_error(put(bad), grpc.StatusCode.INVALID_ARGUMENT)
        assert error_info(e).metadata["field"] == "rating.etag", bad
    listed = await fb.ListRatings(pb.ListRatingsRequest(conversation=inst), metadata=md)
    assert [(r.version, r.sentiment) for r in listed.ratings] == [(first.version, pb.RATING_SENTIMENT_NEGATIVE)]
    for good in (first.etag, f"W/{first.etag}"):
        assert (await put(good, pb.RATING_SENTIMENT_NEGATIVE)).version == first.version  # accepted: a no-op
    # The bare version is not an etag (issue 25: it passed the compare-and-swap of a rating put again).
    e = await expect_error(put(str(first.version)), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "rating.etag"


async def test_an_edited_token_is_refused_like_garbage(stack):
    """The tester's case: `t` set to year 9999 with the original signature kept, or re-encoded
    without one — both "not a token this service issued", like a garbage token."""
    fb, md = stack.feedback(), stack.md()
    page = await _two_reports_first_page(stack)
    real = _decode(page.next_page_token)
    mac = page.next_page_token.partition(".")[2]
    for forged in (f"{_unsigned({**real, 't': '9999-01-01T00:00:00+00:00'})}.{mac}",
                   _unsigned({**real, "t": "9999-01-01T00:00:00+00:00"}), "garbage", page.next_page_token + "x"):
        e = await expect_error(fb.ListFeedback(pb.ListFeedbackRequest(page_size=1, page_token=forged), metadata=md),
                               grpc.StatusCode.INVALID_ARGUMENT)
        assert error_info(e).metadata["field"] == "page_token"
        assert "not a token this service issued" in e.details()
    again = await fb.ListFeedback(pb.ListFeedbackRequest(page_size=1, page_token=page.next_page_token), metadata=md)
    assert len(again.feedback) == 1


async def test_a_token_issued_to_one_owner_is_refused_for_another(stack):
    chat = stack.chat()
    for _ in range(2):
        await new_instance(stack)
    page = await chat.ListInstances(chat_pb2.ListInstancesRequest(page_size=1), metadata=stack.md("alice"))
    assert page.next_page_token
    e = await expect_error(chat.ListInstances(chat_pb2.ListInstancesRequest(page_size=1, page_token=page.next_page_token),
                                              metadata=stack.md("mallory")), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "page_token" and "another caller" in e.details()


async def test_a_token_sent_with_other_filters_is_refused(stack):
    fb, md = stack.feedback(), stack.md()
    page = await _two_reports_first_page(stack)
    e = await expect_error(fb.ListFeedback(pb.ListFeedbackRequest(page_size=1, page_token=page.next_page_token,
                                                                  text="a"), metadata=md),
                           grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "page_token" and "different filters" in e.details()
