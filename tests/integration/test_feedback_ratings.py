"""Ratings (editable judgements) and operator statistics over real gRPC, a real PostgreSQL and the real
chat gateway of the `stack` fixture. The compare-and-swap test runs a second feedback server as a
separate OS process on the same database.
"""
from __future__ import annotations

import asyncio
import socket
import uuid

import asyncpg
import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider

from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from services.common.auth import SCOPE_FEEDBACK_READ, SCOPE_FEEDBACK_WRITE
from services.common.errors import error_info, status_details
from tests.helpers.feedback import (
    chat_service_md,
    channel_to,
    expect_error,
    flag,
    get,
    new_instance,
    put,
    rating,
    ratings_of,
    send,
    wait_until,
)
from tests.helpers.procs import reported_port, spawn_feedback_process, wait_serving
from tests.stack import TEST_JWT_SECRET, Stack

POS, NEU, NEG = pb.RATING_SENTIMENT_POSITIVE, pb.RATING_SENTIMENT_NEUTRAL, pb.RATING_SENTIMENT_NEGATIVE


async def test_F06_like_dislike_dislike_leaves_one_dislike_and_the_last_call_is_a_no_op(stack):
    inst = await new_instance(stack)
    t = await send(stack, inst, "hello")
    fb = stack.feedback()
    like = await put(fb, rating(inst, t.reply.turn_index, sentiment=POS), stack.md())
    dislike = await put(fb, rating(inst, t.reply.turn_index, sentiment=NEG), stack.md())
    again = await put(fb, rating(inst, t.reply.turn_index, sentiment=NEG), stack.md())
    assert like.version == 1 and dislike.version == 2
    assert again.version == 2 and again.update_time == dislike.update_time and again.etag == dislike.etag
    assert dislike.create_time == like.create_time
    assert dislike.update_time.ToNanoseconds() >= like.update_time.ToNanoseconds()
    assert dislike.message == t.reply.name and dislike.origin == pb.RATING_ORIGIN_USER
    stored = await ratings_of(stack, inst)
    assert len(stored) == 1 and stored[0].sentiment == NEG and stored[0].version == 2


async def test_F07_two_aspects_make_two_rows_and_a_replay_changes_nothing(stack):
    inst = await new_instance(stack)
    t = await send(stack, inst, "hello")
    fb = stack.feedback()
    turn = t.reply.turn_index
    a1 = await put(fb, rating(inst, turn, "accuracy", sentiment=NEU, note="meh"), stack.md())
    a2 = await put(fb, rating(inst, turn, "accuracy", sentiment=POS, note="meh"), stack.md())
    tone_req = pb.PutRatingRequest(rating=rating(inst, turn, "tone", sentiment=NEG, note="curt"),
                                   request_id=str(uuid.uuid4()))
    tone = await fb.PutRating(tone_req, metadata=stack.md())
    replay = await fb.PutRating(tone_req, metadata=stack.md())
    assert (replay.version, replay.create_time, replay.update_time) == (tone.version, tone.create_time,
                                                                          tone.update_time)
    assert a2.version == a1.version + 1
    stored = {r.aspect: r for r in await ratings_of(stack, inst, turn=turn)}
    assert set(stored) == {"accuracy", "tone"}
    assert stored["accuracy"].sentiment == POS and stored["tone"].version == 1
    # A control owns one field: the mask keeps the note when only the sentiment is sent.
    only = await put(fb, rating(inst, turn, "tone", sentiment=POS), stack.md(), mask=["sentiment"])
    assert only.note == "curt" and only.sentiment == POS and only.version == 2


async def test_F12_rating_note_with_nul_is_rejected_and_note_limit_is_utf8_bytes(stack):
    inst = await new_instance(stack)
    t = await send(stack, inst, "hello")
    fb = stack.feedback()
    e = await expect_error(put(fb, rating(inst, t.reply.turn_index, note="ok\x00bad"), stack.md()),
                           grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "rating.note"
    fits = "é" * 4096  # 8192 bytes
    assert (await put(fb, rating(inst, t.reply.turn_index, note=fits), stack.md())).note == fits
    e = await expect_error(put(fb, rating(inst, t.reply.turn_index, note=fits + "a"), stack.md()),
                           grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["limit"] == "8192"
    e = await expect_error(put(fb, rating(inst, t.reply.turn_index, aspect="Bad Slug"), stack.md()),
                           grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "rating.aspect"
    assert [r.note for r in await ratings_of(stack, inst)] == [fits]


async def test_message_rating_needs_a_stored_non_empty_assistant_message(stack):
    inst = await new_instance(stack)
    t = await send(stack, inst, "hello")
    fb = stack.feedback()
    await expect_error(put(fb, rating(inst, t.reply.turn_index + 5), stack.md()), grpc.StatusCode.NOT_FOUND)
    # Other scopes only need the conversation to be the caller's.
    obj = await put(fb, rating(inst, 0, "task_completion", scope=pb.RATING_SCOPE_CONVERSATION, sentiment=POS),
                    stack.md())
    assert obj.message == ""
    await expect_error(put(fb, rating(f"instances/{uuid.uuid4().hex}", 0, scope=pb.RATING_SCOPE_CONVERSATION),
                           stack.md()), grpc.StatusCode.NOT_FOUND)
    assert [r.aspect for r in await ratings_of(stack, inst)] == ["task_completion"]


async def test_F22_other_user_rating_is_not_found_and_concurrent_same_etag_gives_one_ok_one_aborted(stack):
    inst = await new_instance(stack, "alice")
    t = await send(stack, inst, "hello", sub="alice")
    fb = stack.feedback()
    await expect_error(put(fb, rating(inst, t.reply.turn_index, sentiment=NEG), stack.md("bob")),
                       grpc.StatusCode.NOT_FOUND)
    assert await ratings_of(stack, inst, "bob") == []
    base = await put(fb, rating(inst, t.reply.turn_index, sentiment=POS), stack.md())
    results = await asyncio.gather(
        put(fb, rating(inst, t.reply.turn_index, sentiment=NEG, etag=base.etag), stack.md()),
        put(fb, rating(inst, t.reply.turn_index, sentiment=NEU, etag=base.etag), stack.md()),
        return_exceptions=True)
    ok = [r for r in results if isinstance(r, pb.Rating)]
    aborted = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(ok) == 1 and len(aborted) == 1 and aborted[0].code() == grpc.StatusCode.ABORTED
    cur = pb.Rating()
    [d for d in status_details(aborted[0]) if d.Is(pb.Rating.DESCRIPTOR)][0].Unpack(cur)
    assert cur.version == ok[0].version == 2 and cur.sentiment == ok[0].sentiment
    # Strict even for a no-op: a stale etag with the stored value is still ABORTED.
    await expect_error(put(fb, rating(inst, t.reply.turn_index, sentiment=cur.sentiment, etag=base.etag),
                           stack.md()), grpc.StatusCode.ABORTED)
    await expect_error(fb.PutRating(pb.PutRatingRequest(rating=rating(inst, 0))), grpc.StatusCode.UNAUTHENTICATED)
    await expect_error(put(fb, rating(inst, 0), stack.md("alice", (SCOPE_FEEDBACK_READ,))),
                       grpc.StatusCode.PERMISSION_DENIED)


@pytest.mark.slow
async def test_100_concurrent_puts_with_one_etag_from_two_server_processes_one_succeeds(stack, tmp_path):
    inst = await new_instance(stack)
    t = await send(stack, inst, "hello")
    log = tmp_path / "second.log"
    proc = spawn_feedback_process(stack, 0, log)
    try:
        port = await reported_port(log, proc, r"FeedbackService listening on port (\d+)")
        await wait_serving(port, proc, log)
        stubs = [stack.feedback(), feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, port))]
        base = await put(stubs[0], rating(inst, t.reply.turn_index, sentiment=POS, note="start"), stack.md())
        # Every call changes the note (so none is a no-op) and carries the same etag.
        calls = [put(stubs[i % 2], rating(inst, t.reply.turn_index, note=f"writer {i}", etag=base.etag), stack.md())
                 for i in range(100)]
        results = await asyncio.gather(*calls, return_exceptions=True)
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    ok = [r for r in results if isinstance(r, pb.Rating)]
    errors = [r for r in results if not isinstance(r, pb.Rating)]
    assert len(ok) == 1, [getattr(e, "details", lambda: e)() for e in errors[:3]]
    assert all(isinstance(e, grpc.aio.AioRpcError) and e.code() == grpc.StatusCode.ABORTED for e in errors)
    (stored,) = await ratings_of(stack, inst)
    assert stored.version == base.version + len(ok) and stored.note == ok[0].note


async def test_delete_is_idempotent_copy_marks_branch_copies_and_stats_count_user_ratings_only(stack):
    src = await new_instance(stack)
    fork = await new_instance(stack)
    turns = [await send(stack, src, f"turn {i}") for i in range(3)]
    fb = stack.feedback()
    r0 = await put(fb, rating(src, turns[0].reply.turn_index, sentiment=NEG, category=pb.CATEGORY_TOOL_FAILURE,
                              note="tool broke"), stack.md())
    await put(fb, rating(src, turns[1].reply.turn_index, sentiment=POS), stack.md())
    await put(fb, rating(src, turns[2].reply.turn_index, sentiment=POS), stack.md())
    # The fork replayed the first two turns (a MESSAGE rating needs a stored assistant message there).
    fork_turns = [await send(stack, fork, f"turn {i}") for i in range(2)]
    copied = await fb.CopyRatings(pb.CopyRatingsRequest(source_conversation=src, target_conversation=fork,
                                                        through_turn_index=turns[1].reply.turn_index),
                                  metadata=stack.md())
    assert copied.copied_count == 2
    again = await fb.CopyRatings(pb.CopyRatingsRequest(source_conversation=src, target_conversation=fork,
                                                       through_turn_index=turns[1].reply.turn_index),
                                 metadata=stack.md())
    assert again.copied_count == 0
    # Through turn 2, which the fork does not have: its MESSAGE rating is not copied onto nothing.
    beyond = await fb.CopyRatings(pb.CopyRatingsRequest(source_conversation=src, target_conversation=fork,
                                                        through_turn_index=2**31 - 1), metadata=stack.md())
    assert beyond.copied_count == 0
    forked = await ratings_of(stack, fork)
    assert [r.origin for r in forked] == [pb.RATING_ORIGIN_BRANCH_COPY] * 2
    assert [r.message for r in forked] == [t.reply.name for t in fork_turns]  # the fork's own replies
    await flag(stack, turns[0].reply.name, "broken tool", sentiment=pb.SENTIMENT_BAD,
               category=pb.CATEGORY_TOOL_FAILURE)
    stats = await fb.GetFeedbackStats(pb.GetFeedbackStatsRequest(window_days=7), metadata=stack.md("operator"))
    assert stats.total_ratings == 3 and stats.negative_ratings == 1 and stats.total_reports == 1
    (aspect,) = stats.aspects
    assert (aspect.aspect, aspect.positive, aspect.negative) == ("reaction", 2, 1)
    assert [(c.category, c.count) for c in stats.categories] == [(pb.CATEGORY_TOOL_FAILURE, 1)]
    assert len(stats.trend) == 7 and sum(d.positive for d in stats.trend) == 2
    assert stats.trend[-1].reports == 1 and all(d.reports == 0 for d in stats.trend[:-1])
    feed = await fb.ListRecentFeedback(pb.ListRecentFeedbackRequest(negative_only=True), metadata=stack.md("op"))
    kinds = [i.WhichOneof("item") for i in feed.items]
    assert sorted(kinds) == ["feedback", "rating"]
    text = await fb.ListRecentFeedback(pb.ListRecentFeedbackRequest(text="TOOL BROKE"), metadata=stack.md("op"))
    assert [i.rating.name for i in text.items] == [r0.name]
    pages, token = [], ""
    while True:
        resp = await fb.ListRecentFeedback(pb.ListRecentFeedbackRequest(page_size=2, page_token=token),
                                           metadata=stack.md("op"))
        pages += [i.rating.name or i.feedback.name for i in resp.items]
        token = resp.next_page_token
        if not token:
            break
    assert len(pages) == len(set(pages)) == 4  # 3 USER ratings + 1 report; branch copies left out
    first = await fb.ListRecentFeedback(pb.ListRecentFeedbackRequest(page_size=1), metadata=stack.md("op"))
    e = await expect_error(fb.ListRecentFeedback(pb.ListRecentFeedbackRequest(
        page_size=1, negative_only=True, page_token=first.next_page_token), metadata=stack.md("op")),
        grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "page_token"
    await expect_error(fb.GetFeedbackStats(pb.GetFeedbackStatsRequest(),
                                           metadata=stack.md("alice", (SCOPE_FEEDBACK_WRITE,))),
                       grpc.StatusCode.PERMISSION_DENIED)
    await fb.DeleteRating(pb.DeleteRatingRequest(name=r0.name), metadata=stack.md())
    await fb.DeleteRating(pb.DeleteRatingRequest(name=r0.name), metadata=stack.md())
    assert r0.name not in {r.name for r in await ratings_of(stack, src)}


async def test_a_put_retried_with_its_request_id_never_overwrites_a_later_rating(stack):
    """The console's dislike (request id X) is retried by the network after the owner already changed
    their mind (a like, request id Y): the retry writes nothing and answers with the rating as it is.
    The same X with another request is INVALID_ARGUMENT; an etag'd put retried after it applied is not
    ABORTED by its own write; a retry after the rating was deleted is NOT_FOUND."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "q")
    fb, md = stack.feedback(), stack.md()
    x, y, z = (str(uuid.uuid4()) for _ in range(3))

    def req(sentiment: int, request_id: str, etag: str = "") -> pb.PutRatingRequest:
        return pb.PutRatingRequest(rating=rating(inst, turn.reply.turn_index, sentiment=sentiment, etag=etag),
                                   request_id=request_id)

    disliked = await fb.PutRating(req(pb.RATING_SENTIMENT_NEGATIVE, x), metadata=md)
    e = await expect_error(fb.PutRating(req(pb.RATING_SENTIMENT_POSITIVE, x), metadata=md),
                           grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "request_id"
    liked = await fb.PutRating(req(pb.RATING_SENTIMENT_POSITIVE, y), metadata=md)
    retried = await fb.PutRating(req(pb.RATING_SENTIMENT_NEGATIVE, x), metadata=md)
    assert (retried.sentiment, retried.version) == (pb.RATING_SENTIMENT_POSITIVE, liked.version) == \
        (pb.RATING_SENTIMENT_POSITIVE, disliked.version + 1)

    neutral = await fb.PutRating(req(pb.RATING_SENTIMENT_NEUTRAL, z, liked.etag), metadata=md)
    again = await fb.PutRating(req(pb.RATING_SENTIMENT_NEUTRAL, z, liked.etag), metadata=md)  # not ABORTED
    assert again.version == neutral.version == liked.version + 1
    assert [(r.sentiment, r.version) for r in await ratings_of(stack, inst)] == [(pb.RATING_SENTIMENT_NEUTRAL,
                                                                                 neutral.version)]

    await fb.DeleteRating(pb.DeleteRatingRequest(name=neutral.name), metadata=md)
    await expect_error(fb.PutRating(req(pb.RATING_SENTIMENT_NEUTRAL, z, liked.etag), metadata=md),
                       grpc.StatusCode.NOT_FOUND)
    assert await ratings_of(stack, inst) == []


async def test_concurrent_puts_with_one_request_id_write_once_and_the_others_are_its_retries(stack):
    """20 PutRatings at once with one request id (a client's retries racing, or a request id reused by
    mistake): exactly one writes. With one body every answer is that rating; with different bodies the
    others are INVALID_ARGUMENT REQUEST_ID_REUSED (AIP-155). Found by a new user's trial: with the request
    id recorded after the write, every concurrent put saw no record and wrote (versions 1-5 under one
    request id). The same for etag'd puts: one writes, the others are its retries, not ABORTED."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "q")
    fb, md = stack.feedback(), stack.md()
    sentiments = (POS, NEU, NEG)

    async def race(aspect: str, bodies: int, etag: str = "") -> list:
        rid = str(uuid.uuid4())
        return await asyncio.gather(*(fb.PutRating(pb.PutRatingRequest(
            rating=rating(inst, turn.reply.turn_index, aspect, sentiment=sentiments[i % bodies], etag=etag),
            request_id=rid), metadata=md) for i in range(20)), return_exceptions=True)

    def stored(aspect: str) -> list[tuple[int, int]]:
        return [(r.sentiment, r.version) for r in ratings if r.aspect == aspect]

    same = await race("same", 1)
    assert all(isinstance(r, pb.Rating) for r in same), [r for r in same if not isinstance(r, pb.Rating)][:1]
    assert {(r.name, r.sentiment, r.version) for r in same} == {(same[0].name, POS, 1)}

    mixed = await race("mixed", 3)
    ok = [r for r in mixed if isinstance(r, pb.Rating)]
    refused = [r for r in mixed if not isinstance(r, pb.Rating)]
    assert ok and {(r.sentiment, r.version) for r in ok} == {(ok[0].sentiment, 1)}, [(r.sentiment, r.version) for r in ok]
    assert all(isinstance(e, grpc.aio.AioRpcError) and e.code() == grpc.StatusCode.INVALID_ARGUMENT
               and error_info(e).reason == "REQUEST_ID_REUSED" for e in refused), refused[:1]
    assert len(ok) + len(refused) == 20

    base = await put(fb, rating(inst, turn.reply.turn_index, "cas", sentiment=NEG), md)
    cas = await race("cas", 1, base.etag)
    assert all(isinstance(r, pb.Rating) for r in cas), [r for r in cas if not isinstance(r, pb.Rating)][:1]
    assert {(r.sentiment, r.version) for r in cas} == {(POS, base.version + 1)}

    ratings = await ratings_of(stack, inst)
    assert stored("same") == [(POS, 1)] and stored("mixed") == [(ok[0].sentiment, 1)]
    assert stored("cas") == [(POS, base.version + 1)]


async def test_a_new_rating_takes_only_the_masked_fields_and_pages_stay_with_their_conversation(stack):
    inst, other = await new_instance(stack), await new_instance(stack)
    t0, t1 = await send(stack, inst, "a"), await send(stack, inst, "b")
    await send(stack, other, "c")
    fb, md = stack.feedback(), stack.md()
    # AIP-134: a first put with update_mask [note] writes the note only; the sentiment sent along is not stored.
    noted = await put(fb, rating(inst, t0.reply.turn_index, aspect="accuracy", note="checked the numbers",
                                 sentiment=pb.RATING_SENTIMENT_NEGATIVE), md, mask=["note"])
    assert (noted.note, noted.sentiment) == ("checked the numbers", pb.RATING_SENTIMENT_UNSPECIFIED)
    await put(fb, rating(inst, t1.reply.turn_index, sentiment=pb.RATING_SENTIMENT_POSITIVE), md)
    page = await fb.ListRatings(pb.ListRatingsRequest(conversation=inst, page_size=1), metadata=md)
    assert page.next_page_token
    for wrong in (pb.ListRatingsRequest(conversation=other, page_size=1, page_token=page.next_page_token),
                  pb.ListRatingsRequest(conversation=inst, turn_index=t1.reply.turn_index, page_size=1,
                                        page_token=page.next_page_token)):
        e = await expect_error(fb.ListRatings(wrong, metadata=md), grpc.StatusCode.INVALID_ARGUMENT)
        assert error_info(e).metadata["field"] == "page_token"
    rest = await fb.ListRatings(pb.ListRatingsRequest(conversation=inst, page_size=1, page_token=page.next_page_token),
                                metadata=md)
    assert [r.turn_index for r in (*page.ratings, *rest.ratings)] == [t0.reply.turn_index, t1.reply.turn_index]


async def test_a_token_without_the_chat_scope_cannot_rate_on_another_tokens_cached_check(stack):
    """The ownership check at the chat service is cached for a few seconds; a token the chat service
    would refuse (no `chat` scope) must not ride on an answer another token of the same user got."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "q")
    fb = stack.feedback()
    await put(fb, rating(inst, turn.reply.turn_index, sentiment=pb.RATING_SENTIMENT_POSITIVE), stack.md())
    narrow = stack.md("alice", (SCOPE_FEEDBACK_WRITE, SCOPE_FEEDBACK_READ))
    e = await expect_error(put(fb, rating(inst, turn.reply.turn_index, sentiment=pb.RATING_SENTIMENT_NEGATIVE),
                               narrow), grpc.StatusCode.PERMISSION_DENIED)
    assert "chat" in e.details()
    assert [r.sentiment for r in await ratings_of(stack, inst)] == [pb.RATING_SENTIMENT_POSITIVE]


async def aspect_counts(stack: Stack, aspect: str) -> tuple[int, int]:
    """GetFeedbackStats' (positive, negative) MESSAGE ratings of `aspect` today (every owner)."""
    s = await stack.feedback().GetFeedbackStats(pb.GetFeedbackStatsRequest(window_days=1), metadata=stack.md("ops"))
    got = [(a.positive, a.negative) for a in s.aspects if a.aspect == aspect and a.scope == pb.RATING_SCOPE_MESSAGE]
    return got[0] if got else (0, 0)


async def report_total(stack: Stack) -> int:
    s = await stack.feedback().GetFeedbackStats(pb.GetFeedbackStatsRequest(window_days=1), metadata=stack.md("ops"))
    return s.total_reports


async def test_a_just_deleted_turn_cannot_be_rated_and_a_cleared_conversations_turns_neither(stack):
    """A turn rated a moment ago (its check at the chat service fresh) and then deleted (DeleteTurn) or
    cleared (Clear chat) answers NOT_FOUND naming the turn at once, on the next put: no remembered
    answer outlives the message it is about. Its ratings go with it: ListRatings no longer lists them
    and GetFeedbackStats no longer counts them (chat tells feedback before deleting, issue 25)."""
    inst = await new_instance(stack)
    first, second = await send(stack, inst, "q1"), await send(stack, inst, "q2")
    fb, chat = stack.feedback(), stack.chat()
    aspect = f"gone_{uuid.uuid4().hex[:8]}"
    for t in (first, second):
        await put(fb, rating(inst, t.reply.turn_index, sentiment=POS), stack.md())
        await put(fb, rating(inst, t.reply.turn_index, aspect, sentiment=NEG), stack.md())
    reports = [await flag(stack, t.reply.name) for t in (first, second)]
    assert await aspect_counts(stack, aspect) == (0, 2)
    before = await report_total(stack)
    await chat.DeleteTurn(chat_pb2.DeleteTurnRequest(parent=inst, trace_id=first.trace_id), metadata=stack.md())
    assert {r.turn_index for r in await ratings_of(stack, inst)} == {second.reply.turn_index}
    assert await aspect_counts(stack, aspect) == (0, 1), "the deleted turn's rating is no longer counted"
    kept = [await get(stack, r.name) for r in reports]
    assert kept[0].HasField("turn_removed_time") and not kept[1].HasField("turn_removed_time")
    assert kept[0].body == reports[0].body and kept[0].snapshot.target_text, "the report is kept as evidence"
    assert await report_total(stack) == before - 1, "a report of a removed turn is not counted"
    e = await expect_error(put(fb, rating(inst, first.reply.turn_index, sentiment=NEG), stack.md()),
                           grpc.StatusCode.NOT_FOUND)
    assert f"turn {first.reply.turn_index}" in e.details() and inst in e.details()
    await chat.ClearMessages(chat_pb2.ClearMessagesRequest(parent=inst), metadata=stack.md())
    e = await expect_error(put(fb, rating(inst, second.reply.turn_index, sentiment=NEG), stack.md()),
                           grpc.StatusCode.NOT_FOUND)
    assert f"turn {second.reply.turn_index}" in e.details()
    assert await ratings_of(stack, inst) == [], "nothing listed, nothing written after the deletes"
    assert await aspect_counts(stack, aspect) == (0, 0)
    assert (await get(stack, reports[1].name)).HasField("turn_removed_time")
    assert await report_total(stack) == before - 2
    third = await send(stack, inst, "q3")  # a turn after Clear chat has a new index: it can be rated
    assert third.reply.turn_index > second.reply.turn_index
    await put(fb, rating(inst, third.reply.turn_index, sentiment=POS), stack.md())
    assert [r.turn_index for r in await ratings_of(stack, inst)] == [third.reply.turn_index]


async def test_a_rating_the_chat_check_let_through_cannot_land_on_a_turn_removed_since(stack):
    """The write itself refuses a removed turn (migration 0065): the removal recorded by
    NoteTurnsRemoved (as DeleteTurn sends it, before deleting) makes the next put NOT_FOUND naming the
    turn even while chat still has the turn (a put whose chat check passed just before the removal)."""
    inst = await new_instance(stack)
    t = await send(stack, inst, "q")
    fb = stack.feedback()
    await put(fb, rating(inst, t.reply.turn_index, sentiment=POS), stack.md())
    req = pb.NoteTurnsRemovedRequest(owner="alice", conversation=inst, turn_indexes=[t.reply.turn_index])
    assert (await fb.NoteTurnsRemoved(req, metadata=chat_service_md(stack))).deleted_rating_count == 1
    assert (await fb.NoteTurnsRemoved(req, metadata=chat_service_md(stack))).deleted_rating_count == 0, "a repeat is a no-op"
    e = await expect_error(put(fb, rating(inst, t.reply.turn_index, sentiment=NEG), stack.md()),
                           grpc.StatusCode.NOT_FOUND)
    assert f"{inst} turn {t.reply.turn_index}" in e.details() and error_info(e).reason == "TURN_REMOVED"
    assert await ratings_of(stack, inst) == []
    for bad, field in ((pb.NoteTurnsRemovedRequest(owner="alice", conversation=inst), "turn_indexes"),
                       (pb.NoteTurnsRemovedRequest(owner="alice", conversation=inst, turn_indexes=[0], trace_ids=["x"]),
                        "trace_ids[0]"),
                       (pb.NoteTurnsRemovedRequest(owner="alice", conversation="x", through_turn_index=0), "conversation"),
                       (pb.NoteTurnsRemovedRequest(conversation=inst, through_turn_index=0), "owner")):
        e = await expect_error(fb.NoteTurnsRemoved(bad, metadata=chat_service_md(stack)), grpc.StatusCode.INVALID_ARGUMENT)
        assert error_info(e).metadata["field"] == field


async def test_puts_racing_the_removal_of_their_turn_never_outlive_it(stack):
    """Puts whose chat check passed race NoteTurnsRemoved: each either landed before the removal (and
    was deleted by it) or is NOT_FOUND; none is left on the removed turn."""
    inst = await new_instance(stack)
    t = await send(stack, inst, "q")
    fb = stack.feedback()
    req = pb.NoteTurnsRemovedRequest(owner="alice", conversation=inst, turn_indexes=[t.reply.turn_index])

    async def one(i: int):
        try:
            await put(fb, rating(inst, t.reply.turn_index, f"race_{i}", sentiment=POS), stack.md())
        except grpc.aio.AioRpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND, e.details()

    await asyncio.gather(*(one(i) for i in range(12)), fb.NoteTurnsRemoved(req, metadata=chat_service_md(stack)),
                         *(one(i) for i in range(12, 24)))
    assert await ratings_of(stack, inst) == []


async def test_a_rating_write_in_flight_when_its_turn_is_removed_is_deleted_with_it(stack):
    """The exact race: a rating insert already past its check (uncommitted, as a PutRating statement in
    flight) when NoteTurnsRemoved arrives. The removal waits for it (the conversation's advisory lock)
    and then deletes it: the rating never outlives the removal."""
    inst = await new_instance(stack)
    t = await send(stack, inst, "q")
    conn = await asyncpg.connect(stack.database_url, server_settings={"search_path": "feedback"})
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.execute(
            "INSERT INTO ratings (id, conversation, turn_index, owner, scope, aspect, artifact_id, sentiment, category,"
            " note, origin, message, version, create_time, update_time, reasons, choice) VALUES ('inflight_' ||"
            " md5(random()::text), $1, $2, 'alice', 1, 'in_flight', '', 1, 0, '', 1, '', 1, now(), now(), '{}', '')",
            inst, t.reply.turn_index)
        req = pb.NoteTurnsRemovedRequest(owner="alice", conversation=inst, turn_indexes=[t.reply.turn_index])
        removal = asyncio.ensure_future(stack.feedback().NoteTurnsRemoved(req, metadata=chat_service_md(stack)))
        deadline = asyncio.get_running_loop().time() + 10
        while not removal.done() and not await conn.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"):
            assert asyncio.get_running_loop().time() < deadline, "the removal neither waited nor finished"
            await asyncio.sleep(0.02)
        await tx.commit()
        assert (await removal).deleted_rating_count == 1, "the in-flight rating is deleted by the removal"
    finally:
        await conn.close()
    assert await ratings_of(stack, inst) == []


async def test_delete_turn_with_the_feedback_service_down_deletes_and_feedback_follows_once_reachable(stack, tmp_path):
    """The delete and its notice are one outbox (services/chat/removal.py): with the feedback service
    unreachable from a chat replica, DeleteTurn and Clear chat still succeed there (the turn is gone at
    once) and the turn's rating stays only until a replica that reaches the feedback service sends the
    removal from the shared outbox; repeating DeleteTurn after that is NOT_FOUND and changes nothing."""
    from services.chat.server import create_server as create_chat  # noqa: PLC0415
    from services.chat.settings import ChatSettings  # noqa: PLC0415

    with socket.socket() as s:  # a port nothing listens on: the feedback service stopped
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    cut_off = await create_chat(ChatSettings(
        listen="127.0.0.1:0", metrics_listen="", agent_target=f"127.0.0.1:{stack.ports['agent']}",
        feedback_target=f"127.0.0.1:{dead}", database_url=stack.database_url, data_dir=tmp_path,
        jwt_secret=TEST_JWT_SECRET, shutdown_grace_s=0, shutdown_drain_s=0), database_url=stack.database_url,
        tracer_provider=TracerProvider())
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{cut_off.port}")
    try:
        inst = await new_instance(stack)
        t, kept = await send(stack, inst, "q"), await send(stack, inst, "q2")
        for turn in (t, kept):
            await put(stack.feedback(), rating(inst, turn.reply.turn_index, sentiment=POS), stack.md())
        lone = chat_pb2_grpc.ChatServiceStub(ch)
        delete = chat_pb2.DeleteTurnRequest(parent=inst, trace_id=t.trace_id)
        await lone.DeleteTurn(delete, metadata=stack.md())
        listed = await stack.chat().ListMessages(chat_pb2.ListMessagesRequest(parent=inst), metadata=stack.md())
        assert {m.trace_id for m in listed.messages} == {kept.trace_id}, "the turn is gone at once"
        await wait_until(lambda: ratings_of(stack, inst),
                         lambda got: [r.turn_index for r in got] == [kept.reply.turn_index], timeout_s=40)
        await expect_error(stack.chat().DeleteTurn(delete, metadata=stack.md()), grpc.StatusCode.NOT_FOUND)
        await lone.ClearMessages(chat_pb2.ClearMessagesRequest(parent=inst), metadata=stack.md())
        listed = await stack.chat().ListMessages(chat_pb2.ListMessagesRequest(parent=inst), metadata=stack.md())
        assert list(listed.messages) == []
        await wait_until(lambda: ratings_of(stack, inst), lambda got: got == [], timeout_s=40)
    finally:
        await ch.close()
        await cut_off.stop(0)


async def test_list_ratings_with_a_negative_turn_index_is_invalid_argument_naming_it(stack: Stack):
    inst = await new_instance(stack)
    e = await expect_error(stack.feedback().ListRatings(pb.ListRatingsRequest(conversation=inst, turn_index=-1),
                                                        metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "turn_index"


async def test_a_stale_tab_holding_a_deleted_ratings_etag_cannot_overwrite_the_rating_put_since(stack):
    """ABA across a delete (issue 25): the rating put again starts back at version 1, but its etag is not
    the deleted rating's, so the stale tab's compare-and-swap is ABORTED and the new rating stays."""
    inst = await new_instance(stack, "alice")
    t = await send(stack, inst, "hello", sub="alice")
    fb = stack.feedback()
    old = await put(fb, rating(inst, t.reply.turn_index, sentiment=POS), stack.md())  # the stale tab read this
    await fb.DeleteRating(pb.DeleteRatingRequest(name=old.name), metadata=stack.md())
    new = await put(fb, rating(inst, t.reply.turn_index, sentiment=NEG), stack.md())  # another tab, since
    assert new.version == old.version == 1 and new.etag != old.etag
    await expect_error(put(fb, rating(inst, t.reply.turn_index, sentiment=NEU, etag=old.etag), stack.md()),
                       grpc.StatusCode.ABORTED)
    (stored,) = await ratings_of(stack, inst)
    assert stored.sentiment == NEG and stored.etag == new.etag
    # A bare number is not an etag (it used to pass for version 1).
    await expect_error(put(fb, rating(inst, t.reply.turn_index, sentiment=NEU, etag="1"), stack.md()),
                       grpc.StatusCode.INVALID_ARGUMENT)
    await expect_error(put(fb, rating(inst, t.reply.turn_index, sentiment=NEU, etag='"1"'), stack.md()),
                       grpc.StatusCode.INVALID_ARGUMENT)
    assert (await put(fb, rating(inst, t.reply.turn_index, sentiment=NEU, etag="W/" + new.etag), stack.md())).version == 2
