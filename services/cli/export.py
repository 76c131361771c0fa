"""`agentfeedback export dataset|pairs` (issue 24): the caller's labelled turns as JSON lines, one per turn, in
the OpenAI chat-messages shape that fine-tuning and evaluation tools read:

    {"messages": [{"role": "user", "content": …}, …, {"role": "assistant", "content": <the rated reply>}],
     "conversation", "turn_index", "trace_id", "reply", "ratings": [...], "reports": [...],
     "tool_calls": [...], "ratings_total", "reports_total", "messages_omitted", "resume_token"}

A turn with more ratings and reports than fit in one record (3 MiB, under gRPC's 4 MiB message limit)
carries the first that fit; `ratings_total` / `reports_total` say how many the turn has. A conversation
too long for it keeps the messages nearest the turn; `messages_omitted` counts the older ones left out.

Each rating carries `author_kind` (HUMAN for the owner's own; LLM / CODE / HUMAN for an evaluation another
system sent, with its `evaluator`, `label` and `score`; `score` null where none applies).

Streamed (ExportDataset) and flushed line by line; `--resume-token` continues a cut export after its last line.
"""
from __future__ import annotations

import json

import click
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp

from services.cli.client import Clients
from services.cli.terminal import counted
from services.cli.triage import _run

SENTIMENTS = {"positive": pb.RATING_SENTIMENT_POSITIVE, "neutral": pb.RATING_SENTIMENT_NEUTRAL,
              "negative": pb.RATING_SENTIMENT_NEGATIVE}
AUTHOR_KINDS = {"human": pb.AUTHOR_KIND_HUMAN, "llm": pb.AUTHOR_KIND_LLM, "code": pb.AUTHOR_KIND_CODE}


class Rfc3339(click.ParamType):
    """An RFC 3339 time with its offset (`2026-12-01T00:00:00Z`, `…+02:00`) → a protobuf Timestamp;
    anything else is a usage error naming the option (exit 2), not a traceback."""

    name = "RFC 3339 time"

    def convert(self, value, param, ctx) -> Timestamp:
        if isinstance(value, Timestamp):
            return value
        ts = Timestamp()
        try:
            ts.FromJsonString(value)
        except ValueError:
            self.fail("must be an RFC 3339 time with its offset, e.g. 2026-12-01T00:00:00Z", param, ctx)
        return ts


def _dict(m) -> dict:
    return MessageToDict(m, always_print_fields_with_no_presence=True)


def dataset_line(r: pb.DatasetRecord) -> dict:
    """One JSONL row (see the module docstring); every row has the same keys."""
    return {
        "messages": [{"role": m.role, "content": m.content} for m in r.messages]
        + [{"role": "assistant", "content": r.completion.content}],
        "conversation": r.conversation, "turn_index": r.turn_index, "trace_id": r.trace_id, "reply": r.reply_name,
        "ratings": [{"name": x.name, "scope": pb.RatingScope.Name(x.scope), "aspect": x.aspect, "artifact_id": x.artifact_id,
                     "sentiment": pb.RatingSentiment.Name(x.sentiment), "choice": x.choice, "reasons": list(x.reasons),
                     "note": x.note, "origin": pb.RatingOrigin.Name(x.origin),
                     "author_kind": pb.AuthorKind.Name(x.author_kind), "evaluator": x.evaluator, "label": x.label,
                     "score": x.score if x.HasField("score") else None,
                     "update_time": x.update_time.ToJsonString()} for x in r.ratings],
        "reports": [{"name": f.name, "body": f.body, "sentiment": pb.Sentiment.Name(f.sentiment),
                     "category": pb.Category.Name(f.category), "status": pb.Status.Name(f.status)} for f in r.feedback],
        "tool_calls": [_dict(c) for c in r.tool_calls],
        "ratings_total": r.ratings_total, "reports_total": r.feedback_total, "messages_omitted": r.messages_omitted,
        "resume_token": r.resume_token,
    }


@click.group()
def export() -> None:
    """Labelled data out (JSONL)."""


@export.command("dataset")
@click.option("--output", "-o", type=click.File("w", lazy=False), default="-", help="JSONL file (default stdout).")
@click.option("--instance", "conversation", default="", help="One conversation (`instances/{id}`).")
@click.option("--aspect", default="", help="Only turns rated on this aspect.")
@click.option("--sentiment", type=click.Choice(sorted(SENTIMENTS)), default=None)
@click.option("--author-kind", type=click.Choice(sorted(AUTHOR_KINDS)), default=None,
              help="Only turns rated by this kind of author (human: you, or another system's reviewer; "
                   "llm / code: evaluations other systems sent).")
@click.option("--since", type=Rfc3339(), default=None,
              help="Ratings updated at or after this RFC 3339 time (e.g. 2026-12-01T00:00:00Z).")
@click.option("--until", type=Rfc3339(), default=None, help="…and before this one.")
@click.option("--include-branch-copies", is_flag=True, help="Count ratings copied onto forks as labels too.")
@click.option("--resume-token", default="", help="Continue after the line that carried this token.")
@_run
async def dataset_cmd(c: Clients, output, conversation: str, aspect: str, sentiment: str | None,
                      author_kind: str | None, since: Timestamp | None, until: Timestamp | None,
                      include_branch_copies: bool, resume_token: str):
    """The caller's labelled turns: the conversation before each, the rated reply, its ratings, reports
    and frozen tool calls."""
    req = pb.ExportDatasetRequest(conversation=conversation, aspect=aspect,
                                  sentiment=SENTIMENTS[sentiment] if sentiment else 0,
                                  author_kind=AUTHOR_KINDS[author_kind] if author_kind else 0,
                                  include_branch_copies=include_branch_copies, resume_token=resume_token)
    if since is not None:
        req.start_time.CopyFrom(since)
    if until is not None:
        req.end_time.CopyFrom(until)
    n = 0
    async for r in c.feedback().ExportDataset(req, metadata=c.md):
        output.write(json.dumps(dataset_line(r), ensure_ascii=False) + "\n")
        output.flush()
        n += 1
    click.echo(f"exported {counted(n, 'labelled turn')}", err=True)
    if n == 0:
        click.echo("(only rated turns are exported: a turn becomes a label when its reply gets a rating, "
                   "e.g. thumbs up/down in the console or PutRating; a report alone is not one)", err=True)


@export.command("pairs")
@click.option("--output", "-o", type=click.File("w", lazy=False), default="-", help="JSONL file (default stdout).")
@click.option("--aspect", default="", help="Only pairs judged on this aspect.")
@_run
async def pairs_cmd(c: Clients, output, aspect: str):
    """Preference pairs from forks as JSONL `{prompt, chosen, rejected}` (conversational messages, as TRL's
    DPO datasets), plus the aspect, the two branches and the turn."""
    n = 0
    async for x in c.feedback().ExportPreferencePairs(pb.ExportPreferencePairsRequest(aspect=aspect), metadata=c.md):
        row = {k: [{"role": m.role, "content": m.content} for m in getattr(x, k)] for k in ("prompt", "chosen", "rejected")}
        row.update(aspect=x.aspect, chosen_conversation=x.chosen_conversation,
                   rejected_conversation=x.rejected_conversation, turn_index=x.turn_index)
        output.write(json.dumps(row, ensure_ascii=False) + "\n")
        output.flush()
        n += 1
    click.echo(f"exported {counted(n, 'preference pair')}", err=True)
    if n == 0:
        click.echo("(pairs come from forks: a conversation forked after a turn whose two branches' next replies you "
                   "rated differently on one aspect)", err=True)
