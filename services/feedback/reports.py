"""Reports, the use case (like `services/chat/turn.py`): create, get, list, update, delete, file.

Inputs arrive validated into the model by the codec (`ReportDraft`, `Change`, `ReportFilter`);
outputs are `model.report.Report`s; no proto is built here. Ownership: every read and write is filtered by the caller's `sub`; another owner's
report is NOT_FOUND and nothing is written. The life of a report: docs/architecture.md.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from collections.abc import Callable
from dataclasses import replace

from opentelemetry import trace

from services.common import ledger
from services.common.auth import ACTOR_METADATA, SCOPE_FEEDBACK_AGENT, SCOPE_FEEDBACK_TOOL, Authenticator, Principal
from services.common.errors import (
    Aborted,
    DomainError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from services.common.etags import etag_matches
from services.common.ids import check_same_request, new_id, parse_trace_id
from services.feedback import audit, domain
from services.feedback.chat_client import ChatClient, ChatUnreachable
from services.feedback.claims import check_holder
from services.feedback.events import emit_created
from services.feedback.model.enums import AuditAction, Author, Status
from services.feedback.model.report import (
    Anchor,
    Change,
    CreatedEvent,
    DeletedCreate,
    NewReport,
    OverCap,
    Report,
    ReportDraft,
    ReportFilter,
    Snapshot,
    Stored,
)
from services.feedback.report_cap import ReportCap
from services.feedback.repository.reports import ReportStore
from services.feedback.ticket import TicketFields, check_server_ids, render_ticket
from services.feedback.tracker import TrackerSink
from services.feedback.workspace_freeze import freeze, unfrozen

# FileFeedback: how long one filer may hold the claim, and how long a concurrent call waits for it.
FILING_LEASE_S = 60.0
FILING_WAIT_S = 30.0
# How long a request id of a completed delete / update / create-then-deleted is remembered (AIP-155):
# the request ledger's one retention (services/common/ledger.py).
REQUEST_RETENTION_S = ledger.RETENTION_S


def _earlier_answer(d: ReportDraft, earlier: Stored | DeletedCreate | None) -> Report | None:
    """The one retry decision of CreateFeedback: what an earlier call with `d`'s request id left. None:
    nothing (this call is the first); its report (a retry gets it); its report's deletion → NOT_FOUND
    (FEEDBACK_DELETED). Another request under the same request id → INVALID_ARGUMENT (REQUEST_ID_REUSED)."""
    if earlier is None:
        return None
    check_same_request(earlier.fingerprint, d.fingerprint)
    if isinstance(earlier, DeletedCreate):
        raise _deleted(earlier.feedback_id, d.request_id)
    return earlier.report


def _deleted(feedback_id: str, request_id: uuid.UUID) -> NotFound:
    name = f"feedback/{feedback_id}"
    return NotFound(name, reason="FEEDBACK_DELETED",
                    explanation="the report this request_id created was deleted; a retry writes nothing "
                                "(use a new request_id to report again)",
                    resource_type="type.googleapis.com/agentfeedback.feedback.v1.Feedback",
                    description="deleted by DeleteFeedback", request_id=str(request_id))


class Reports:
    """The report use cases over one repository, the chat service and the ticket sink."""

    def __init__(self, repo: ReportStore, chat: ChatClient, sink: TrackerSink, tracer: trace.Tracer,
                 ticket_fields: TicketFields, filing_capture_wait_s: float, wake_worker: Callable[[], None] | None,
                 authenticator: Authenticator | None = None):
        self._repo = repo
        self._chat = chat
        self._sink = sink
        # Optional `(author)` hook called once per report stored (the service's metrics).
        self.on_created: Callable[[Author], None] | None = None
        # The cap on stored reports (report_cap.py); None: no cap. A retry never meets it.
        self.cap: ReportCap | None = None
        self._tracer = tracer
        self._fields = ticket_fields
        self._capture_wait_s = filing_capture_wait_s
        self._wake = wake_worker
        self._auth = authenticator  # None: AUTHOR_AGENT is never accepted

    def _tool_actor(self, actor: str | None) -> bool:
        """True when `actor` (metadata `x-agentfeedback-actor`) is a valid token with scope
        `feedback:tool`: the MCP server's own credential."""
        if actor is None or self._auth is None:
            return False
        try:
            return SCOPE_FEEDBACK_TOOL in self._auth.authenticate(actor).scopes
        except DomainError:
            return False

    def _check_agent_actor(self, actor: str | None) -> None:
        """AUTHOR_AGENT needs the agent's own credential next to the user's token: metadata
        `x-agentfeedback-actor: Bearer <JWT>` verified like any token, with scope `feedback:agent`.
        PERMISSION_DENIED (reason MISSING_ACTOR_CREDENTIAL, metadata `actor` naming the key) otherwise."""
        problem = f"author AUTHOR_AGENT needs the agent's service credential in metadata {ACTOR_METADATA!r}"
        if actor is not None and self._auth is not None:
            try:
                principal = self._auth.authenticate(actor)
            except DomainError:
                problem += " (the one given is not a valid token)"
            else:
                if SCOPE_FEEDBACK_AGENT in principal.scopes:
                    return
                problem += f" (the one given lacks scope {SCOPE_FEEDBACK_AGENT!r})"
        raise PermissionDenied(SCOPE_FEEDBACK_AGENT, problem, reason="MISSING_ACTOR_CREDENTIAL", actor=ACTOR_METADATA,
                               field="feedback.author")

    async def create(self, p: Principal, d: ReportDraft) -> Report:
        """Store one report; a retry returns the first one (AIP-155, key (owner, request_id)).

        The same request_id with a different request → INVALID_ARGUMENT naming `request_id`. The
        request id outlives a deleted report: a retry after DeleteFeedback writes nothing and gets
        NOT_FOUND naming `feedback/{id}` (reason FEEDBACK_DELETED), for REQUEST_RETENTION_S = 24 h; later
        it creates a new report. The snapshot comes from the chat service (the caller's token); when it
        cannot be reached, from `client_snapshot` (UNAVAILABLE when there is none). An owner who has
        `max_reports_per_owner` reports stored gets RESOURCE_EXHAUSTED (STORED_REPORTS_EXCEEDED, never
        for a retry; `_insert`). `feedback.created`
        is emitted here when the trace id is the chat service's (else by the capture worker once it
        verified the client's), once per report either way: the mark is in the row."""
        if d.author == Author.AGENT:
            self._check_agent_actor(d.actor)
        # The retry lookup and the chat fetch run together (a retry pays one wasted chat read; a first
        # call saves a round trip).
        lookup = asyncio.ensure_future(self._repo.get_by_request_id(p.sub, d.request_id))
        # Read when the call ends early (cancelled, database gone): no "exception never retrieved" logged.
        lookup.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            anchor, snapshot, turn_time = await self._snapshot(d, p.metadata)
        except Exception:
            # A retry of a request that was answered gets that answer, whatever the chat service says now.
            earlier = await lookup or await self._repo.get_deleted_create(p.sub, d.request_id, REQUEST_RETENTION_S)
            if (answer := _earlier_answer(d, earlier)) is not None:
                return answer
            raise
        except BaseException:  # cancelled: nothing more is read
            lookup.cancel()
            raise
        if (answer := _earlier_answer(d, await lookup)) is not None:
            return answer
        plan = domain.capture_plan(snapshot.source, anchor.trace_id)
        new = NewReport(
            id=new_id(), owner=p.sub, request_id=d.request_id, fingerprint=d.fingerprint, anchor=anchor,
            surface=d.surface, author=d.author, body=d.body, sentiment=d.sentiment, category=d.category,
            snapshot=snapshot, turn_time=turn_time, trace_state=plan.trace_state, copy_sibling=plan.copy_sibling,
            capture_due=plan.capture_due, verify_due=plan.verify_due, authoritative=plan.authoritative,
            context_trace_id=d.context_trace_id,
        )
        got = await self._insert(new)
        if isinstance(got, DeletedCreate) or got.report.id != new.id:  # a concurrent call stored first
            return _earlier_answer(d, got)
        if self.on_created is not None:
            self.on_created(got.report.author)
        if got.event_due:
            r = got.report
            emit_created(self._tracer, CreatedEvent(r.id, r.anchor.trace_id, r.sentiment, r.category, r.author,
                                                    r.anchor.message, r.anchor.instance))
        if self._wake is not None and got.report.trace.state == domain.TRACE_PENDING:
            self._wake()
        return got.report

    async def _insert(self, new: NewReport) -> Stored | DeletedCreate:
        """The insert, under the stored-report cap when the owner may be near it (report_cap.py):
        RESOURCE_EXHAUSTED (STORED_REPORTS_EXCEEDED) when they already have `cap` reports, unless this
        request id stored its report meanwhile (then that one)."""
        cap = self.cap
        limit = cap.limit_for(new.owner) if cap is not None else None
        if cap is None or limit is None:  # the common path: one statement, no lock
            return await self._repo.insert_report(new, REQUEST_RETENTION_S)
        async with cap.queued(new.owner):
            got = await self._repo.insert_report(new, REQUEST_RETENTION_S, limit)
        if isinstance(got, OverCap):
            raise cap.refusal(new.owner)
        if isinstance(got, Stored) and got.counted is not None:
            cap.counted(new.owner, got.counted + 1)
        return got

    async def _snapshot(self, d: ReportDraft, md) -> tuple[Anchor, Snapshot, dt.datetime | None]:
        """The anchor completed, the snapshot and the turn's time: from the chat service, or from the
        client's snapshot when the chat service is unreachable (UNAVAILABLE when there is none)."""
        a = d.anchor
        if a.kind == "coding":
            return a, Snapshot(), None
        try:
            if a.kind == "message":  # the message and its turn in one call
                turn = await self._chat.list_turn(a.instance, md, turn_of_message=a.message, field_path="feedback.message")
                picked = next((m for m in turn if m.name == a.message), None)
                if picked is None:  # the chat service lists no turn for a message it does not know
                    raise NotFound(a.message)
                target = picked
            else:
                turn = await self._chat.list_turn(a.instance, md, trace_id=a.trace_id, field_path="feedback.instance")
                picked = domain.pick_target(turn)
                if picked is None:
                    raise NotFound(f"{a.instance} turn {a.trace_id}")
                target = picked
        except ChatUnreachable as e:
            if d.client_snapshot is None:
                raise e.unavailable("to read the quoted turn, and no client_snapshot was given (or send one)") from None
            snap = d.client_snapshot if d.component is None else replace(d.client_snapshot, component=unfrozen(d.component))
            trace_id = a.trace_id or snap.trace_id
            if trace_id:
                trace_id = parse_trace_id(trace_id, "client_snapshot.trace_id")
            return replace(a, trace_id=trace_id), replace(snap, trace_id=trace_id), snap.target_time
        snap = domain.build_snapshot(target, turn, d.client_version)
        if d.component is not None:  # the component as the turn left it, frozen with the report (issue 23)
            try:
                ws = await self._chat.get_workspace(a.instance, snap.turn_index, md, "feedback.component")
                snap = replace(snap, component=freeze(ws, d.component))
            except ChatUnreachable:
                snap = replace(snap, component=unfrozen(d.component))
        message = target.name if a.kind == "trace" else a.message
        return replace(a, trace_id=target.trace_id, message=message), snap, target.create_time

    async def get(self, p: Principal, fid: str) -> Report:
        """The caller's report; NOT_FOUND when unknown or another owner's."""
        r = await self._repo.get_report(fid, p.sub)
        if r is None:
            raise NotFound(f"feedback/{fid}")
        return r

    async def list(self, p: Principal, f: ReportFilter, after: tuple[dt.datetime, str] | None,
                   size: int) -> list[Report]:
        """The caller's reports matching `f`, newest first (create_time, id) after the keyset position
        `after`; at most `size` + 1 (one more tells the caller there is a next page)."""
        return await self._repo.list_reports(p.sub, f, after, size + 1)

    async def update(self, p: Principal, fid: str, c: Change) -> Report:
        """Status / issue_url change under an etag precondition (AIP-154). A retry with the same
        request id answers with the report as it is and writes nothing; the same request id on another
        report → INVALID_ARGUMENT (REQUEST_ID_REUSED). ABORTED (`domain.Stale`, carrying the current
        report) on a stale etag; FAILED_PRECONDITION on a forbidden status move. A change is recorded in
        the audit trail as UPDATE, or RESOLVE when the MCP server says so and proves it with its own
        credential (`_tool_actor`: a triage client setting the tool header alone is recorded UPDATE)."""
        action = c.action
        if action == AuditAction.RESOLVE_FEEDBACK and not self._tool_actor(c.actor):
            action = AuditAction.UPDATE_FEEDBACK

        def decide(cur: Report, earlier) -> tuple[Status, str] | None:
            if earlier is not None:  # a retry: answer with the report as it is, write nothing
                if earlier.resource != fid:
                    raise InvalidArgument("request_id", "was already used to update another report",
                                          reason="REQUEST_ID_REUSED")
                check_same_request(earlier.fingerprint, c.fingerprint)
                return None
            check_holder(cur.claim, p.sub, c.session)
            if not etag_matches(c.etag, cur.version, cur.id):
                raise domain.Stale(c.etag, cur)
            status = c.status if c.status is not None else cur.status
            url = c.issue_url if c.issue_url is not None else cur.issue_url
            if url != cur.issue_url:
                # Checked only when it changes: the markdown sink's own file:// URL stays valid when a
                # client (the console) sends the report's issue_url back unchanged with a status change.
                domain.check_issue_url(url)
            domain.check_transition(cur.status, status)
            if status == cur.status and url == cur.issue_url:
                return None
            return status, url

        r = await self._repo.update_report(fid, p.sub, decide, c.request_id, c.fingerprint, REQUEST_RETENTION_S,
                                           lambda before, after: audit.entry(p, action, fid, p.sub, before, after))
        if r is None:
            raise NotFound(f"feedback/{fid}")
        return r

    async def delete(self, p: Principal, fid: str, request_id: uuid.UUID | None) -> None:
        """Hard delete; NOT_FOUND when absent. With a request id, a retry after the delete succeeded is
        OK (kept REQUEST_RETENTION_S); the same request id naming another report → INVALID_ARGUMENT."""
        deleted, earlier = await self._repo.delete_report(
            fid, p.sub, request_id, REQUEST_RETENTION_S, audit.entry(p, AuditAction.DELETE_FEEDBACK, fid, p.sub))
        if earlier is not None:  # a delete's content is the id it names
            check_same_request(earlier.encode(), fid.encode())
            return
        if not deleted:
            raise NotFound(f"feedback/{fid}")

    async def file(self, p: Principal, fid: str, session: str = "") -> Report:
        """Render the ticket, send it to the sink, store its URL, set FILED — once.

        Concurrent or repeated calls: one caller takes the filing claim (a leased column); the others
        wait for its result and return the same stored URL. While the trace snapshot is PENDING it first
        waits up to `filing_capture_wait_s` for the capture worker, so the ticket carries the turn's tool
        calls. FAILED_PRECONDITION for a DISMISSED or unverified report, or one naming a client-chosen
        id (CLIENT_CHOSEN_ID: tickets carry server-generated ids only); ABORTED when another filer
        holds the claim longer than FILING_WAIT_S; FAILED_PRECONDITION FEEDBACK_CLAIMED while another
        review session than (caller, `session`) holds a live claim on it (nothing sent); UNAVAILABLE when
        the tracker cannot be reached (nothing stored; safe to retry)."""
        deadline = time.monotonic() + FILING_WAIT_S
        capture_deadline = time.monotonic() + self._capture_wait_s
        woke = False
        while True:
            r = await self.get(p, fid)
            if r.issue_url:
                return r
            if r.snapshot.unverified:
                raise FailedPrecondition("the chat service did not confirm this report's anchor for its owner; "
                                         "an unverified report is not filed", reason="ANCHOR_UNVERIFIED")
            domain.check_transition(r.status, Status.FILED)
            check_server_ids(r)
            check_holder(await self._repo.live_claim(fid), p.sub, session)
            if r.trace.state == domain.TRACE_PENDING and time.monotonic() < capture_deadline:
                # The turn's tool calls are not frozen yet (a report filed right after it was made): let
                # the capture worker look now, and file once it did (or when the wait is over).
                if self._wake is not None and not woke:
                    self._wake()
                    woke = True
                await asyncio.sleep(0.1)
                continue
            claimed = await self._repo.claim_filing(fid, p.sub, FILING_LEASE_S, p.sub, session)
            if claimed is not None:
                break
            if time.monotonic() > deadline:
                raise Aborted("another FileFeedback call is filing this report; retry", reason="FILING_IN_PROGRESS")
            await asyncio.sleep(0.05)
        title, body = render_ticket(claimed, self._fields)
        try:
            url = await self._sink.file(fid, title, body)
        except BaseException:
            await self._repo.release_filing(fid, p.sub)
            raise
        done = await self._repo.finish_filing(
            fid, p.sub, url, lambda filed: audit.entry(p, AuditAction.FILE_FEEDBACK, fid, p.sub, claimed, filed))
        if done is None:
            raise NotFound(f"feedback/{fid}")
        return done
