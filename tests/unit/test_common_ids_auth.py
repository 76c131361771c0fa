"""Shared helpers: request ids, trace ids, text policy, page tokens, JWT auth."""
from __future__ import annotations

import datetime as dt
import time

import grpc
import jwt
import pytest
from google.protobuf.duration_pb2 import Duration

from services.common.auth import Authenticator, mint_token
from services.common.errors import InvalidArgument, PermissionDenied, Unauthenticated, to_status
from services.common.ids import (
    check_same_request,
    MAX_ARTIFACT_ID,
    check_text,
    decimal_id,
    is_name_under,
    parse_duration,
    parse_name,
    parse_request_id,
    parse_trace_id,
    request_fingerprint,
    timestamp_into,
)
from services.common.clip import truncate
from services.common.pages import decode_page_token, encode_page_token, page_size
from services.common.settings import CommonSettings
from google.rpc import error_details_pb2


@pytest.mark.parametrize("t", [
    dt.datetime(2026, 12, 2, 4, 5, 6, 789012, tzinfo=dt.UTC),
    dt.datetime(1960, 5, 5, 1, 2, 3, 456789, tzinfo=dt.UTC),  # before the epoch: nanos stay >= 0
    dt.datetime(1, 1, 1, tzinfo=dt.UTC),
    dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
    dt.datetime(2026, 6, 1, 12, 0, 0, 1, tzinfo=dt.timezone(dt.timedelta(hours=-7))),
    dt.datetime(2026, 6, 1, 12, 0, 0, 1),  # naive: UTC, as FromDatetime reads it
])
def test_timestamp_into_sets_the_same_instant_as_from_datetime(t):
    from google.protobuf.timestamp_pb2 import Timestamp  # noqa: PLC0415

    got, want = Timestamp(), Timestamp()
    timestamp_into(got, t)
    want.FromDatetime(t)
    assert (got.seconds, got.nanos) == (want.seconds, want.nanos)


def test_request_id_must_be_a_uuid_and_names_the_field():
    with pytest.raises(InvalidArgument) as e:
        parse_request_id("not-a-uuid", "request_id")
    assert e.value.field_path == "request_id"
    assert parse_request_id("", required=False) is None
    with pytest.raises(InvalidArgument):
        parse_request_id("", required=True)


def test_trace_id_rejects_zero_and_bad_length():
    assert parse_trace_id("0AF7651916CD43DD8448EB211C80319C") == "0af7651916cd43dd8448eb211c80319c"
    for bad in ("0" * 32, "abc", "g" * 32):
        with pytest.raises(InvalidArgument):
            parse_trace_id(bad)


def test_text_policy_counts_code_points_and_rejects_nul():
    s = "é" * 4000  # 8000 UTF-8 bytes, 4000 characters: inside a 4000-character limit
    assert check_text(s, "body", 4000) == s
    with pytest.raises(InvalidArgument) as e:
        check_text(s + "x", "feedback.body", 4000)
    assert "4000" in str(e.value) and e.value.field_path == "feedback.body"
    with pytest.raises(InvalidArgument) as e:
        check_text("ok\x00bad", "content")
    assert e.value.reason == "NUL_CHARACTER"
    assert truncate("abcdef", 3) == ("abc", True) and truncate("ab", 3) == ("ab", False)


def test_page_tokens_roundtrip_and_reject_garbage():
    tok = encode_page_token({"t": "2026-01-01T00:00:00Z", "id": "x"})
    assert decode_page_token(tok) == {"t": "2026-01-01T00:00:00Z", "id": "x"}
    with pytest.raises(InvalidArgument):
        decode_page_token("%%%not-base64")
    assert page_size(0) == 50 and page_size(5000) == 1000
    with pytest.raises(InvalidArgument):
        page_size(-1)


def test_resource_names():
    assert parse_name("instances/a1/messages/m2", "instances/{}/messages/{}", "name") == ("a1", "m2")
    with pytest.raises(InvalidArgument):
        parse_name("instances/a1", "instances/{}/messages/{}", "name")


def test_a_decimal_id_has_one_spelling():
    assert [decimal_id(r) for r in ("1", "7", "42", str(MAX_ARTIFACT_ID))] == [1, 7, 42, MAX_ARTIFACT_ID]
    for raw in ("", "0", "01", "007", "+7", "-7", " 7", "7 ", "٣", "1e3", "0x1", str(MAX_ARTIFACT_ID + 1), "9" * 40):
        assert decimal_id(raw) is None, raw


def test_invalid_argument_status_carries_error_info_and_field_violation():
    st = to_status(InvalidArgument("feedback.body", "too long"))
    assert st.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    info = error_details_pb2.ErrorInfo()
    assert st.details[0].Unpack(info) and info.metadata["field"] == "feedback.body"
    br = error_details_pb2.BadRequest()
    assert st.details[1].Unpack(br) and br.field_violations[0].field == "feedback.body"


def test_jwt_scopes_and_expiry(tmp_path):
    settings = CommonSettings(data_dir=tmp_path, jwt_secret="s" * 40)
    auth = Authenticator(settings)
    p = auth.authenticate("Bearer " + mint_token("s" * 40, "alice", ["chat"]))
    assert p.sub == "alice" and "chat" in p.scopes
    with pytest.raises(PermissionDenied):
        p.require("feedback:admin")
    with pytest.raises(Unauthenticated):
        auth.authenticate(None)
    with pytest.raises(Unauthenticated):
        auth.authenticate("Bearer " + mint_token("other-secret-" * 4, "alice", ["chat"]))
    expired = jwt.encode({"sub": "a", "exp": int(time.time()) - 3600}, "s" * 40, "HS256")
    with pytest.raises(Unauthenticated):
        auth.authenticate("Bearer " + expired)


@pytest.mark.parametrize("sub", ["a\x00b", "x\u202egnp.exe", "line\nbreak", "u" * 257])
def test_a_sub_no_owner_field_could_hold_is_unauthenticated_not_a_failed_write(tmp_path, sub):
    # Served, such a sub failed inside the first write: a NUL as INTERNAL from PostgreSQL, a long one as
    # an owner index's row-size error, and past 256 characters turn removals could never be delivered.
    auth = Authenticator(CommonSettings(data_dir=tmp_path, jwt_secret="s" * 40))
    with pytest.raises(Unauthenticated, match="at most 256 characters") as e:
        auth.authenticate("Bearer " + mint_token("s" * 40, sub, ["chat"]))
    assert sub not in str(e.value)


def test_a_sub_of_256_characters_in_any_script_is_accepted(tmp_path):
    auth = Authenticator(CommonSettings(data_dir=tmp_path, jwt_secret="s" * 40))
    for sub in ("é" * 256, "user@example.com", "auth0|5f7c8ec7c33c6c004bbafe82", "用户" * 128):
        assert auth.authenticate("Bearer " + mint_token("s" * 40, sub, ["chat"])).sub == sub


def test_dev_secret_is_generated_once(tmp_path):
    a = Authenticator(CommonSettings(data_dir=tmp_path))
    b = Authenticator(CommonSettings(data_dir=tmp_path))
    tok = mint_token((tmp_path / "jwt-secret").read_text(), "bob")
    assert a.authenticate(f"Bearer {tok}").sub == b.authenticate(f"Bearer {tok}").sub == "bob"
    assert (tmp_path / "jwt-secret").stat().st_mode & 0o077 == 0


def test_request_fingerprint_ignores_the_request_id_and_sees_every_other_field():
    from agentfeedback.traces.v1 import traces_pb2

    def req(rid: str, **kw) -> traces_pb2.SearchTracesRequest:
        # SearchTracesRequest has a map field (serialization order) but no request_id: use page_token.
        return traces_pb2.SearchTracesRequest(page_token=rid, **kw)

    a = request_fingerprint(req("1", attributes={f"k{i}": "v" for i in range(20)}), "page_token")
    b = request_fingerprint(req("2", attributes={f"k{i}": "v" for i in reversed(range(20))}), "page_token")
    assert a == b and len(a) == 32
    assert request_fingerprint(req("1", span_name="x"), "page_token") != request_fingerprint(req("1"), "page_token")
    check_same_request(a, b)
    with pytest.raises(InvalidArgument) as e:  # a record without a fingerprint cannot be told from a reuse
        check_same_request(None, a)
    assert e.value.reason == "REQUEST_ID_REUSED"
    with pytest.raises(InvalidArgument) as e:
        check_same_request(a, request_fingerprint(req("1"), "page_token"))
    assert e.value.metadata["field"] == "request_id" and e.value.reason == "REQUEST_ID_REUSED"


@pytest.mark.parametrize("name", ["instances/abc\n", "instances/abc/messages/def\n"])
def test_a_name_with_a_final_newline_is_invalid_argument(name):
    """`$` matches before a final newline; names, ids and slugs must end where the value ends."""
    pattern = "instances/{}" if name.count("/") == 1 else "instances/{}/messages/{}"
    with pytest.raises(InvalidArgument):
        parse_name(name, pattern, "name")


@pytest.mark.parametrize("name", [
    "instances/a1/messages/m2", "instances/a1/messages/", "instances/a1/messages/m2\n", "instances/a1/messages/m/2",
    "instances/a1/messages/" + "m" * 64, "instances/a1/messages/" + "m" * 65, "instances/b1/messages/m2",
    "instances/a1/messages/m.2", "instances/a1/messagesm2", "xinstances/a1/messages/m2", "",
])
def test_is_name_under_accepts_what_parse_name_accepts_under_that_prefix(name):
    """The agent's per-history-message check: the same verdict as parsing the name and comparing its parent."""
    try:
        want = parse_name(name, "instances/{}/messages/{}", "name")[0] == "a1"
    except InvalidArgument:
        want = False
    assert is_name_under(name, "instances/a1/messages/") is want


def test_page_token_key_is_shared_by_replicas_and_never_needs_a_writable_data_dir(tmp_path):
    """Two replicas with one HS256 secret (or one AGENTFEEDBACK_PAGE_TOKEN_KEY) derive the same key; with
    RS256 and no key nothing is written to the data dir (read-only in a container)."""
    from services.common.auth import page_token_key  # noqa: PLC0415

    a, b = (page_token_key(CommonSettings(data_dir=tmp_path / d, jwt_secret="s" * 40)) for d in ("a", "b"))
    assert a == b and len(a) == 32
    keyed = [page_token_key(CommonSettings(data_dir=tmp_path / d, page_token_key="k" * 40,
                                           jwt_jwks_url="https://idp.example/jwks")) for d in ("c", "d")]
    assert keyed[0] == keyed[1] != a
    ro = tmp_path / "ro"
    assert len(page_token_key(CommonSettings(data_dir=ro, jwt_jwks_url="https://idp.example/jwks"))) == 32
    assert not ro.exists()


@pytest.mark.parametrize("seconds, nanos, why", [
    (5, -1, "same sign"), (-5, 1, "same sign"), (0, 1_000_000_000, "nanos"), (5, -1_000_000_000, "nanos"),
    (315_576_000_001, 0, "seconds"), (-315_576_000_001, 0, "seconds"), (2**63 - 1, 0, "seconds"),
])
def test_parse_duration_refuses_what_duration_proto_forbids_naming_the_field(seconds, nanos, why):
    """duration.proto: seconds within ±315,576,000,000, |nanos| < 1e9, both of one sign when non-zero."""
    with pytest.raises(InvalidArgument) as e:
        parse_duration(Duration(seconds=seconds, nanos=nanos), "ttl")
    assert e.value.field_path == "ttl" and why in e.value.description and "Duration" in e.value.description
    assert len(e.value.message) < 200


def test_parse_duration_accepts_the_range_ends_and_either_sign():
    top = Duration(seconds=315_576_000_000, nanos=999_999_999)
    assert parse_duration(top, "d") == dt.timedelta(seconds=315_576_000_000, microseconds=999_999)
    assert parse_duration(Duration(seconds=-315_576_000_000, nanos=-999_999_999), "d") == -parse_duration(top, "d")
    assert parse_duration(Duration(seconds=4, nanos=500_000_000), "d").total_seconds() == 4.5
    assert parse_duration(Duration(seconds=0, nanos=-1_500), "d") == dt.timedelta(microseconds=-1)
    assert parse_duration(Duration(seconds=-1, nanos=0), "d") == dt.timedelta(seconds=-1)
    assert parse_duration(Duration(), "d") == dt.timedelta(0)
