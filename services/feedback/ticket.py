"""The Markdown ticket draft of one report, rendered from the model (FileFeedback, the CLI's
evidence bundle). Which fields reach an external tracker is `TicketFields` (issue 7 "Filing")."""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp

from services.common.errors import FailedPrecondition
from services.common.trace_cut import frozen_cut_notice
from services.feedback.model.enums import Author, Sentiment, SnapshotSource, TraceState
from services.feedback.model.report import Report

CATEGORY_NAMES = {
    0: "unspecified", 1: "broken response", 2: "network", 3: "tool failure", 4: "rendering",
    5: "unsafe content", 6: "other",
}
_STATE_NAMES = {TraceState.PENDING: "pending", TraceState.CAPTURED: "captured", TraceState.UNAVAILABLE: "unavailable",
                TraceState.EXPIRED: "expired"}


@dataclass(frozen=True)
class TicketFields:
    """What a ticket carries beyond category, ids and the tool-call summary (issue 7 "Filing").

    Default: neither the owner's words nor the message texts reach an external tracker.
    """

    body: bool = False
    message_text: bool = False
    # Values a client chose (the agent slug, the audio key): never in a filed ticket (issue 13); the
    # CLI's evidence bundle, read by the report's own people, shows them.
    client_values: bool = False
    # The SREs' trace view (AGENTFEEDBACK_FEEDBACK_TRACE_URL_TEMPLATE, `{trace_id}` replaced): a link
    # next to the trace id; empty: none.
    trace_url_template: str = ""


def trace_url(template: str, trace_id: str) -> str:
    """The trace view's URL for `trace_id` (32 hex, server-checked), or '' without a template or id."""
    return template.replace("{trace_id}", trace_id) if template and trace_id else ""


def _quote(text: str) -> str:
    return "\n".join("> " + line for line in (text or "").splitlines() or [""])


def _rfc3339(t: dt.datetime | None) -> str:
    """As proto JSON writes a Timestamp (`2026-11-30T12:00:00Z`, fractions only when there are any)."""
    if t is None:
        return ""
    ts = Timestamp()
    ts.FromDatetime(t)
    return ts.ToJsonString()


_SERVER_ID = re.compile(r"^[0-9a-f]{32}$")


def check_server_ids(fb: Report) -> None:
    """A ticket carries ids, never a client's words (issue 13): the instance and message ids must be of
    the server-generated form (32 lowercase hex; a client may choose an instance id at CreateInstance)
    and a coding target's session is the client's own name. FAILED_PRECONDITION (reason
    CLIENT_CHOSEN_ID, metadata `field`) otherwise, without echoing the value."""
    a = fb.anchor
    ids = [("feedback.coding.session", "")] if a.kind == "coding" else []
    if a.instance:
        ids.append(("feedback.instance", a.instance.removeprefix("instances/")))
    if a.message:
        ids.append(("feedback.message", a.message.rsplit("/", 1)[-1]))
    for field_path, value in ids:
        if not _SERVER_ID.match(value):
            raise FailedPrecondition(f"{field_path} is a client-chosen id; a report naming one is not filed to a "
                                     "tracker (tickets carry server-generated ids only)", reason="CLIENT_CHOSEN_ID",
                                     field=field_path)


def render_ticket(fb: Report, fields: TicketFields = TicketFields()) -> tuple[str, str]:
    """The Markdown ticket draft of one report: (title, body).

    Always: category, ids, tool-call summary, events; the owner's words and the message texts only
    when `fields` enables them. An unverified or client-supplied snapshot says so on every rendering;
    evidence frozen from a GetTrace answer the collector cut says so under the tool calls' heading
    (`frozen_cut_notice`, the line `feedback show --plain` prints).
    """
    snap, a, ts = fb.snapshot, fb.anchor, fb.trace
    ctx = snap.context
    category = CATEGORY_NAMES.get(int(fb.category), "other")  # a newer client's category: `other` (issue 13)
    trace_id = (a.trace_id if a.kind == "trace" else "") or snap.trace_id
    message = a.message if a.kind == "message" else ""
    coding = a.coding_session if a.kind == "coding" else ""
    instance = a.instance
    # The anchor that exists: a coding session + timeline seq, else the turn of an instance, else a
    # message or trace id alone. Empty fields are left out (never "turn ?" or "instance: ``").
    if coding:
        anchor = f"timeline seq {a.coding_seq} of coding session {coding}"
    elif instance and (snap.target_role or snap.turn_index):
        # People count turns from 1; the API's turn_index from 0 (docs/architecture.md "Turn numbers").
        anchor = f"turn {snap.turn_index + 1} of {instance}"
    else:
        anchor = message or (f"trace {trace_id}" if trace_id else "") or instance or "unanchored report"
    title = f"[feedback] {category}: {anchor}"
    lines = [f"## Feedback {fb.name if fb.id else ''}", ""]
    # A client-supplied snapshot is the reporter's claim until the chat service confirms it (issue 3):
    # say so on every rendering, never present it as evidence.
    if snap.unverified:
        title = f"[unverified] {title}"
        lines += ["> **Unverified:** the chat service did not confirm this anchor for the reporter; the quoted",
                  "> text and ids below are the reporter's claim, not evidence.", ""]
    elif snap.source == SnapshotSource.CLIENT:
        lines += ["> **Client-supplied snapshot:** the chat service was unreachable when this was reported;",
                  "> the quote below is not yet confirmed by it.", ""]
    sentiment = ("bad" if fb.sentiment == Sentiment.BAD else "good" if fb.sentiment else "unspecified")
    items = [
        ("category", category),
        ("sentiment", sentiment),
        ("author", {Author.AGENT: "agent", Author.PLATFORM: "platform"}.get(fb.author, "user")),
        ("coding session", f"`{coding}`" if coding else ""),
        ("timeline seq", str(a.coding_seq) if coding else ""),
        ("instance", f"`{instance}`" if instance else ""),
        ("message", f"`{message}`" if message else ""),
        ("trace id", f"`{trace_id}`" if trace_id else ""),
        ("trace view", trace_url(fields.trace_url_template, trace_id)),
        ("turn", str(snap.turn_index + 1) if anchor.startswith("turn ") else ""),
        ("turn index", str(snap.turn_index) if anchor.startswith("turn ") else ""),
        # An agent-recorded report: the turn in which the owner spoke the complaint (a trace id, checked
        # as 32 hex on create), next to the reply it is about.
        ("complaint turn (trace id)", f"`{fb.context_trace_id}`" if fb.context_trace_id else ""),
        ("created", _rfc3339(fb.create_time)),
        # The model the agent reported; the agent slug and the audio key (a client's) only when asked.
        ("agent / model", " / ".join(x for x in (ctx.agent if fields.client_values else "", ctx.model) if x)),
    ]
    lines += [f"- {k}: {v}" for k, v in items if v]
    if ctx.audio_key and fields.client_values:
        lines.append(f"- voice: audio key `{ctx.audio_key}`")
    if fields.body:
        heading = ("The owner's words, as the agent recorded them" if fb.author == Author.AGENT
                   else "The owner's words")
        lines += ["", f"### {heading}", "", _quote(fb.body)]
    if fields.message_text:
        lines += ["", "### The turn before", "", _quote(snap.preceding_user_text),
                  "", f"### The flagged message ({snap.target_role})", "", _quote(snap.target_text)]
        if ctx.dictation:
            lines += ["", "Dictation as heard:", "", _quote(ctx.dictation)]
    frozen = ts.frozen
    lines += _evidence_note(fb)
    lines += ["", f"### Tool calls (trace snapshot {_STATE_NAMES.get(ts.state, 'none')}, root status "
              f"{frozen.root_status or '-'}, {frozen.duration_ms:.1f} ms)", ""]
    if cut := frozen_cut_notice(frozen.truncated_value_count):  # frozen from a GetTrace answer the collector cut
        lines += [cut, ""]
    if frozen.tool_calls:
        lines += ["| tool | call id | status | ms | result bytes |", "|---|---|---|---|---|"]
        for c in frozen.tool_calls:
            lines.append(f"| {c.name} | {c.call_id} | {c.status} | {c.duration_ms:.1f} | {c.result_size_bytes} |")
    else:
        lines.append("(none recorded)")
    events = [e for e in frozen.events if e.name not in ("chat.in", "chat.out")]
    if events:
        lines += ["", "### Events", ""]
        lines += [f"- `{e.name}` at {_rfc3339(e.time)} (span {e.span_id})" for e in events]
    return title, "\n".join(lines) + "\n"


def _evidence_note(fb: Report) -> list[str]:
    """A ticket filed before the evidence settled says so, and where the final evidence will be: the
    report itself (GetFeedback / `agentfeedback feedback show`), whose frozen copy the worker completes."""
    ts = fb.trace
    if ts.state == TraceState.PENDING:
        what = "> **Evidence pending:** the turn's spans were still arriving when this was filed."
    elif ts.state == TraceState.CAPTURED and ts.frozen.missing:
        what = (f"> **Evidence incomplete:** frozen without {', '.join(ts.frozen.missing)} (the process that held "
                "them stopped); completed in place if they arrive.")
    else:
        return []
    return ["", what, f"> Final evidence: report `{fb.name}` (GetFeedback, or `agentfeedback feedback show {fb.id}`)."]
