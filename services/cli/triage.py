"""Triage commands: `feedback list|show|resolve|file|export|watch` and `trace get`.

Everything goes through the services' RPCs with the caller's token (owner-scoped where the data lives).
Errors from the services are printed as `CODE: message` and exit with status 1.
"""
from __future__ import annotations

import asyncio
import functools
import json
import sys
import uuid

import click
import grpc
from google.protobuf import field_mask_pb2
from google.protobuf.json_format import MessageToDict

from agentfeedback.feedback.v1 import feedback_pb2
from agentfeedback.traces.v1 import traces_pb2
from services.cli.client import Clients, ClientSettings
from services.cli.render import render_feedback, render_waterfall
from services.cli.terminal import counted, for_terminal, json_line
from services.common.errors import error_info

STATUSES = ["open", "triaged", "filed", "dismissed"]


# Printed under an UNAVAILABLE that no service answered (README "Using it").
NOT_RUNNING_HINT = ("Nothing answers at that address: is the stack running? Start it with `make run` in another "
                    "terminal (or point AGENTFEEDBACK_CLIENT_*_TARGET at yours).")


def _run(fn):
    """Run an async command with Clients; map gRPC errors to a one-line message + exit 1."""

    @functools.wraps(fn)
    def wrapper(settings: ClientSettings, *a, **kw):
        async def go():
            clients = Clients.from_settings(settings)
            try:
                return await fn(clients, *a, **kw)
            finally:
                await clients.close()

        try:
            return asyncio.run(go())
        except grpc.aio.AioRpcError as e:
            click.echo(f"{e.code().name}: {for_terminal(e.details() or '')}", err=True)
            if e.code() == grpc.StatusCode.UNAVAILABLE and error_info(e) is None:
                # No ErrorInfo: no service of ours answered (each attaches one), the address did not.
                click.echo(NOT_RUNNING_HINT, err=True)
            sys.exit(1)

    return click.pass_obj(wrapper)


def ticket_markdown(fb: feedback_pb2.Feedback) -> str:
    """The evidence bundle: the same Markdown ticket draft FileFeedback files, here with every field
    (the owner reading their own row sees their words and the quoted turn) plus the links; controls in
    the owner's words and the quoted turn are escaped for the terminal (`for_terminal`, lines kept)."""
    from services.feedback.codec import report_from_pb  # noqa: PLC0415 - the one renderer
    from services.feedback.ticket import TicketFields, render_ticket  # noqa: PLC0415

    title, body = render_ticket(report_from_pb(fb), TicketFields(body=True, message_text=True, client_values=True))
    trace_id = fb.snapshot.trace_id or fb.trace_id
    links = ["", "### Links", ""]
    if fb.instance:
        links.append(f"- conversation: `{fb.instance}` (MCP `instance_messages`, around trace `{trace_id or '-'}`)")
    elif fb.WhichOneof("target") == "coding":
        links.append(f"- coding session: `{fb.coding.session}` at timeline seq {fb.coding.timeline_seq}")
    links.append(f"- trace: `agentfeedback trace get {trace_id}`" if trace_id else "- trace: not recorded")
    if fb.issue_url:
        links.append(f"- issue: {fb.issue_url}")
    return for_terminal(f"# {title}\n\n{body}" + "\n".join(links) + "\n", keep="\n")


def feedback_name(value: str) -> str:
    return value if value.startswith("feedback/") else f"feedback/{value}"


@click.group()
def feedback() -> None:
    """Feedback rows: list, show the evidence bundle, resolve, file a ticket, export."""


@feedback.command("list")
@click.option("--instance", default="", help="instances/{id}")
@click.option("--status", type=click.Choice(STATUSES), default=None)
@click.option("--text", default="", help="Substring of the words or the quoted target.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 1000), help="Rows per page (1–1000).")
@click.option("--page-token", default="")
@click.option("--json", "as_json", is_flag=True)
@_run
async def list_cmd(c: Clients, instance: str, status: str | None, text: str, limit: int, page_token: str, as_json: bool):
    """Newest first: id, status, trace id, created (UTC), the first words of the report."""
    req = feedback_pb2.ListFeedbackRequest(page_size=limit, page_token=page_token, instance=instance, text=text)
    if status:
        req.status = feedback_pb2.Status.Value(f"STATUS_{status.upper()}")
    stub = c.feedback()
    resp = await stub.ListFeedback(req, metadata=c.md, timeout=c.settings.timeout_s)
    rows = list(resp.feedback)
    # A page may end early (the server bounds a response's size): fetch on until `limit` rows.
    while resp.next_page_token and len(rows) < limit:
        req.page_token, req.page_size = resp.next_page_token, limit - len(rows)
        resp = await stub.ListFeedback(req, metadata=c.md, timeout=c.settings.timeout_s)
        rows += resp.feedback
    for fb in rows:
        if as_json:
            click.echo(json.dumps(MessageToDict(fb)))
            continue
        st = feedback_pb2.Status.Name(fb.status).removeprefix("STATUS_")
        words = for_terminal(fb.body.replace("\n", " ")[:60])
        click.echo(f"{fb.name.removeprefix('feedback/')}  {st:9s} {for_terminal(fb.snapshot.trace_id or '-'):32s}  "
                   f"{fb.create_time.ToJsonString()[:19]}  {words}")
    if not rows and not as_json:
        click.echo("no feedback matches", err=True)
    if resp.next_page_token:
        click.echo(f"next page: --page-token {resp.next_page_token}", err=True)


@feedback.command("show")
@click.argument("feedback_id")
@click.option("--markdown/--plain", default=True, help="Markdown ticket draft (default) or a plain summary.")
@_run
async def show_cmd(c: Clients, feedback_id: str, markdown: bool):
    """The evidence bundle: a Markdown ticket draft (words, quoted turn, tool calls, events, links)."""
    fb = await c.feedback().GetFeedback(feedback_pb2.GetFeedbackRequest(name=feedback_name(feedback_id)),
                                        metadata=c.md, timeout=c.settings.timeout_s)
    if markdown:
        click.echo(ticket_markdown(fb))
    else:
        click.echo(render_feedback(fb))


@feedback.command("resolve")
@click.argument("feedback_id")
@click.option("--status", type=click.Choice(STATUSES), default=None)
@click.option("--issue-url", default=None, help="The ticket's URL; '' clears it.")
@_run
async def resolve_cmd(c: Clients, feedback_id: str, status: str | None, issue_url: str | None):
    """Set the triage status and/or the issue URL (at least one) with the row's current etag
    (ABORTED if it changed meanwhile); what is not given is left as it is."""
    if status is None and issue_url is None:
        raise click.UsageError("give --status, --issue-url or both")
    stub = c.feedback()
    name = feedback_name(feedback_id)
    cur = await stub.GetFeedback(feedback_pb2.GetFeedbackRequest(name=name), metadata=c.md, timeout=c.settings.timeout_s)
    upd = feedback_pb2.Feedback(name=name, etag=cur.etag)
    paths = []
    if status is not None:
        upd.status = feedback_pb2.Status.Value(f"STATUS_{status.upper()}")
        paths.append("status")
    if issue_url is not None:
        upd.issue_url = issue_url
        paths.append("issue_url")
    out = await stub.UpdateFeedback(
        feedback_pb2.UpdateFeedbackRequest(feedback=upd, update_mask=field_mask_pb2.FieldMask(paths=paths),
                                           request_id=str(uuid.uuid4())),
        metadata=c.md, timeout=c.settings.timeout_s)
    click.echo(f"{out.name}: {feedback_pb2.Status.Name(out.status)} {out.issue_url}")


@feedback.command("file")
@click.argument("feedback_id")
@_run
async def file_cmd(c: Clients, feedback_id: str):
    """File a ticket in the configured tracker (idempotent: a second call returns the same URL)."""
    out = await c.feedback().FileFeedback(
        feedback_pb2.FileFeedbackRequest(name=feedback_name(feedback_id), request_id=str(uuid.uuid4())),
        metadata=c.md, timeout=c.settings.timeout_s)
    click.echo(out.issue_url)


@feedback.command("delete")
@click.argument("feedback_id")
@click.confirmation_option(prompt="Delete this report for good (the owner's words and the frozen evidence)?")
@_run
async def delete_cmd(c: Clients, feedback_id: str):
    """Hard-delete a report (DeleteFeedback; needs feedback:write). One request id for every retry of
    this command's call, so a retried delete that already succeeded still answers OK."""
    name = feedback_name(feedback_id)
    await c.feedback().DeleteFeedback(
        feedback_pb2.DeleteFeedbackRequest(name=name, request_id=str(uuid.uuid4())),
        metadata=c.md, timeout=c.settings.timeout_s)
    click.echo(f"{name}: deleted")


@feedback.command("export")
@click.option("--output", "-o", type=click.File("w", lazy=False), default="-", help="JSONL file (default stdout).")
@click.option("--page-size", default=200, show_default=True, type=click.IntRange(1, 1000), help="Rows per request (1–1000).")
@_run
async def export_cmd(c: Clients, output, page_size: int):
    """Every row the caller may read, as JSON lines, streamed page by page with a progress count on stderr."""
    stub = c.feedback()
    token = ""
    n = 0
    with click.progressbar(length=0, label="exporting", file=sys.stderr, show_pos=True) as bar:
        while True:
            resp = await stub.ListFeedback(feedback_pb2.ListFeedbackRequest(page_size=page_size, page_token=token),
                                           metadata=c.md, timeout=c.settings.timeout_s)
            for fb in resp.feedback:
                output.write(json.dumps(MessageToDict(fb), ensure_ascii=False) + "\n")
            n += len(resp.feedback)
            bar.length = n
            bar.update(len(resp.feedback))
            token = resp.next_page_token
            if not token:
                break
    click.echo(f"exported {counted(n, 'row')}", err=True)


# The change feed's kinds by their CLI names (watch, webhook create).
EVENT_KINDS = {None: 0, "feedback": feedback_pb2.FEEDBACK_EVENT_KIND_FEEDBACK,
               "rating": feedback_pb2.FEEDBACK_EVENT_KIND_RATING,
               "evaluation": feedback_pb2.FEEDBACK_EVENT_KIND_EVALUATION}
KIND_HELP = "Only reports, only ratings or only evaluations other systems sent."


# `feedback watch` resumes after these (a restarted or redeployed replica ends its streams UNAVAILABLE,
# README "Operating it"), from the last token it printed: 0.5 s doubling to 30 s, reset by a message.
WATCH_RESUMABLE = frozenset({grpc.StatusCode.UNAVAILABLE})
WATCH_BACKOFF_FIRST_S, WATCH_BACKOFF_MAX_S = 0.5, 30.0


@feedback.command("watch")
@click.option("--resume-token", default="", help="Resume after this token (printed with every event).")
@click.option("--from-oldest", is_flag=True, help="Without a token: from the oldest event kept, not from now.")
@click.option("--owner", default="", help="feedback:admin: one owner's changes only.")
@click.option("--kind", type=click.Choice(["feedback", "rating"]), default=None, help="Only reports or only ratings.")
@click.option("--aspect", default="", help="Only ratings of this aspect.")
@click.option("--include-text", is_flag=True, help="feedback:admin: other owners' words too (audited).")
@click.option("--heartbeats", is_flag=True, help="Print heartbeats too (their resume token).")
@_run
async def watch_cmd(c: Clients, resume_token: str, from_oldest: bool, owner: str, kind: str | None, aspect: str,
                    include_text: bool, heartbeats: bool):
    """The change feed (WatchFeedback) as JSON lines, one per event, flushed as they arrive; runs until
    interrupted. When the stream breaks (UNAVAILABLE: the service restarted or is down) it resumes after
    the last position it received, saying so on stderr, so a restart loses and repeats nothing; any other
    error ends it (exit 1). Keep the last `resumeToken` to continue in a later run (--resume-token)."""
    kinds = {None: 0, "feedback": feedback_pb2.FEEDBACK_EVENT_KIND_FEEDBACK, "rating": feedback_pb2.FEEDBACK_EVENT_KIND_RATING}
    token, delay = resume_token, WATCH_BACKOFF_FIRST_S
    while True:
        req = feedback_pb2.WatchFeedbackRequest(resume_token=token, from_oldest=from_oldest and not token, owner=owner,
                                                kind=kinds[kind], aspect=aspect, include_text=include_text)
        try:
            async for resp in c.feedback().WatchFeedback(req, metadata=c.md):  # no deadline: a stream that stays open
                if resp.HasField("event") or heartbeats:
                    click.echo(json_line(MessageToDict(resp)))
                    sys.stdout.flush()
                token, delay = resp.resume_token or token, WATCH_BACKOFF_FIRST_S  # after it is printed
        except grpc.aio.AioRpcError as e:
            if e.code() not in WATCH_RESUMABLE:
                raise
            where = "from the last position received" if token else "from the start position"
            click.echo(f"feed interrupted ({e.code().name}); resuming {where} in {delay:g} s", err=True)
        else:
            click.echo(f"feed ended by the server; resuming in {delay:g} s", err=True)
        await asyncio.sleep(delay)
        delay = min(delay * 2, WATCH_BACKOFF_MAX_S)


@click.group()
def trace() -> None:
    """Traces from the collector."""


@trace.command("get")
@click.argument("trace_id")
@click.option("--json", "as_json", is_flag=True)
@_run
async def trace_get(c: Clients, trace_id: str, as_json: bool):
    """A turn's spans as a waterfall (tool calls and span events included)."""
    t = await c.traces().GetTrace(traces_pb2.GetTraceRequest(trace_id=trace_id), metadata=c.md, timeout=c.settings.timeout_s)
    click.echo(json.dumps(MessageToDict(t), indent=1) if as_json else render_waterfall(t))
