"""FeedbackService servicer: protos ↔ domain rules ↔ repository. Thin on purpose.

Errors are raised as DomainError subclasses; `services.common.server.ServiceInterceptor` maps them
(and checks the scopes of METHOD_SCOPES before any handler runs). Ownership: every read and write is
filtered by the caller's `sub`; another owner's row is NOT_FOUND and nothing is written.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import re
import time
from collections.abc import Mapping
from typing import Any, NoReturn

import grpc
from google.protobuf import empty_pb2, json_format
from google.rpc import error_details_pb2
from opentelemetry import trace

from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from services.common.auth import (
    ACTOR_METADATA,
    SCOPE_FEEDBACK_ADMIN,
    SCOPE_FEEDBACK_AGENT,
    SCOPE_FEEDBACK_READ,
    SCOPE_FEEDBACK_TRIAGE,
    SCOPE_FEEDBACK_WRITE,
    Authenticator,
    current_principal,
)
from services.common.errors import Aborted, DomainError, FailedPrecondition, InvalidArgument, NotFound, Unavailable
from services.common.ids import (
    check_same_request,
    check_text,
    decode_page_token,
    encode_page_token,
    new_id,
    page_size,
    page_token_int,
    page_token_text,
    parse_name,
    parse_request_id,
    parse_timestamp,
    parse_trace_id,
    request_fingerprint,
)
from services.feedback import domain
from services.feedback.capture import CaptureWorker
from services.feedback.chat_client import ChatClient, ChatUnreachable
from services.feedback.events import emit_created
from services.feedback.repository import Repository
from services.feedback.settings import FeedbackSettings
from services.feedback.tracker import TrackerSink

SERVICE = "agentfeedback.feedback.v1.FeedbackService"
# Method → scope (design.md "Identity and access"; the proto's service comment).
METHOD_SCOPES: dict[str, str | None] = {
    f"/{SERVICE}/{m}": s
    for m, s in {
        "CreateFeedback": SCOPE_FEEDBACK_WRITE,
        "GetFeedback": SCOPE_FEEDBACK_READ,
        "ListFeedback": SCOPE_FEEDBACK_READ,
        "UpdateFeedback": SCOPE_FEEDBACK_TRIAGE,
        "DeleteFeedback": SCOPE_FEEDBACK_WRITE,
        "FileFeedback": SCOPE_FEEDBACK_TRIAGE,
        "PutRating": SCOPE_FEEDBACK_WRITE,
        "DeleteRating": SCOPE_FEEDBACK_WRITE,
        "ListRatings": SCOPE_FEEDBACK_READ,
        "CopyRatings": SCOPE_FEEDBACK_WRITE,
        "GetFeedbackStats": SCOPE_FEEDBACK_ADMIN,
        "ListRecentFeedback": SCOPE_FEEDBACK_ADMIN,
    }.items()
}
# FileFeedback: how long one filer may hold the claim, and how long a concurrent call waits for it.
FILING_LEASE_S = 60.0
FILING_WAIT_S = 30.0
# DeleteFeedback: how long a completed delete's (owner, request_id) is remembered so a retry answers OK.
DELETE_RECORD_RETENTION_S = 24 * 3600.0
# CreateFeedback: how long the request id of a deleted report is remembered so a late retry writes
# nothing (FEEDBACK_DELETED). The same records and pruning as DeleteFeedback's, hence the same time.
CREATE_RECORD_RETENTION_S = DELETE_RECORD_RETENTION_S


class TtlCache:
    """A bounded map whose entries expire `ttl_s` seconds after they were stored (monotonic clock)."""

    def __init__(self, ttl_s: float, max_entries: int = 10_000):
        self._ttl_s = ttl_s
        self._max = max_entries
        self._d: dict[Any, tuple[float, Any]] = {}

    def get(self, key: Any) -> Any | None:
        hit = self._d.get(key)
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, key: Any, value: Any) -> None:
        if self._ttl_s <= 0:
            return
        if len(self._d) >= self._max:
            now = time.monotonic()
            self._d = {k: v for k, v in self._d.items() if v[0] >= now}
            if len(self._d) >= self._max:
                self._d.clear()
        self._d[key] = (time.monotonic() + self._ttl_s, value)


def _enum(value: int, enum_type, field_path: str, allow_zero: bool = True) -> int:
    if value not in enum_type.values() or (value == 0 and not allow_zero):
        raise InvalidArgument(field_path, f"unknown value {value}")
    return value


def _ts(t: dt.datetime | None, into) -> None:
    if t is not None:
        into.FromDatetime(t)


def _parse_time(t: str) -> dt.datetime:
    """A page token's ISO 8601 time, as an aware UTC datetime. ValueError for anything else — naive, or
    outside year 1..9999 once in UTC (PostgreSQL would refuse it: INTERNAL instead of INVALID_ARGUMENT)."""
    parsed = dt.datetime.fromisoformat(t)
    if parsed.tzinfo is None:
        raise ValueError("no UTC offset")
    try:
        return parsed.astimezone(dt.UTC)
    except OverflowError:
        raise ValueError("out of range") from None


_SNAPSHOT_FIELDS = frozenset(pb.Snapshot.DESCRIPTOR.fields_by_name) - {"context", "target_time", "source"}
_CONTEXT_FIELDS = frozenset(pb.FeedbackContext.DESCRIPTOR.fields_by_name)
_TOOL_FIELDS = frozenset(pb.FrozenToolCall.DESCRIPTOR.fields_by_name)
_SPAN_FIELDS = frozenset(pb.FrozenSpan.DESCRIPTOR.fields_by_name)
_TRACE_FIELDS = frozenset({"root_status", "duration_ms"})


def _snapshot_into(d: Mapping[str, Any], out: pb.Snapshot) -> None:
    """Stored snapshot JSON (proto field names) → Snapshot; direct field copies (json_format is ~50x slower)."""
    for k, v in d.items():
        if k in _SNAPSHOT_FIELDS:
            setattr(out, k, v)
    ctx = d.get("context") or {}
    for k, v in ctx.items():
        if k in _CONTEXT_FIELDS:
            setattr(out.context, k, v)
    if d.get("target_time"):
        out.target_time.FromJsonString(d["target_time"])


def _trace_snapshot_into(d: Mapping[str, Any], out: pb.TraceSnapshot) -> None:
    for k in _TRACE_FIELDS & d.keys():
        setattr(out, k, d[k])
    for c in d.get("tool_calls") or ():
        out.tool_calls.add(**{k: v for k, v in c.items() if k in _TOOL_FIELDS})
    for sp in d.get("spans") or ():
        out.spans.add(**{k: v for k, v in sp.items() if k in _SPAN_FIELDS})
    for e in d.get("events") or ():
        ev = out.events.add(name=e.get("name", ""), span_id=e.get("span_id", ""))
        if e.get("time"):
            ev.time.FromJsonString(e["time"])
        if e.get("attributes"):
            ev.attributes.update(e["attributes"])


def feedback_proto(r: Mapping[str, Any], retention_days: int, now: dt.datetime | None = None) -> pb.Feedback:
    """A stored row as the API's Feedback (snapshot and frozen trace parsed from their JSON)."""
    fb = pb.Feedback(
        name=f"feedback/{r['id']}", owner=r["owner"], instance=r["instance"], surface=r["surface"],
        author=r["author"], body=r["body"], sentiment=r["sentiment"], category=r["category"], status=r["status"],
        issue_url=r["issue_url"], etag=domain.etag(r["version"]),
    )
    if r["target_kind"] == "message":
        fb.message = r["message"]
    elif r["target_kind"] == "trace":
        fb.trace_id = r["trace_id"]
    else:
        fb.coding.session = r["coding_session"]
        fb.coding.timeline_seq = r["coding_seq"]
    _snapshot_into(r["snapshot"], fb.snapshot)
    fb.snapshot.source = r["snapshot_source"]
    _trace_snapshot_into(r["trace_snapshot"], fb.trace_snapshot)
    ts = fb.trace_snapshot
    ts.state = r["trace_state"]
    ts.attempts = r["capture_attempts"]
    _ts(r["capture_time"], ts.capture_time)
    if r["trace_state"] == domain.TRACE_PENDING:
        _ts(r["next_capture_at"], ts.next_attempt_time)
    ts.spans_expired = r["trace_state"] == domain.TRACE_EXPIRED or domain.spans_expired(
        r["turn_time"], now or dt.datetime.now(dt.UTC), retention_days)
    _ts(r["create_time"], fb.create_time)
    _ts(r["update_time"], fb.update_time)
    return fb


def rating_proto(r: Mapping[str, Any]) -> pb.Rating:
    out = pb.Rating(
        name=f"ratings/{r['id']}", conversation=r["conversation"], turn_index=r["turn_index"], user=r["owner"],
        scope=r["scope"], aspect=r["aspect"], artifact_id=r["artifact_id"], sentiment=r["sentiment"],
        category=r["category"], note=r["note"], origin=r["origin"], version=r["version"],
        etag=domain.etag(r["version"]), message=r["message"],
    )
    _ts(r["create_time"], out.create_time)
    _ts(r["update_time"], out.update_time)
    return out


def _keyset(token: str, filters_key: str | None = None) -> tuple[dt.datetime, str] | None:
    """A (time, id) keyset position from a page token this service issued; INVALID_ARGUMENT otherwise.
    With `filters_key`, the token must have been issued for the same filters (AIP-158: a token
    reused with other filters is INVALID_ARGUMENT naming `page_token`)."""
    tok = decode_page_token(token)
    if tok is None:
        return None
    if filters_key is not None and tok.get("f") != filters_key:
        raise InvalidArgument("page_token", "was issued for different filters; start again without a page_token")
    try:
        return _parse_time(tok["t"]), page_token_text(tok["i"])
    except (KeyError, TypeError, ValueError):
        raise InvalidArgument("page_token", "is not a token this service issued") from None


def _filters_key(filters: Mapping[str, Any]) -> str:
    """A short digest of a list call's filters, carried in its page tokens."""
    raw = json.dumps(filters, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _update_fingerprint(request: pb.UpdateFeedbackRequest) -> bytes:
    """ids.request_fingerprint without `feedback.etag` (a precondition, not content: a retry may carry
    the etag it re-read)."""
    copy = pb.UpdateFeedbackRequest()
    copy.CopyFrom(request)
    copy.feedback.etag = ""
    return request_fingerprint(copy)


# An etag this service issues (domain.etag: `"<version>"`), its weak form, or the bare version; ASCII
# digits only (str.isdigit also takes '²' or '٣'), at most 18 of them (a PostgreSQL bigint holds 10^18).
_ETAG = re.compile(r'(?:W/)?"([0-9]{1,18})"|([0-9]{1,18})')


def _version_from_etag(etag: str, field_path: str) -> int:
    """The row version an etag names; INVALID_ARGUMENT naming `field_path` for anything else."""
    m = _ETAG.fullmatch(etag.strip())
    if m is None:
        raise InvalidArgument(field_path, "is not an etag this service issued")
    return int(m.group(1) or m.group(2))


class FeedbackServicer(feedback_pb2_grpc.FeedbackServiceServicer):
    def __init__(self, repo: Repository, chat: ChatClient, worker: CaptureWorker | None, sink: TrackerSink,
                 settings: FeedbackSettings, tracer: trace.Tracer, clock=None,
                 authenticator: Authenticator | None = None):
        self._clock = clock or (lambda: dt.datetime.now(dt.UTC))
        # Verifies the agent's actor credential (None: AUTHOR_AGENT is never accepted).
        self._auth = authenticator
        self._repo = repo
        self._chat = chat
        self._worker = worker
        self._sink = sink
        self._s = settings
        self._tracer = tracer
        # (sub, conversation, turn or None) → rated message name: positive chat checks, briefly remembered.
        self._checked = TtlCache(settings.rating_check_cache_s)
        self._ticket_fields = domain.TicketFields(body=settings.tracker_include_body,
                                                  message_text=settings.tracker_include_message_text)

    def _proto(self, row: Mapping[str, Any]) -> pb.Feedback:
        return feedback_proto(row, self._s.trace_retention_days, self._clock())

    def _check_agent_actor(self, context) -> None:
        """AUTHOR_AGENT needs the agent's own credential next to the user's token: metadata
        `x-agentfeedback-actor: Bearer <JWT>` verified like any token, with scope `feedback:agent`.
        PERMISSION_DENIED (reason MISSING_ACTOR_CREDENTIAL / metadata `actor` naming the key) otherwise."""
        value = next((v for k, v in (context.invocation_metadata() or ()) if k == ACTOR_METADATA), None)
        problem = f"author AUTHOR_AGENT needs the agent's service credential in metadata {ACTOR_METADATA!r}"
        if value is not None and self._auth is not None:
            try:
                actor = self._auth.authenticate(value)
            except DomainError:
                problem += " (the one given is not a valid token)"
            else:
                if SCOPE_FEEDBACK_AGENT in actor.scopes:
                    return
                problem += f" (the one given lacks scope {SCOPE_FEEDBACK_AGENT!r})"
        raise DomainError(message=problem, reason="MISSING_ACTOR_CREDENTIAL", code=grpc.StatusCode.PERMISSION_DENIED,
                          metadata={"actor": ACTOR_METADATA, "scope": SCOPE_FEEDBACK_AGENT, "field": "feedback.author"})

    def _replay(self, existing: Mapping[str, Any], fingerprint: bytes) -> pb.Feedback:
        """The first row of a retried CreateFeedback; INVALID_ARGUMENT if the request differs."""
        check_same_request(existing["request_fingerprint"], fingerprint)
        return self._proto(existing)

    @staticmethod
    def _refuse_deleted(deleted: Mapping[str, Any], fingerprint: bytes, request_id: str) -> NoReturn:
        """A retried CreateFeedback whose first result was deleted: INVALID_ARGUMENT naming `request_id`
        if the request differs; else NOT_FOUND naming `feedback/{id}` (ErrorInfo reason
        FEEDBACK_DELETED, ResourceInfo) — the first result no longer exists and no second row is written."""
        check_same_request(deleted["request_fingerprint"], fingerprint)
        name = f"feedback/{deleted['feedback_id']}"
        raise DomainError(
            message=f"{name} not found: the report this request_id created was deleted; a retry writes nothing "
                    "(use a new request_id to report again)",
            reason="FEEDBACK_DELETED", code=grpc.StatusCode.NOT_FOUND,
            metadata={"resource": name, "request_id": request_id},
            details=[error_details_pb2.ResourceInfo(resource_type="type.googleapis.com/agentfeedback.feedback.v1.Feedback",
                                                    resource_name=name, description="deleted by DeleteFeedback")])

    # ------------------------------------------------------------ reports
    async def CreateFeedback(self, request: pb.CreateFeedbackRequest, context) -> pb.Feedback:
        """Create one report (see the proto). Returns the stored row; a retry returns the first row.

        Idempotency (AIP-155, key (owner, request_id)): a retry of the same request returns the first
        row; the same request_id with a different request → INVALID_ARGUMENT naming `request_id`. The
        request id outlives a deleted row: a retry after DeleteFeedback writes nothing and gets
        NOT_FOUND naming `feedback/{id}` (ErrorInfo reason FEEDBACK_DELETED) — the first result no
        longer exists. Such records (owner, request id, deleted id, request fingerprint; no content)
        are kept CREATE_RECORD_RETENTION_S = 24 h, like DeleteFeedback's own; a retry later than that
        creates a new row. Holds for AUTHOR_AGENT rows too (the agent's `record_feedback` calls this RPC).

        `feedback.created` span event: emitted here when the snapshot came from the chat service (the
        trace id is authoritative); for a CLIENT snapshot by the capture worker once the chat service
        has verified it. Once per row either way: the mark is in the row (`created_event_time`)."""
        p = current_principal()
        f = request.feedback
        body = domain.check_body(f.body)
        rid = parse_request_id(request.request_id, "request_id", required=True)
        kind = f.WhichOneof("target")
        if kind is None:
            raise InvalidArgument("feedback.target", "one of message, trace_id or coding is required")
        author = _enum(f.author, pb.Author, "feedback.author") or domain.AUTHOR_USER
        if author == domain.AUTHOR_AGENT:
            self._check_agent_actor(context)
        fingerprint = request_fingerprint(request)
        sentiment = _enum(f.sentiment, pb.Sentiment, "feedback.sentiment")
        category = _enum(f.category, pb.Category, "feedback.category")
        surface = _enum(f.surface, pb.Surface, "feedback.surface")
        instance = ""
        if kind == "message":
            parse_name(f.message, "instances/{}/messages/{}", "feedback.message")
            instance = domain.instance_of(f.message)
        elif kind == "trace_id":
            parse_trace_id(f.trace_id, "feedback.trace_id")
            if not f.instance:
                raise InvalidArgument("feedback.instance", "is required with a trace_id target (the turn's instance)")
            parse_name(f.instance, "instances/{}", "feedback.instance")
            instance = f.instance
        else:
            check_text(f.coding.session, "feedback.coding.session", 256, required=True)
        client_version = request.client_snapshot.context.client_version if request.HasField("client_snapshot") else ""
        check_text(client_version, "client_snapshot.context.client_version", 200)

        # The retry lookup and the chat fetch run together (a retry pays one wasted chat read; a first
        # call saves a round trip).
        lookup = asyncio.ensure_future(self._repo.get_by_request_id(p.sub, rid))

        row: dict[str, Any] = {
            "id": new_id(), "owner": p.sub, "request_id": rid, "target_kind": {"trace_id": "trace"}.get(kind, kind),
            "message": f.message if kind == "message" else "", "coding_session": f.coding.session,
            "coding_seq": f.coding.timeline_seq, "instance": instance, "surface": surface or (
                pb.SURFACE_CODING if kind == "coding" else pb.SURFACE_CHAT),
            "author": author, "body": body, "sentiment": sentiment, "category": category,
            "trace_id": f.trace_id.lower() if kind == "trace_id" else "", "turn_time": None,
            "trace_state": domain.TRACE_NONE, "snapshot": {}, "snapshot_source": domain.SOURCE_NONE,
            "request_fingerprint": fingerprint,
        }
        try:
            if kind != "coding":
                await self._resolve_snapshot(row, request, client_version, p.metadata)
        except BaseException:
            existing = await lookup
            if existing is not None:  # a retry of a request that succeeded: its row, whatever chat says now
                return self._replay(existing, fingerprint)
            deleted = await self._repo.get_deleted_create(p.sub, rid, CREATE_RECORD_RETENTION_S)
            if deleted is not None:  # … or its deletion, whatever chat says now
                self._refuse_deleted(deleted, fingerprint, request.request_id)
            raise
        existing = await lookup
        if existing is not None:
            return self._replay(existing, fingerprint)
        stored, deleted = await self._repo.insert_feedback(row, CREATE_RECORD_RETENTION_S)
        if deleted is not None:
            self._refuse_deleted(deleted, fingerprint, request.request_id)
        assert stored is not None
        if stored["id"] != row["id"]:  # a concurrent call with the same request id stored first
            return self._replay(stored, fingerprint)
        if stored["created_event_time"] is not None:  # trace id authoritative: the event, once (in the row)
            emit_created(self._tracer, stored)
        if self._worker is not None and stored["trace_state"] == domain.TRACE_PENDING:
            self._worker.wake()
        return self._proto(stored)

    async def _resolve_snapshot(self, row: dict[str, Any], request: pb.CreateFeedbackRequest, client_version: str,
                                md) -> None:
        """Fill row's snapshot from the chat service (the caller's token), or from the client snapshot
        when the chat service is unreachable (UNAVAILABLE when there is none)."""
        f = request.feedback
        try:
            if row["target_kind"] == "message":
                target = await self._chat.get_message(f.message, md)
                turn = await self._chat.list_turn(row["instance"], md, trace_id=target.trace_id)
            else:
                turn = await self._chat.list_turn(row["instance"], md, trace_id=row["trace_id"],
                                                  field_path="feedback.instance")
                picked = domain.pick_target(turn)
                if picked is None:
                    raise NotFound(f"{row['instance']} turn {row['trace_id']}")
                target = picked
        except ChatUnreachable:
            if not request.HasField("client_snapshot"):
                raise Unavailable("the chat service cannot be reached and no client_snapshot was given; retry, "
                                  "or send client_snapshot", retry_after_s=1.0, reason="CHAT_UNAVAILABLE") from None
            snap = domain.client_snapshot(json_format.MessageToDict(
                request.client_snapshot, preserving_proto_field_name=True, use_integers_for_enums=True))
            trace_id = row["trace_id"] or snap.get("trace_id", "")
            if trace_id:
                trace_id = parse_trace_id(trace_id, "client_snapshot.trace_id")
                snap["trace_id"] = trace_id
            row.update(snapshot=snap, snapshot_source=domain.SOURCE_CLIENT, trace_id=trace_id,
                       trace_state=domain.TRACE_PENDING)
            if request.client_snapshot.HasField("target_time"):
                row["turn_time"] = parse_timestamp(request.client_snapshot.target_time,
                                                   "client_snapshot.target_time")
            return
        snap = domain.build_snapshot(target, turn, client_version)
        row.update(snapshot=snap, snapshot_source=domain.SOURCE_CHAT, trace_id=target.trace_id,
                   turn_time=target.create_time, trace_state=domain.TRACE_PENDING if target.trace_id else domain.TRACE_NONE)
        if row["target_kind"] == "trace":
            row["message"] = target.name

    async def GetFeedback(self, request: pb.GetFeedbackRequest, context) -> pb.Feedback:
        """The caller's report `feedback/{id}`; NOT_FOUND when unknown or another owner's."""
        p = current_principal()
        (fid,) = parse_name(request.name, "feedback/{}", "name")
        row = await self._repo.get_feedback(fid, p.sub)
        if row is None:
            raise NotFound(request.name)
        return self._proto(row)

    async def ListFeedback(self, request: pb.ListFeedbackRequest, context) -> pb.ListFeedbackResponse:
        """The caller's reports, newest first, filtered; keyset page tokens on (create_time, id), bound
        to the filters. INVALID_ARGUMENT naming the field: a timestamp outside google.protobuf.Timestamp's
        range, start_time after end_time, a page_token issued for other filters."""
        p = current_principal()
        size = page_size(request.page_size, 50, 1000)
        if request.instance:
            parse_name(request.instance, "instances/{}", "instance")
        filters = {
            "instance": request.instance,
            "status": _enum(request.status, pb.Status, "status"),
            "author": _enum(request.author, pb.Author, "author"),
            "sentiment": _enum(request.sentiment, pb.Sentiment, "sentiment"),
            "category": _enum(request.category, pb.Category, "category"),
            "start_time": parse_timestamp(request.start_time, "start_time") if request.HasField("start_time") else None,
            "end_time": parse_timestamp(request.end_time, "end_time") if request.HasField("end_time") else None,
            "text": check_text(request.text, "text", 200),
            "trace_id": parse_trace_id(request.trace_id, "trace_id") if request.trace_id else "",
        }
        if filters["start_time"] and filters["end_time"] and filters["start_time"] > filters["end_time"]:
            raise InvalidArgument("start_time", "must not be after end_time")
        fkey = _filters_key(filters)
        after = _keyset(request.page_token, fkey)
        rows = await self._repo.list_feedback(p.sub, filters, after, size + 1)
        out = pb.ListFeedbackResponse(feedback=[self._proto(r) for r in rows[:size]])
        if len(rows) > size:
            last = rows[size - 1]
            out.next_page_token = encode_page_token({"t": last["create_time"].isoformat(), "i": last["id"], "f": fkey})
        return out

    async def UpdateFeedback(self, request: pb.UpdateFeedbackRequest, context) -> pb.Feedback:
        """Status / issue_url change with field mask + etag (see the proto for the errors)."""
        p = current_principal()
        (fid,) = parse_name(request.feedback.name, "feedback/{}", "feedback.name")
        paths = domain.check_update_mask(request.update_mask.paths)
        new = request.feedback
        if "status" in paths:
            _enum(new.status, pb.Status, "feedback.status", allow_zero=False)
        rid = parse_request_id(request.request_id, "request_id")
        fingerprint = _update_fingerprint(request) if rid is not None else None
        retention = self._s.trace_retention_days

        def decide(cur, earlier):
            if earlier is not None:  # a retry: answer with the report as it is, write nothing
                if earlier["feedback_id"] != fid:
                    raise InvalidArgument("request_id", "was already used to update another report",
                                          reason="REQUEST_ID_REUSED")
                check_same_request(earlier["request_fingerprint"], fingerprint)
                return None
            if not domain.etag_matches(new.etag, cur["version"]):
                raise Aborted(f"etag {new.etag} is stale; the current one is {domain.etag(cur['version'])}",
                              current=feedback_proto(cur, retention, self._clock()))
            status = new.status if "status" in paths else cur["status"]
            url = new.issue_url if "issue_url" in paths else cur["issue_url"]
            if url != cur["issue_url"]:
                # Checked only when it changes: the markdown sink's own file:// URL stays valid when a
                # client (the console) sends the row's issue_url back unchanged with a status change.
                domain.check_issue_url(url)
            domain.check_transition(cur["status"], status)
            if status == cur["status"] and url == cur["issue_url"]:
                return None
            return status, url

        row = await self._repo.update_feedback(fid, p.sub, decide, rid, fingerprint, DELETE_RECORD_RETENTION_S)
        if row is None:
            raise NotFound(request.feedback.name)
        return self._proto(row)

    async def DeleteFeedback(self, request: pb.DeleteFeedbackRequest, context) -> empty_pb2.Empty:
        """Hard delete of the caller's report; NOT_FOUND when absent.

        With a `request_id`: a retry after the delete succeeded returns OK (the (owner, request_id,
        id) of completed deletes — no content — is kept DELETE_RECORD_RETENTION_S = 24 h); the same
        request_id naming another report → INVALID_ARGUMENT naming `request_id`. Every delete also keeps
        the request id that created the report, as long (see CreateFeedback: FEEDBACK_DELETED)."""
        p = current_principal()
        (fid,) = parse_name(request.name, "feedback/{}", "name")
        rid = parse_request_id(request.request_id, "request_id")
        deleted, earlier = await self._repo.delete_feedback(fid, p.sub, rid, DELETE_RECORD_RETENTION_S)
        if earlier is not None:  # a delete's content is the id it names
            check_same_request(earlier.encode(), fid.encode())
            return empty_pb2.Empty()
        if not deleted:
            raise NotFound(request.name)
        return empty_pb2.Empty()

    async def FileFeedback(self, request: pb.FileFeedbackRequest, context) -> pb.Feedback:
        """Render the ticket draft, send it to the sink, store its URL, set FILED — once.

        Concurrent or repeated calls: one caller takes the filing claim (a leased column); the others
        wait for its result and return the same stored URL. While the report's trace snapshot is PENDING
        it first waits up to `filing_capture_wait_s` (default 10 s) for the capture worker, so the ticket
        carries the turn's tool calls. FAILED_PRECONDITION for a DISMISSED report; UNAVAILABLE when the
        tracker cannot be reached (nothing stored; safe to retry).
        """
        p = current_principal()
        (fid,) = parse_name(request.name, "feedback/{}", "name")
        parse_request_id(request.request_id, "request_id")
        deadline = time.monotonic() + FILING_WAIT_S
        capture_deadline = time.monotonic() + self._s.filing_capture_wait_s
        woke = False
        while True:
            row = await self._repo.get_feedback(fid, p.sub)
            if row is None:
                raise NotFound(request.name)
            if row["issue_url"]:
                return self._proto(row)
            if (row["snapshot"] or {}).get("unverified"):
                raise FailedPrecondition("the chat service did not confirm this report's anchor for its owner; "
                                         "an unverified report is not filed", reason="ANCHOR_UNVERIFIED")
            domain.check_transition(row["status"], domain.STATUS_FILED)
            if row["trace_state"] == domain.TRACE_PENDING and time.monotonic() < capture_deadline:
                # The turn's tool calls are not frozen yet (a report filed right after it was made): let
                # the capture worker look now, and file once it did (or when the wait is over).
                if self._worker is not None and not woke:
                    self._worker.wake()
                    woke = True
                await asyncio.sleep(0.1)
                continue
            claimed = await self._repo.claim_filing(fid, p.sub, FILING_LEASE_S)
            if claimed is not None:
                break
            if time.monotonic() > deadline:
                raise Aborted("another FileFeedback call is filing this report; retry", reason="FILING_IN_PROGRESS")
            await asyncio.sleep(0.05)
        draft = json_format.MessageToDict(self._proto(claimed), preserving_proto_field_name=True,
                                          use_integers_for_enums=True)
        title, body = domain.render_ticket(draft, self._ticket_fields)
        try:
            url = await self._sink.file(fid, title, body)
        except BaseException:
            await self._repo.release_filing(fid, p.sub)
            raise
        row = await self._repo.finish_filing(fid, p.sub, url)
        if row is None:
            raise NotFound(request.name)
        return self._proto(row)

    # ------------------------------------------------------------ ratings
    async def _rated_message(self, sub: str, scopes: frozenset[str], conversation: str, turn_index: int, scope: int,
                             md) -> str:
        """Ownership / target check at the chat service (caller's token): MESSAGE scope needs a stored
        non-empty assistant message in that turn (its name is returned); other scopes need the
        conversation to be the caller's. NOT_FOUND otherwise; UNAVAILABLE when chat is down.

        A positive answer is remembered for `rating_check_cache_s` seconds per (caller, the token's
        scopes, conversation, turn), so a burst of clicks on one turn asks the chat service once, and a
        token the chat service would refuse (no `chat` scope) never rides on another token's answer;
        negative answers are never cached. Trade-off: a turn deleted in that window can still be rated
        for those seconds."""
        key = (sub, scopes, conversation, turn_index if scope == domain.SCOPE_MESSAGE else None)
        hit = self._checked.get(key)
        if hit is not None:
            return hit
        name = await self._check_rated(conversation, turn_index, scope, md)
        self._checked.put(key, name)
        return name

    async def _check_rated(self, conversation: str, turn_index: int, scope: int, md) -> str:
        try:
            if scope == domain.SCOPE_MESSAGE:
                turn = await self._chat.list_turn(conversation, md, turn_index=turn_index,
                                                  field_path="rating.conversation")
                reply = next((m for m in turn if m.role == "ROLE_ASSISTANT" and m.content.strip()), None)
                if reply is None:
                    raise NotFound(f"{conversation} turn {turn_index} assistant message", reason="NO_ASSISTANT_MESSAGE")
                return reply.name
            await self._chat.check_instance(conversation, md, "rating.conversation")
            return ""
        except ChatUnreachable:
            raise Unavailable("the chat service cannot be reached to check the rated conversation",
                              retry_after_s=1.0, reason="CHAT_UNAVAILABLE") from None

    async def PutRating(self, request: pb.PutRatingRequest, context) -> pb.Rating:
        """Idempotent upsert / strict CAS of the caller's rating (see the proto)."""
        p = current_principal()
        r = request.rating
        parse_name(r.conversation, "instances/{}", "rating.conversation")
        key = domain.RatingKey(r.conversation, r.turn_index, _enum(r.scope, pb.RatingScope, "rating.scope"),
                               r.aspect, r.artifact_id)
        domain.check_rating(key, r.note, self._s.rating_note_max_bytes)
        sentiment = _enum(r.sentiment, pb.RatingSentiment, "rating.sentiment")
        category = _enum(r.category, pb.Category, "rating.category")
        mask = domain.rating_mask(request.update_mask.paths)
        rid = parse_request_id(request.request_id, "request_id")
        fingerprint = request_fingerprint(request) if rid is not None else None
        version = _version_from_etag(r.etag, "rating.etag") if r.etag else None
        message = await self._rated_message(p.sub, p.scopes, r.conversation, r.turn_index, key.scope, p.metadata)
        dbkey = (key.conversation, key.turn_index, p.sub, key.scope, key.aspect, key.artifact_id)
        if version is None:
            got = await self._repo.upsert_rating(dbkey, sentiment, category, r.note, mask, new_id(), message,
                                                 rid, fingerprint)
        else:
            got = await self._repo.cas_rating(dbkey, sentiment, category, r.note, mask, message, version,
                                              rid, fingerprint)
        if got["id"] is not None:
            return rating_proto(got)
        cur = await self._repo.get_rating(dbkey)
        if got["seen"]:  # a retry: nothing written, the rating as it is now (AIP-155)
            check_same_request(got["prior_fingerprint"], fingerprint)
            if cur is None:
                raise NotFound(f"rating {r.conversation} turn {r.turn_index} {r.aspect} (deleted since this put)")
            return rating_proto(cur)
        if version is None:  # a no-op: the row as it was
            assert cur is not None
            return rating_proto(cur)
        if cur is None:
            raise NotFound(f"rating {r.conversation} turn {r.turn_index} {r.aspect}")
        raise Aborted(f"etag {r.etag} is stale; the current one is {domain.etag(cur['version'])}",
                      current=rating_proto(cur))

    async def DeleteRating(self, request: pb.DeleteRatingRequest, context) -> empty_pb2.Empty:
        """Delete the caller's rating; deleting an absent (or foreign) rating succeeds and changes nothing."""
        p = current_principal()
        (rid,) = parse_name(request.name, "ratings/{}", "name")
        await self._repo.delete_rating(rid, p.sub)
        return empty_pb2.Empty()

    async def ListRatings(self, request: pb.ListRatingsRequest, context) -> pb.ListRatingsResponse:
        """The caller's ratings of one conversation (optionally one turn), by turn, scope, aspect."""
        p = current_principal()
        parse_name(request.conversation, "instances/{}", "conversation")
        size = page_size(request.page_size, 100, 1000)
        turn = request.turn_index if request.HasField("turn_index") else None
        filters = f"{request.conversation}|{'' if turn is None else turn}"
        tok = decode_page_token(request.page_token)
        key = tok.get("k") if tok else None
        if tok is not None:
            if not (isinstance(key, list) and len(key) == 4):
                raise InvalidArgument("page_token", "is not a token this service issued")
            if tok.get("f") != filters:  # AIP-158: a token is bound to its conversation and filter
                raise InvalidArgument("page_token", "was issued for another conversation or turn filter")
            # (turn_index int4, scope smallint, aspect, artifact_id), each checked before it reaches SQL.
            key = [page_token_int(key[0], -(2**31), 2**31 - 1), page_token_int(key[1], 0, 2**15 - 1),
                   page_token_text(key[2]), page_token_text(key[3])]
        rows = await self._repo.list_ratings(p.sub, request.conversation, turn, key, size + 1)
        out = pb.ListRatingsResponse(ratings=[rating_proto(r) for r in rows[:size]])
        if len(rows) > size:
            last = rows[size - 1]
            out.next_page_token = encode_page_token(
                {"k": [last["turn_index"], last["scope"], last["aspect"], last["artifact_id"]], "f": filters})
        return out

    async def CopyRatings(self, request: pb.CopyRatingsRequest, context) -> pb.CopyRatingsResponse:
        """Copy the caller's ratings of turns ≤ through_turn_index onto a fork, marked BRANCH_COPY.
        A MESSAGE rating is copied only onto a fork turn that has a stored non-empty assistant message
        (design.md "Ratings"), and then names that message. Idempotent (an existing rating on the fork is
        kept). NOT_FOUND unless both are the caller's; UNAVAILABLE when the chat service is down."""
        p = current_principal()
        parse_name(request.source_conversation, "instances/{}", "source_conversation")
        parse_name(request.target_conversation, "instances/{}", "target_conversation")
        if request.source_conversation == request.target_conversation:
            raise InvalidArgument("target_conversation", "must differ from source_conversation")
        if request.through_turn_index < 0:
            raise InvalidArgument("through_turn_index", "must not be negative")
        try:
            await self._chat.check_instance(request.source_conversation, p.metadata, "source_conversation")
            replies = await self._chat.replies_through(request.target_conversation, p.metadata,
                                                       request.through_turn_index, "target_conversation")
        except ChatUnreachable:
            raise Unavailable("the chat service cannot be reached", retry_after_s=1.0) from None
        n = await self._repo.copy_ratings(p.sub, request.source_conversation, request.target_conversation,
                                          request.through_turn_index, replies)
        return pb.CopyRatingsResponse(copied_count=n)

    # ------------------------------------------------------------ statistics
    async def GetFeedbackStats(self, request: pb.GetFeedbackStatsRequest, context) -> pb.FeedbackStats:
        """Counts over the window (UTC days ending today), every owner, USER-origin ratings only."""
        days = domain.check_window_days(request.window_days)
        today = self._clock().date()
        start_day = today - dt.timedelta(days=days - 1)
        since = dt.datetime.combine(start_day, dt.time(), dt.UTC)
        st = await self._repo.stats(since)
        out = pb.FeedbackStats()
        for a in st["aspects"]:
            out.aspects.add(scope=a["scope"], aspect=a["aspect"], positive=a["positive"], neutral=a["neutral"],
                            negative=a["negative"])
            out.total_ratings += a["total"]  # ratings without a sentiment (a note only) count too
            out.negative_ratings += a["negative"]
        for c in st["categories"]:
            out.categories.add(category=c["category"], count=c["count"])
            out.total_reports += c["count"]
        rows = [dict(r) for r in st["rating_trend"]] + [dict(r) for r in st["report_trend"]]
        for d in domain.fill_trend(rows, today, days):
            out.trend.add(**d)
        return out

    async def ListRecentFeedback(self, request: pb.ListRecentFeedbackRequest, context) -> pb.ListRecentFeedbackResponse:
        """Operator feed: USER ratings and reports of every owner, newest first, filtered, paged.

        Rating-only filters (scope, aspect, rating sentiment) leave reports out; `negative_only` keeps
        NEGATIVE ratings and BAD reports; `text` matches the note / the body (case-insensitive). A page
        token is bound to the filters it was issued for (other filters → INVALID_ARGUMENT `page_token`)."""
        size = page_size(request.page_size, 50, 500)
        f = {
            "scope": _enum(request.scope, pb.RatingScope, "scope"),
            "aspect": request.aspect,
            "sentiment": _enum(request.sentiment, pb.RatingSentiment, "sentiment"),
            "category": _enum(request.category, pb.Category, "category"),
            "text": check_text(request.text, "text", 200),
            "negative_only": request.negative_only,
        }
        if f["aspect"] and not domain.ASPECT_SLUG.match(f["aspect"]):
            raise InvalidArgument("aspect", "must be a slug [a-z][a-z0-9_]{0,63}")
        fkey = _filters_key(f)
        after = _keyset(request.page_token, fkey)
        rating_only = bool(f["scope"] or f["aspect"] or f["sentiment"])
        ratings, reports = await self._repo.recent(f, after, size + 1, ratings=True, reports=not rating_only)
        merged = sorted([(r["update_time"], r["id"], "r", r) for r in ratings]
                        + [(r["create_time"], r["id"], "f", r) for r in reports],
                        key=lambda x: (x[0], x[1]), reverse=True)
        out = pb.ListRecentFeedbackResponse()
        for t, _i, kind, r in merged[:size]:
            if kind == "r":
                out.items.add(rating=rating_proto(r))
            else:
                out.items.add(feedback=self._proto(r))
        if len(merged) > size:
            t, i, _k, _r = merged[size - 1]
            out.next_page_token = encode_page_token({"t": t.isoformat(), "i": i, "f": fkey})
        return out
