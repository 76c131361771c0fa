"""The shared helpers of services/common: page tokens bound to their filters, the one etag parser,
the caller's remaining deadline, and the settings' cross-field checks at start-up."""
from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json

import pytest

from services.common import deadlines, pages
from services.common.errors import InvalidArgument
from services.common.etags import Etag, etag, etag_matches, parse_etag
from services.common.settings import CommonSettings, SettingsError, load_settings
from services.feedback.settings import FeedbackSettings
from tests.helpers.principal import as_caller


def _edit(token: str, *, resign: bool = False, **changes) -> str:
    """`token` with its payload edited, keeping its signature (a client's edit) or signed again with the
    process's key (what a leaked key would allow)."""
    payload, _, mac = token.partition(".")
    d = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    edited = base64.urlsafe_b64encode(json.dumps({**d, **changes}).encode()).decode().rstrip("=")
    return f"{edited}.{pages._mac(edited) if resign else mac}"


def test_a_page_token_reads_back_only_with_the_filters_it_was_issued_for():
    filters = {"instance": "instances/a", "status": 1, "since": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)}
    token = pages.issue({"t": "2026-01-02T00:00:00+00:00", "i": "abc"}, filters)
    assert pages.read(token, dict(filters))["i"] == "abc"
    assert pages.read("", filters) is None
    for other in ({**filters, "status": 2}, {"instance": "instances/a"}, "instances"):
        with pytest.raises(InvalidArgument) as e:
            pages.read(token, other)
        assert e.value.field_path == "page_token"
    with pytest.raises(InvalidArgument) as e:  # a client re-binding a token to other filters by hand
        pages.read(_edit(token, f="0" * 16), filters)
    assert "not a token this service issued" in str(e.value)
    with pytest.raises(InvalidArgument) as e:  # even signed with the key: the filters' digest is checked
        pages.read(_edit(token, resign=True, f="0" * 16), filters)
    assert "different filters" in str(e.value)
    for garbage in ("!!!", base64.urlsafe_b64encode(b"[1,2]").decode()):
        with pytest.raises(InvalidArgument):
            pages.read(garbage, filters)


def test_a_page_token_reads_back_only_for_the_caller_it_was_issued_to():
    token = as_caller("alice", lambda: pages.issue({"i": "abc"}, {}))
    assert as_caller("alice", lambda: pages.read(token, {}))["i"] == "abc"
    with pytest.raises(InvalidArgument) as e:
        as_caller("mallory", lambda: pages.read(token, {}))
    assert e.value.field_path == "page_token" and "another caller" in str(e.value)


@pytest.mark.parametrize("value", ["2026-01-01T00:00:00", "0001-01-01T00:00:00+01:00", "yesterday", 17, None])
def test_a_page_tokens_time_must_be_an_aware_time_postgresql_can_hold(value):
    with pytest.raises(InvalidArgument) as e:
        pages.page_token_time(value)
    assert e.value.field_path == "page_token"


def test_page_token_time_reads_aware_times_as_utc():
    assert pages.page_token_time("2026-01-01T01:00:00+01:00") == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_one_etag_format_and_parser_opaque_and_strict():
    e = etag(7, "r1")
    assert e.startswith('"') and e.endswith('"') and "7" not in e  # opaque, not the bare version
    assert parse_etag(e, "x") == Etag(7, "r1") and parse_etag("W/" + e, "x") == Etag(7, "r1")
    for bad in ("", "7", '"7"', "W/7", e[:-1], "seven", "²", '"' + "1" * 19 + '"', etag(1, "r1")[:3] + '"'):
        with pytest.raises(InvalidArgument) as ex:
            parse_etag(bad, "rating.etag")
        assert ex.value.field_path == "rating.etag"
    assert etag_matches("", 3, "r1") and etag_matches(etag(3, "r1"), 3, "r1")
    # Never reused for another state of the key: another version, or the same version of another row.
    assert not etag_matches(etag(2, "r1"), 3, "r1") and not etag_matches(etag(3, "r2"), 3, "r1")
    assert not etag_matches('"3"', 3, "r1") and not etag_matches("3", 3, "r1")


class _Ctx:
    def __init__(self, remaining):
        self._r = remaining

    def time_remaining(self):
        return self._r


def test_the_callers_remaining_deadline_bounds_calls_made_on_its_behalf():
    assert deadlines.caller_remaining(_Ctx(None)) is None
    assert deadlines.caller_remaining(_Ctx(10**8)) is None  # grpc's "no deadline"
    assert deadlines.caller_remaining(_Ctx(-1.0)) == 0.0
    assert deadlines.timeout(5.0) == 5.0  # outside an RPC: the cap
    token = deadlines.enter(_Ctx(1.0))
    try:
        assert 0.9 < deadlines.timeout(5.0) <= 1.0
        assert deadlines.timeout(0.5) == 0.5
    finally:
        deadlines.leave(token)
    assert deadlines.remaining() is None
    token = deadlines.enter(_Ctx(0.0))
    try:
        assert deadlines.timeout(5.0) == deadlines.MIN_TIMEOUT_S  # expired: a real DEADLINE_EXCEEDED follows
    finally:
        deadlines.leave(token)
    assert deadlines.timeout(5.0, remaining_s=2.0) == 2.0


async def test_each_rpc_task_sees_its_own_deadline():
    async def handler(remaining):
        token = deadlines.enter(_Ctx(remaining))
        try:
            await asyncio.sleep(0.01)
            return deadlines.timeout(100.0)
        finally:
            deadlines.leave(token)

    short, none = await asyncio.gather(handler(1.0), handler(None))
    assert short <= 1.0 and none == 100.0


def test_pool_min_above_max_stops_start_up_saying_how_to_fix_it(tmp_path):
    with pytest.raises(SettingsError) as e:
        load_settings(CommonSettings, data_dir=tmp_path, db_pool_min=5, db_pool_max=2)
    assert "AGENTFEEDBACK_DB_POOL_MIN (5) exceeds AGENTFEEDBACK_DB_POOL_MAX (2)" in str(e.value)
    assert "raise the max or lower the min" in str(e.value)


def test_two_jwt_key_sources_stop_start_up(tmp_path):
    with pytest.raises(SettingsError) as e:
        load_settings(CommonSettings, data_dir=tmp_path, jwt_secret="s" * 40, jwt_jwks_url="https://idp/jwks")
    msg = str(e.value)
    assert "AGENTFEEDBACK_JWT_SECRET and AGENTFEEDBACK_JWT_JWKS_URL" in msg and "configure one" in msg
    assert "s" * 40 not in msg  # a secret is never echoed


def test_a_github_tracker_needs_its_repository(tmp_path):
    with pytest.raises(SettingsError) as e:
        load_settings(FeedbackSettings, data_dir=tmp_path, tracker="github", tracker_github_token="ghp_secret")
    assert "AGENTFEEDBACK_FEEDBACK_TRACKER_GITHUB_REPO" in str(e.value) and "ghp_secret" not in str(e.value)
    ok = load_settings(FeedbackSettings, data_dir=tmp_path, tracker="github", tracker_github_repo="acme/agent",
                       tracker_github_token="ghp_secret")
    assert ok.tracker_github_token.get_secret_value() == "ghp_secret" and "ghp_secret" not in repr(ok)


def test_a_bad_secret_value_is_named_but_not_echoed(tmp_path):
    with pytest.raises(SettingsError) as e:
        load_settings(CommonSettings, data_dir=tmp_path, jwt_secret=["not", "a", "string"])
    assert "AGENTFEEDBACK_JWT_SECRET=(secret)" in str(e.value) and "'not'" not in str(e.value)


def test_one_translator_tells_transient_failures_from_permanent_ones():
    import grpc  # noqa: PLC0415

    from services.common.errors import is_transient  # noqa: PLC0415

    for code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED):
        assert is_transient(code), code
    for code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT,
                 grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.FAILED_PRECONDITION):
        assert not is_transient(code), code


def test_otlp_http_statuses_come_from_one_table_like_the_collectors_otlpreceiver():
    from google.rpc import code_pb2  # noqa: PLC0415

    from services.common.errors import http_status  # noqa: PLC0415

    assert http_status(code_pb2.OK) == 200
    assert http_status(code_pb2.UNAVAILABLE) == 503 and http_status(code_pb2.DEADLINE_EXCEEDED) == 503
    assert http_status(code_pb2.RESOURCE_EXHAUSTED) == 429 and http_status(code_pb2.INVALID_ARGUMENT) == 400
    assert http_status(code_pb2.UNAUTHENTICATED) == 401 and http_status(code_pb2.PERMISSION_DENIED) == 403
    assert http_status(code_pb2.INTERNAL) == 500 and http_status(code_pb2.NOT_FOUND) == 500


async def test_the_paging_block_walks_every_row_once_and_stops_a_page_at_the_size_bound(monkeypatch):
    """pages.page: rows fetched after the token's position, a page cut where its protos pass the
    response bound (the next token after the last row kept), the last page without a token."""
    from google.protobuf import wrappers_pb2  # noqa: PLC0415

    rows = [(dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i), f"r{i}") for i in range(7)]
    big = {"r2"}  # one row whose proto alone fills a response: its page ends with it

    async def fetch(after, n):
        return [r for r in rows if after is None or r > after][: n + 1]

    def to_pb(r):
        return wrappers_pb2.StringValue(value="x" * (600 if r[1] in big else 10))

    monkeypatch.setattr(pages, "RESPONSE_MAX_BYTES", 500)
    seen, token, sizes = [], "", []
    for _ in range(10):
        got = await pages.page(token, 3, {"f": 1}, pages.time_id, fetch, to_pb, lambda r: pages.time_id_key(*r))
        seen += [r[1] for r in got.rows]
        sizes.append(len(got.items))
        token = got.next_page_token
        if not token:
            break
    assert seen == [f"r{i}" for i in range(7)] and sizes == [2, 1, 3, 1]
    with pytest.raises(InvalidArgument):
        await pages.page(pages.issue(pages.time_id_key(*rows[0]), {"f": 2}), 3, {"f": 1}, pages.time_id, fetch,
                         to_pb, lambda r: pages.time_id_key(*r))
