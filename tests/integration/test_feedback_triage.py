"""Feedback reports over real gRPC and a real PostgreSQL, with the real chat gateway, agent and trace
collector of the `stack` fixture (tests/stack.py). Triage: UpdateFeedback (etag, status machine, issue_url), ListFeedback (filters, pages), FileFeedback (tickets), DeleteFeedback (retries).
Tests named after field cases carry the case id.
"""
from __future__ import annotations

import asyncio
import datetime as dt

import grpc
import pytest
from aiohttp import web
from google.protobuf import field_mask_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from services.common.errors import error_info, status_details


from tests.helpers.feedback import (
    channel_to,
    expect_error,
    flag,
    get,
    list_all,
    new_instance,
    rid,
    send,
    start_feedback,
)

PENDING, CAPTURED, EXPIRED = pb.TRACE_SNAPSHOT_STATE_PENDING, pb.TRACE_SNAPSHOT_STATE_CAPTURED, pb.TRACE_SNAPSHOT_STATE_EXPIRED

PENDING, CAPTURED, EXPIRED = pb.TRACE_SNAPSHOT_STATE_PENDING, pb.TRACE_SNAPSHOT_STATE_CAPTURED, pb.TRACE_SNAPSHOT_STATE_EXPIRED


async def test_update_status_with_etag_stale_etag_is_aborted_with_the_current_row_and_body_is_immutable(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    fb = await flag(stack, turn.reply.name, "words")
    fbs = stack.feedback()
    mask = field_mask_pb2.FieldMask(paths=["status"])
    triaged = await fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_TRIAGED, etag=fb.etag), update_mask=mask),
        metadata=stack.md())
    assert triaged.status == pb.STATUS_TRIAGED and triaged.etag != fb.etag
    e = await expect_error(fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_DISMISSED, etag=fb.etag), update_mask=mask),
        metadata=stack.md()), grpc.StatusCode.ABORTED)
    current = [d for d in status_details(e) if d.Is(pb.Feedback.DESCRIPTOR)]
    assert len(current) == 1
    row = pb.Feedback()
    current[0].Unpack(row)
    assert row.status == pb.STATUS_TRIAGED and row.etag == triaged.etag
    e = await expect_error(fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, body="rewritten"), update_mask=field_mask_pb2.FieldMask(paths=["body"])),
        metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "update_mask"
    filed = await fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_FILED, issue_url="https://tracker.example/1"),
        update_mask=field_mask_pb2.FieldMask(paths=["status", "issue_url"]), request_id=(r := rid())),
        metadata=stack.md())
    assert filed.issue_url == "https://tracker.example/1"
    # A retry of the same update returns the row, nothing new written.
    again = await fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_FILED, issue_url="https://tracker.example/1",
                             etag=triaged.etag), update_mask=field_mask_pb2.FieldMask(paths=["status", "issue_url"]),
        request_id=r), metadata=stack.md())
    assert again.etag == filed.etag
    await expect_error(fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_TRIAGED), update_mask=mask), metadata=stack.md()),
        grpc.StatusCode.FAILED_PRECONDITION)
    reopened = await fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_OPEN), update_mask=mask), metadata=stack.md())
    assert reopened.status == pb.STATUS_OPEN and reopened.body == "words"
    await fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=fb.name), metadata=stack.md())
    await expect_error(get(stack, fb.name), grpc.StatusCode.NOT_FOUND)
    await expect_error(fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=fb.name), metadata=stack.md()),
                       grpc.StatusCode.NOT_FOUND)


async def test_list_filters_and_pages_newest_first_without_repeats(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    made = []
    for i in range(7):
        made.append(await flag(stack, turn.reply.name, f"report {i} {'needle' if i % 3 == 0 else ''}",
                               sentiment=pb.SENTIMENT_BAD if i % 2 else pb.SENTIMENT_GOOD,
                               category=pb.CATEGORY_TOOL_FAILURE if i == 4 else pb.CATEGORY_OTHER))
    pages, token = [], ""
    while True:
        resp = await stack.feedback().ListFeedback(pb.ListFeedbackRequest(page_size=3, page_token=token),
                                                   metadata=stack.md())
        pages.append([f.name for f in resp.feedback])
        token = resp.next_page_token
        if not token:
            break
    flat = [n for p in pages for n in p]
    assert flat == [f.name for f in reversed(made)] and [len(p) for p in pages] == [3, 3, 1]
    assert {f.body for f in await list_all(stack, text="NEEDLE")} == {"report 0 needle", "report 3 needle",
                                                                      "report 6 needle"}
    assert len(await list_all(stack, sentiment=pb.SENTIMENT_BAD)) == 3
    assert [f.body for f in await list_all(stack, category=pb.CATEGORY_TOOL_FAILURE)] == ["report 4 "]
    assert len(await list_all(stack, instance=inst, status=pb.STATUS_OPEN)) == 7
    assert await list_all(stack, author=pb.AUTHOR_AGENT) == []
    future = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    from google.protobuf import timestamp_pb2  # noqa: PLC0415
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(future)
    assert await list_all(stack, start_time=ts) == []
    for bad in ("not-a-token", "eyJ4IjoxfQ"):  # garbage, and base64 of {"x":1}
        e = await expect_error(stack.feedback().ListFeedback(pb.ListFeedbackRequest(page_token=bad),
                                                             metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
        assert error_info(e).metadata["field"] == "page_token"


async def test_a_ticket_filed_right_after_the_report_carries_the_turns_tool_calls(stack):
    """The owner flags a reply and a triager files it the same second: FileFeedback waits for the capture
    worker (bounded) so the ticket has the turn's tool calls, not "pending … (none recorded)"."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "How many agents do you have in total? Give me their names.")
    fb = await flag(stack, turn.reply.name, "the count is wrong", category=pb.CATEGORY_TOOL_FAILURE)
    assert fb.trace_snapshot.state == PENDING
    filed = await stack.feedback().FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md())
    assert filed.trace_snapshot.state == CAPTURED
    ticket = (stack.data_dir / "tickets" / f"{fb.name.removeprefix('feedback/')}.md").read_text()
    assert "list_subordinates" in ticket and "none recorded" not in ticket, ticket


async def test_file_feedback_twice_and_concurrently_files_one_markdown_ticket(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi there")
    fb = await flag(stack, turn.reply.name, "private words of the owner", category=pb.CATEGORY_TOOL_FAILURE)
    fbs = stack.feedback()
    got = await asyncio.gather(*(fbs.FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md())
                                 for _ in range(5)))
    again = await fbs.FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md())
    urls = {g.issue_url for g in got} | {again.issue_url}
    assert len(urls) == 1 and again.status == pb.STATUS_FILED
    files = list((stack.data_dir / "tickets").glob("*.md"))
    assert len(files) == 1 and files[0].resolve().as_uri() == again.issue_url
    text = files[0].read_text()
    assert fb.name in text and turn.trace_id in text and "tool failure" in text
    assert "private words of the owner" not in text and turn.reply.content[:200] not in text


@pytest.fixture
async def issues_endpoint_imitating_github():
    """A local aiohttp server that imitates GitHub's `POST /repos/{owner}/{repo}/issues` (records calls)."""
    calls: list[dict] = []

    async def create_issue(request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == "Bearer gh-test-token"
        payload = await request.json()
        calls.append({"path": request.path, **payload})
        n = len(calls)
        owner, repo = request.match_info["owner"], request.match_info["repo"]
        return web.json_response({"number": n, "html_url": f"https://github.example/{owner}/{repo}/issues/{n}"},
                                 status=201)

    app = web.Application()
    app.router.add_post("/repos/{owner}/{repo}/issues", create_issue)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", calls
    await runner.cleanup()


async def test_file_feedback_to_github_sink_posts_one_issue_with_the_default_fields(
        stack, tmp_path, issues_endpoint_imitating_github):
    api, calls = issues_endpoint_imitating_github
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hello")
    fb = await flag(stack, turn.reply.name, "owner's private complaint", category=pb.CATEGORY_NETWORK)
    srv = await start_feedback(stack, tmp_path, tracker="github", tracker_github_api=api,
                               tracker_github_repo="acme/agent", tracker_github_token="gh-test-token")
    try:
        stub = feedback_pb2_grpc.FeedbackServiceStub(channel_to(stack, srv.port))
        first, second = await asyncio.gather(*(stub.FileFeedback(pb.FileFeedbackRequest(name=fb.name),
                                                                 metadata=stack.md()) for _ in range(2)))
        third = await stub.FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md())
    finally:
        await srv.stop(0.5)
    assert len(calls) == 1 and calls[0]["path"] == "/repos/acme/agent/issues"
    assert first.issue_url == second.issue_url == third.issue_url == "https://github.example/acme/agent/issues/1"
    assert "network" in calls[0]["title"] + calls[0]["body"] and turn.trace_id in calls[0]["body"]
    assert "owner's private complaint" not in calls[0]["body"] and turn.reply.content[:200] not in calls[0]["body"]
    assert (await get(stack, fb.name)).status == pb.STATUS_FILED


@pytest.mark.parametrize("field_path, request_kw", [
    ("start_time", {"start_time": {"seconds": -10**12}}),
    ("start_time", {"start_time": {"seconds": 1, "nanos": 2_000_000_000}}),
    ("end_time", {"end_time": {"seconds": 253_402_300_800}}),
    ("end_time", {"end_time": {"seconds": 1, "nanos": -1}}),
    ("start_time", {"start_time": {"seconds": 2_000_000_000}, "end_time": {"seconds": 1_000_000_000}}),
])
async def test_list_feedback_bad_time_range_is_invalid_argument_naming_the_field(stack, field_path, request_kw):
    req = pb.ListFeedbackRequest(**{k: Timestamp(**v) for k, v in request_kw.items()})
    e = await expect_error(stack.feedback().ListFeedback(req, metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == field_path


async def test_list_feedback_page_token_reused_with_other_filters_is_invalid_argument(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    for i in range(3):
        await flag(stack, turn.reply.name, f"report {i}")
    fbs = stack.feedback()
    first = await fbs.ListFeedback(pb.ListFeedbackRequest(page_size=1, instance=inst), metadata=stack.md())
    assert first.next_page_token
    e = await expect_error(fbs.ListFeedback(pb.ListFeedbackRequest(page_size=1, page_token=first.next_page_token),
                                            metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "page_token"
    e = await expect_error(fbs.ListFeedback(pb.ListFeedbackRequest(
        page_size=1, instance=inst, text="report", page_token=first.next_page_token), metadata=stack.md()),
        grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "page_token"
    same = await fbs.ListFeedback(pb.ListFeedbackRequest(page_size=1, instance=inst, page_token=first.next_page_token),
                                  metadata=stack.md())
    assert same.feedback[0].name != first.feedback[0].name


async def test_update_retried_after_a_later_update_answers_without_rerunning_and_noops_are_remembered(stack):
    """A triage tool's retry of 'mark TRIAGED' (request id U1, with the etag it had) arrives after a
    colleague already filed the report (U2): the retry writes nothing and answers OK with the report as
    it is — not ABORTED on its old etag, not FAILED_PRECONDITION on FILED → TRIAGED. A no-op update's
    request id is remembered too, so reusing it for another request is refused."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    fb, other = await flag(stack, turn.reply.name, "a"), await flag(stack, turn.reply.name, "b")
    fbs, mask = stack.feedback(), field_mask_pb2.FieldMask(paths=["status"])

    def update(name: str, status: int, request_id: str, etag: str = ""):
        return fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
            feedback=pb.Feedback(name=name, status=status, etag=etag), update_mask=mask, request_id=request_id),
            metadata=stack.md())

    u1, u2 = rid(), rid()
    triaged = await update(fb.name, pb.STATUS_TRIAGED, u1, fb.etag)
    filed = await update(fb.name, pb.STATUS_FILED, u2, triaged.etag)
    retry = await update(fb.name, pb.STATUS_TRIAGED, u1, fb.etag)
    assert retry.status == pb.STATUS_FILED and retry.etag == filed.etag  # nothing written, the report as it is
    # The same id for another report, or another request: INVALID_ARGUMENT, nothing written.
    for call in (update(other.name, pb.STATUS_TRIAGED, u1), update(fb.name, pb.STATUS_DISMISSED, u2)):
        e = await expect_error(call, grpc.StatusCode.INVALID_ARGUMENT)
        assert error_info(e).metadata["field"] == "request_id"
    assert (await get(stack, other.name)).status == pb.STATUS_OPEN
    assert (await get(stack, fb.name)).etag == filed.etag

    # A no-op (already FILED) with a new id changes nothing and still binds the id to its request.
    u3 = rid()
    same = await update(fb.name, pb.STATUS_FILED, u3)
    assert same.etag == filed.etag
    e = await expect_error(update(fb.name, pb.STATUS_OPEN, u3), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "request_id"
    assert (await get(stack, fb.name)).status == pb.STATUS_FILED


async def test_delete_retried_with_the_same_request_id_is_ok_and_the_id_cannot_delete_another_report(stack):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    a = await flag(stack, turn.reply.name, "a")
    b = await flag(stack, turn.reply.name, "b")
    fbs = stack.feedback()
    d = rid()
    await fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=a.name, request_id=d), metadata=stack.md())
    await fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=a.name, request_id=d), metadata=stack.md())  # retry: OK
    await expect_error(get(stack, a.name), grpc.StatusCode.NOT_FOUND)
    e = await expect_error(fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=b.name, request_id=d), metadata=stack.md()),
                           grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "request_id"
    assert (await get(stack, b.name)).body == "b"
    # Another owner's retry with the same request id is not alice's record.
    await expect_error(fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=a.name, request_id=d),
                                          metadata=stack.md("mallory")), grpc.StatusCode.NOT_FOUND)
    # Without a request id a second delete is NOT_FOUND, as before.
    await expect_error(fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=a.name), metadata=stack.md()),
                       grpc.StatusCode.NOT_FOUND)


async def test_concurrent_delete_retries_with_one_request_id_all_succeed(stack):
    """A client that retries a DeleteFeedback before the first attempt answered (10 at once, one
    request id): every attempt gets OK, the row is gone, nothing else is touched."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    fbs = stack.feedback()
    for _ in range(3):
        a, keep = await flag(stack, turn.reply.name, "a"), await flag(stack, turn.reply.name, "keep")
        d = rid()
        results = await asyncio.gather(*(fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=a.name, request_id=d),
                                                            metadata=stack.md()) for _ in range(10)),
                                       return_exceptions=True)
        assert [r for r in results if isinstance(r, Exception)] == []
        await expect_error(get(stack, a.name), grpc.StatusCode.NOT_FOUND)
        assert (await get(stack, keep.name)).body == "keep"


@pytest.mark.parametrize("url, ok", [
    ("https://", False), ("https://exa mple.com/", False), ("file:///etc/passwd", False),
    ("javascript:alert(1)", False), ("https://x.example/" + "a" * 2048, False), ("http://[::1", False),
    ("https://tracker.example/issues/7", True), ("http://localhost:8080/t/1?x=y#z", True),
])
async def test_issue_url_must_be_an_absolute_http_url_with_a_host(stack, url, ok):
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    fb = await flag(stack, turn.reply.name)
    call = stack.feedback().UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_TRIAGED, issue_url=url),
        update_mask=field_mask_pb2.FieldMask(paths=["status", "issue_url"])), metadata=stack.md())
    if ok:
        assert (await call).issue_url == url
        return
    e = await expect_error(call, grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "feedback.issue_url"
    assert (await get(stack, fb.name)).issue_url == "" and (await get(stack, fb.name)).status == pb.STATUS_OPEN


async def test_a_filed_rows_own_file_url_survives_a_status_change_that_sends_it_back_unchanged(stack):
    """The console's triage form sends status and issue_url together; the markdown sink's file:// URL
    is the service's own and stays valid when sent back unchanged (a new file:// URL is still refused)."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    fb = await flag(stack, turn.reply.name)
    filed = await stack.feedback().FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md())
    assert filed.issue_url.startswith("file://") and filed.status == pb.STATUS_FILED
    mask = field_mask_pb2.FieldMask(paths=["status", "issue_url"])
    reopened = await stack.feedback().UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_OPEN, issue_url=filed.issue_url, etag=filed.etag),
        update_mask=mask), metadata=stack.md())
    assert reopened.status == pb.STATUS_OPEN and reopened.issue_url == filed.issue_url
    e = await expect_error(stack.feedback().UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_TRIAGED, issue_url="file:///etc/passwd"),
        update_mask=mask), metadata=stack.md()), grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "feedback.issue_url"
    assert (await get(stack, fb.name)).issue_url == filed.issue_url
