"""Mixed client load through the edge of a tests.helpers.netns World, and the check that every write a
client saw acknowledged is stored exactly once.

`Load(world, workers)`: each worker is its own user with its own conversation and repeats a turn
(SendMessage with a request id), a report on the reply (CreateFeedback), a rating of the turn (PutRating)
and an OTLP export of a 3-span trace, paced to stay well inside the write quota. Every call has a
deadline (`CALL_DEADLINE_S`); the channel is the services' own (`client_channel`: gRPC's retry policy for
the calls safe to repeat), and on UNAVAILABLE the worker retries the same request (same request id) after
the RetryInfo delay while its deadline lasts, as a client of the API is told to. `calls` holds every
call's outcome, `acked` every acknowledged write; `verify()` reads the database.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field

import grpc
from google.rpc import error_details_pb2, status_pb2

from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from agentfeedback.feedback.v1 import feedback_pb2 as fpb
from agentfeedback.feedback.v1 import feedback_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from services.common.auth import ALL_SCOPES, mint_token
from services.common.server import client_channel
from tests.helpers import otlp
from tests.helpers.netns import JWT_SECRET, World

CALL_DEADLINE_S = 12.0
LOOP_PACE_S = 0.7  # a worker's loop takes at least this: ≤ ~90 turns and ~180 feedback writes a minute


@dataclass
class Call:
    kind: str
    start: float
    end: float
    ok: bool
    attempts: int
    code: str = ""  # the final status when not ok
    codes: list[tuple[str, bool]] = field(default_factory=list)  # every failed attempt: (code, had RetryInfo)
    said: list[str] = field(default_factory=list)  # every failed attempt's message and ErrorInfo reason (clipped)
    host: str = ""  # x-upstream-host of the answer


def retry_delay_s(err: grpc.aio.AioRpcError) -> float | None:
    """The RetryInfo delay of an error (grpc-status-details-bin), None without one."""
    for k, v in err.trailing_metadata() or ():
        if k == "grpc-status-details-bin":
            st = status_pb2.Status.FromString(v)
            for d in st.details:
                if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                    ri = error_details_pb2.RetryInfo()
                    d.Unpack(ri)
                    return ri.retry_delay.seconds + ri.retry_delay.nanos / 1e9
    return None


def error_reason(err: grpc.aio.AioRpcError) -> str:
    """The ErrorInfo reason of an error (grpc-status-details-bin), "-" without one (gRPC's or Envoy's own)."""
    for k, v in err.trailing_metadata() or ():
        if k == "grpc-status-details-bin":
            for d in status_pb2.Status.FromString(v).details:
                if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    d.Unpack(info)
                    return info.reason
    return "-"


class Client:
    """Calls through the edge with the retry behaviour described in the module docstring."""

    def __init__(self, world: World) -> None:
        self.channel = client_channel(world.edge_target)
        self.chat = chat_pb2_grpc.ChatServiceStub(self.channel)
        self.feedback = feedback_pb2_grpc.FeedbackServiceStub(self.channel)
        self.otlp = trace_service_pb2_grpc.TraceServiceStub(self.channel)
        self.calls: list[Call] = []

    @staticmethod
    def md(sub: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {mint_token(JWT_SECRET, sub, ALL_SCOPES)}"),)

    async def call(self, kind: str, method, request, sub: str, deadline_s: float = CALL_DEADLINE_S,
                   record: bool = True):
        """`method(request)` until it succeeds or the deadline passes; the response, or the final
        AioRpcError raised. Only UNAVAILABLE is retried (the same request)."""
        t0 = time.monotonic()
        end = t0 + deadline_s
        c = Call(kind, t0, t0, False, 0)
        try:
            while True:
                c.attempts += 1
                try:
                    rpc = method(request, metadata=self.md(sub), timeout=max(0.05, end - time.monotonic()))
                    resp = await rpc
                    c.host = dict(await rpc.initial_metadata()).get("x-upstream-host", "")
                    c.ok = True
                    return resp
                except grpc.aio.AioRpcError as e:
                    delay = retry_delay_s(e)
                    c.codes.append((e.code().name, delay is not None))
                    c.said.append(f"{e.code().name} {error_reason(e)}: {(e.details() or '')[:200]}")
                    c.code = e.code().name
                    if e.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() >= end:
                        raise
                    await asyncio.sleep(min(delay if delay is not None else 0.2, 0.3, max(0.0, end - time.monotonic())))
        finally:
            c.end = time.monotonic()
            if record:
                self.calls.append(c)

    async def close(self) -> None:
        await self.channel.close()


@dataclass
class Acked:
    turns: list[tuple[str, str, str, str]] = field(default_factory=list)  # (owner, instance, request_id, content)
    reports: list[tuple[str, str, str]] = field(default_factory=list)  # (owner, name, request_id)
    ratings: list[tuple[str, str, int]] = field(default_factory=list)  # (name, conversation, version)
    traces: list[tuple[bytes, list[bytes]]] = field(default_factory=list)  # (trace_id, span_ids)


class Load:
    """`await start()`, then `await stop()`; see the module docstring."""

    def __init__(self, world: World, workers: int = 4, run: str = "") -> None:
        self.world = world
        self.client = Client(world)
        self.workers = workers
        self.run = run or uuid.uuid4().hex[:6]
        self.acked = Acked()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    @property
    def calls(self) -> list[Call]:
        return self.client.calls

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker(i)) for i in range(self.workers)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        await self.client.close()

    async def _worker(self, i: int) -> None:
        sub = f"load-{self.run}-{i}"
        c = self.client
        inst = None
        k = 0
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                if inst is None:
                    inst = (await c.call("CreateInstance", c.chat.CreateInstance, chat_pb2.CreateInstanceRequest(
                        instance=chat_pb2.Instance(display_name="load", agent="reference"),
                        request_id=str(uuid.uuid4())), sub)).name
                await self._round(sub, inst, k)
            except grpc.aio.AioRpcError:
                pass  # recorded in calls; the next round goes on
            k += 1
            await asyncio.sleep(max(0.0, LOOP_PACE_S - (time.monotonic() - t0)))

    async def _round(self, sub: str, inst: str, k: int) -> None:
        c = self.client
        rid = str(uuid.uuid4())
        content = f"{sub} turn {k}: what is {k} + {k}?"
        turn = await c.call("SendMessage", c.chat.SendMessage, chat_pb2.SendMessageRequest(
            instance=inst, content=content, request_id=rid), sub)
        self.acked.turns.append((sub, inst, rid, content))
        frid = str(uuid.uuid4())
        fb = await c.call("CreateFeedback", c.feedback.CreateFeedback, fpb.CreateFeedbackRequest(
            feedback=fpb.Feedback(message=turn.reply.name, body=f"report {k}"), request_id=frid), sub)
        self.acked.reports.append((sub, fb.name, frid))
        rating = fpb.Rating(conversation=inst, turn_index=turn.reply.turn_index, scope=fpb.RATING_SCOPE_MESSAGE,
                            aspect="reaction", sentiment=fpb.RATING_SENTIMENT_POSITIVE)
        r = await c.call("PutRating", c.feedback.PutRating, fpb.PutRatingRequest(rating=rating,
                                                                                request_id=str(uuid.uuid4())), sub)
        self.acked.ratings.append((r.name, inst, r.version))
        tid, spans = otlp.one_trace(3)
        await c.call("Export", c.otlp.Export, otlp.request(spans, service="multihost-client"), sub)
        self.acked.traces.append((tid, [s.span_id for s in spans]))

    # ---- what the calls saw --------------------------------------------------------------------------
    def summary(self, since: float = 0.0, until: float = float("inf")) -> dict:
        calls = [c for c in self.calls if since <= c.start < until]
        failed = [c for c in calls if not c.ok]
        noticed = [c for c in calls if c.ok and c.attempts > 1]
        return {"calls": len(calls), "failed": len(failed), "retried_by_client": len(noticed),
                "failed_share": round(len(failed) / len(calls), 4) if calls else 0.0,
                "failed_codes": sorted({c.code for c in failed}),
                "hosts": sorted({c.host for c in calls if c.host})}

    def bad_statuses(self) -> list[tuple[str, str, bool, str]]:
        """Failed attempts that were neither UNAVAILABLE with RetryInfo nor the client's own deadline:
        (method, code, had RetryInfo, "CODE reason: message" as the client saw it)."""
        return [(c.kind, code, ri, said) for c in self.calls for (code, ri), said in zip(c.codes, c.said, strict=True)
                if not ((code == "UNAVAILABLE" and ri) or code == "DEADLINE_EXCEEDED")]

    def over_deadline(self, slack_s: float = 1.0) -> list[Call]:
        return [c for c in self.calls if c.end - c.start > CALL_DEADLINE_S + slack_s]

    # ---- what is stored ------------------------------------------------------------------------------
    async def verify(self, dsn: str) -> dict:
        """Every acknowledged write stored exactly once (database at `dsn`); the counts checked.
        Raises AssertionError naming what is missing or doubled."""
        import asyncpg  # noqa: PLC0415

        a = self.acked
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            rids = [uuid.UUID(r) for _, _, r, _ in a.turns]
            turns = dict(await conn.fetch("SELECT request_id::text, count(*) FROM chat.turns WHERE request_id = ANY($1)"
                                          " GROUP BY 1", rids))
            bad = [r for _, _, r, _ in a.turns if turns.get(r) != 1]
            assert not bad, f"{len(bad)} acknowledged turns not stored exactly once: {bad[:5]}"
            users = dict(await conn.fetch("SELECT content, count(*) FROM chat.messages WHERE role = 1 AND content = ANY($1)"
                                          " GROUP BY 1", [t[3] for t in a.turns]))
            bad = [t[3] for t in a.turns if users.get(t[3]) != 1]
            assert not bad, f"{len(bad)} acknowledged user messages not stored exactly once: {bad[:5]}"
            reports = dict(await conn.fetch("SELECT request_id::text, count(*) FROM feedback.feedback"
                                            " WHERE request_id = ANY($1) GROUP BY 1",
                                            [uuid.UUID(r) for _, _, r in a.reports]))
            bad = [r for _, _, r in a.reports if reports.get(r) != 1]
            assert not bad, f"{len(bad)} acknowledged reports not stored exactly once: {bad[:5]}"
            ids = [n.split("/", 1)[1] for n, _, _ in a.ratings]
            ratings = dict(await conn.fetch("SELECT id, version FROM feedback.ratings WHERE id = ANY($1)", ids))
            bad = [n for n, _, v in a.ratings if ratings.get(n.split("/", 1)[1], -1) < v]
            assert not bad, f"{len(bad)} acknowledged ratings missing (or older than acknowledged): {bad[:5]}"
            spans = {bytes(r[0]): r[1] for r in await conn.fetch(
                "SELECT span_id, count(*) FROM traces.spans WHERE trace_id = ANY($1) GROUP BY 1",
                [t for t, _ in a.traces])}
            bad = [s.hex() for _, ss in a.traces for s in ss if spans.get(s) != 1]
            assert not bad, f"{len(bad)} acknowledged spans not stored exactly once: {bad[:5]}"
        finally:
            await conn.close()
        return {"turns": len(a.turns), "reports": len(a.reports), "ratings": len(a.ratings),
                "spans": sum(len(s) for _, s in a.traces)}
