"""The floor of the stack, measured in the same run as the real services: what Python grpc.aio +
asyncpg + PostgreSQL cost on this machine for the same work with NONE of our features.

A floor server does only the unavoidable part of an RPC: the real SQL statement(s) from the
service's repository module and a response of the same shape and size. It has no interceptor (no
JWT check, no scopes, no SERVER span, no error mapping), no input validation, no span export, no
request fingerprints, no deadline handling, no `chat.in`/`chat.out` events. The gap between a
service's figure and its floor is what our features cost; a target at or below the floor cannot be
met by this stack on this machine, whatever our code does.

Floors (each as its own OS process, like the real services, on uvloop as `run_service` does):
- `feedback`: `FeedbackService.PutRating` = `UPSERT_RATING` (services/feedback/repository/ratings.py, with the
  request id and a SHA-256 of the request, as the service sends it) + the Rating.
  `FeedbackService.CreateFeedback` = the create's one durable write, `ReportStore.insert_report`
  (INSERT_FEEDBACK, autocommit: one statement, one commit, the cluster's synchronous_commit) of a
  report on the request's message with a chat-sourced snapshot of that message's real text (no chat call:
  the bench hands the floor its turns' texts up front in the JSON file named by `FLOOR_TURNS_ENV`,
  message name → [reply, preceding user message]; FLOOR_REPLY_CHARS "r"s for a message not in it) + the
  Feedback. The quoted reply is what the quote's trigram index costs (a real reply is ~900 trigrams,
  `"r" * 1200` one), so the floor prices the same index work as the service's row: since migration 0095
  that index is written behind the INSERT by the quote indexer, which runs here as in the service. Its
  rows are born with no capture due, so the service's capture worker never works on them.
- `agent` + `gateway`: `ChatService.SendMessage` = `Repository.begin_turn` (user message + history,
  committed) → one `AgentService.Think` call carrying that history and the same metadata the real
  gateway sends (authorization + traceparent) and a 30 s deadline → `Repository.finish_turn` (reply,
  committed) → both messages. The floor agent answers at once with a FLOOR_REPLY_CHARS-character reply
  (the real reference agent's replayed replies in the chat bench have a median of ≈ 1,250 bytes).

- `feedback-grouped`: `feedback` with concurrent puts sent as groups (FloorFeedbackGrouped), the design
  bench_floor_designs tries to move the put's floor with.

Run one: `python -m tests.bench.floor feedback|feedback-grouped|agent|gateway PORT [DATABASE_URL] [AGENT_PORT]` (PORT 0: any
free port; it prints the one it got).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime

import grpc
import uvloop
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from agentfeedback.agent.v1 import agent_pb2, agent_pb2_grpc
from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.feedback.v1 import feedback_pb2_grpc

from services.chat.domain import Channel, Message, Role, TurnInput
from services.chat.repository import Repository
from services.chat.servicer import message_pb
from services.common.db import create_pool, skip_reset
from services.common.ids import new_id
from services.common.health import wait_serving
from services.common.settings import PROJECT_ROOT
from services.common.etags import etag
from services.feedback import domain
from services.feedback.model.enums import Author, Category, Sentiment, Surface, TraceState
from services.feedback.model.report import Anchor, Context, NewReport, Snapshot
from services.feedback.repository.ratings import _NAMED, PUTS, UPSERT_RATING
from services.feedback.repository import create_pool as feedback_pool
from services.feedback.repository.reports import ReportStore
from services.feedback.repository.quotes import QuoteStore
from services.feedback.quote_index import QuoteIndexer

FLOOR_REPLY_CHARS = 1200
FLOOR_TURNS_ENV = "AGENTFEEDBACK_FLOOR_TURNS"  # the floor feedback's turn texts (see the module docstring)
OWNER = "bench"  # the `sub` of the bench's token: the floor gateway writes the real instance's rows
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _floor_turns() -> dict[str, tuple[str, str]]:
    """Message name → (its text, the user message before it), from the file FLOOR_TURNS_ENV names."""
    path = os.environ.get(FLOOR_TURNS_ENV)
    if not path:
        return {}
    with open(path, encoding="utf-8") as f:
        return {name: (reply, user) for name, (reply, user) in json.load(f).items()}


class FloorFeedback(feedback_pb2_grpc.FeedbackServiceServicer):
    def __init__(self, pool):
        self._pool = pool
        self._reports = ReportStore(pool)
        self._turns = _floor_turns()
        # The background half of the create's durable write (migration 0095: the quote is indexed behind
        # the INSERT), run here as in the service, so that the floor prices the design's whole cost.
        self.quote_index = QuoteIndexer(QuoteStore(pool))

    async def CreateFeedback(self, request, context):  # noqa: N802
        f = request.feedback
        instance = f.message.split("/messages/", 1)[0]
        text, user = self._turns.get(f.message, ("r" * FLOOR_REPLY_CHARS, "question"))
        snapshot = Snapshot(
            source=domain.SOURCE_CHAT, target_role="ROLE_ASSISTANT", target_text=text,
            target_time=datetime.now(UTC), preceding_user_text=user, trace_id=uuid.uuid4().hex,
            context=Context(agent="reference", model="floor", channel="CHANNEL_TEXT"),
        )
        got = await self._reports.insert_report(NewReport(
            id=new_id(), owner=OWNER, request_id=uuid.UUID(request.request_id),
            fingerprint=hashlib.sha256(request.SerializeToString(deterministic=True)).digest(),
            anchor=Anchor("message", message=f.message, instance=instance, trace_id=snapshot.trace_id),
            surface=Surface(f.surface or 1), author=Author(f.author or 1), body=f.body,
            sentiment=Sentiment(f.sentiment), category=Category(f.category), snapshot=snapshot,
            turn_time=snapshot.target_time, trace_state=TraceState.PENDING,
        ), 86400.0)
        self.quote_index.wake()
        r = got.report
        out = pb.Feedback(name=f"feedback/{r.id}", message=r.anchor.message, body=r.body, sentiment=r.sentiment,
                          snapshot=pb.Snapshot(target_text=r.snapshot.target_text, trace_id=r.snapshot.trace_id))
        out.create_time.FromDatetime(r.create_time)
        return out

    async def PutRating(self, request, context):  # noqa: N802
        return _rating_pb(await self._pool.fetchrow(*_upsert(request)))


def _upsert(request: pb.PutRatingRequest) -> tuple:
    """The service's UPSERT_RATING, bound for this put (statement, *arguments)."""
    r = request.rating
    return UPSERT_RATING.bind({
        **_NAMED, "conversation": r.conversation, "turn_index": r.turn_index, "scope": r.scope,
        "aspect": r.aspect, "artifact_id": r.artifact_id, "sentiment": r.sentiment, "category": r.category,
        "own_sentiment": True, "own_category": True, "own_note": True, "own_reasons": False, "reasons": [],
        "own_choice": False, "choice": "", "id": new_id(), "note": r.note, "message": "", "version": None,
        **PUTS.params(OWNER, uuid.UUID(request.request_id),
                      hashlib.sha256(request.SerializeToString(deterministic=True)).digest()),
    })


def _rating_pb(row) -> pb.Rating:
    out = pb.Rating(
            name=f"ratings/{row['id']}", conversation=row["conversation"], turn_index=row["turn_index"],
            user=row["owner"], scope=row["scope"], aspect=row["aspect"], sentiment=row["sentiment"],
            version=row["version"], etag=etag(row["version"], row["id"]),
        )
    out.create_time.FromDatetime(row["create_time"])
    out.update_time.FromDatetime(row["update_time"])
    return out


class FloorFeedbackGrouped(FloorFeedback):
    """A floor that moves (issue 29: "a design that moves the floor itself"): group commit of concurrent
    puts. The puts that arrive while a group is at PostgreSQL wait and go as the next group: one
    pipelined round trip of the same UPSERT_RATING per put (asyncpg `fetchmany`: one transaction, one
    commit, one WAL flush a group). An experiment, not a service design: one failing put fails its group."""

    def __init__(self, pool):
        super().__init__(pool)
        self._waiting: list[tuple[tuple, asyncio.Future]] = []
        self._sending = False

    async def PutRating(self, request, context):  # noqa: N802
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((_upsert(request), done))
        if not self._sending:
            self._sending = True
            asyncio.get_running_loop().create_task(self._send())
        return _rating_pb(await done)

    async def _send(self) -> None:
        try:
            while self._waiting:
                group, self._waiting = self._waiting, []
                statement = group[0][0][0]  # each bound put is (UPSERT_RATING's text, *its arguments)
                try:
                    got = await self._pool.fetchmany(statement, [bound[1:] for bound, _ in group])
                except Exception as e:  # noqa: BLE001 - the group's callers see it
                    for _, done in group:
                        done.set_exception(e)
                    continue
                for (_, done), row in zip(group, got, strict=True):
                    done.set_result(row)
        finally:
            self._sending = False


class FloorAgent(agent_pb2_grpc.AgentServiceServicer):
    async def Think(self, request, context):  # noqa: N802
        return agent_pb2.ThinkResponse(content="r" * FLOOR_REPLY_CHARS, model="floor")


class FloorGateway(chat_pb2_grpc.ChatServiceServicer):
    def __init__(self, repo: Repository, agent: agent_pb2_grpc.AgentServiceStub, history: int = 20):
        self._repo, self._agent, self._history = repo, agent, history

    async def SendMessage(self, request, context):  # noqa: N802
        instance_id = request.instance.removeprefix("instances/")
        turn = TurnInput(instance_id, request.content, Channel(request.channel or 1), "", "", None)
        trace_id = uuid.uuid4().hex
        user, history = await self._repo.begin_turn(
            OWNER, turn, trace_id, new_id(), datetime.now(UTC), self._history
        )
        md = (*context.invocation_metadata(), ("traceparent", TRACEPARENT))
        reply = await self._agent.Think(
            agent_pb2.ThinkRequest(
                instance=request.instance, content=request.content, turn_index=user.turn_index,
                user_message=user.name,
                history=[agent_pb2.ConversationMessage(role=int(h.role), content=h.content, name=h.name,
                                                       turn_index=h.turn_index) for h in history],
            ),
            metadata=[(k, v) for k, v in md if k in ("authorization", "traceparent")],
            timeout=30,
        )
        msg = Message(
            instance_id=instance_id, id=new_id(), role=Role.ASSISTANT, content=reply.content, trace_id=trace_id,
            turn_index=user.turn_index, create_time=datetime.now(UTC), model=reply.model, agent=user.agent,
        )
        await self._repo.finish_turn(OWNER, msg)
        return chat_pb2.SendMessageResponse(user_message=message_pb(user), reply=message_pb(msg), trace_id=trace_id)


async def _serve(kind: str, port: int, db: str | None, agent_port: int | None) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    if kind == "agent":
        agent_pb2_grpc.add_AgentServiceServicer_to_server(FloorAgent(), server)
    elif kind in ("feedback", "feedback-grouped"):
        pool = await feedback_pool(db, 2, 10)  # the service's: jsonb codecs, no reset
        floor = FloorFeedback(pool) if kind == "feedback" else FloorFeedbackGrouped(pool)
        floor.quote_index.start()
        feedback_pb2_grpc.add_FeedbackServiceServicer_to_server(floor, server)
    else:
        pool = await create_pool(db, "chat", reset=skip_reset)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{agent_port}")
        chat_pb2_grpc.add_ChatServiceServicer_to_server(
            FloorGateway(Repository(pool), agent_pb2_grpc.AgentServiceStub(channel)), server
        )
    probe = health.aio.HealthServicer()  # only so that `wait_serving` sees it up; not on the measured path
    health_pb2_grpc.add_HealthServicer_to_server(probe, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await probe.set("", health_pb2.HealthCheckResponse.SERVING)
    print(f"floor {kind} listening on port {bound}", flush=True)  # port 0: the parent reads the one it got
    await server.wait_for_termination()


async def start_floor(kind: str, db: str | None = None, agent_port: int | None = None,
                      env: dict[str, str] | None = None) -> tuple[subprocess.Popen, int]:
    """Start floor server `kind` (feedback | feedback-grouped | agent | gateway) as its own process on a port it binds
    (port 0, printed back) and wait until it serves: (the process, its port). The caller kills it (it
    holds no state worth a graceful stop)."""
    args = [sys.executable, "-m", "tests.bench.floor", kind, "0"]
    args += [db or "", str(agent_port)] if kind == "gateway" else [db] if db else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT_ROOT), str(PROJECT_ROOT / "gen")]), **(env or {})}
    proc = subprocess.Popen(args, cwd=PROJECT_ROOT, env=env, start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
        if not line.startswith(f"floor {kind} listening on port "):
            raise RuntimeError(f"floor {kind} did not start (exit {proc.poll()}): {line[:200]!r}")
        port = int(line.rsplit(" ", 1)[1])
        await wait_serving(f"127.0.0.1:{port}", 60, proc)
    except BaseException:
        proc.kill()
        raise
    return proc, port


if __name__ == "__main__":
    args = sys.argv[1:]
    uvloop.run(_serve(args[0], int(args[1]), args[2] if len(args) > 2 else None,
                      int(args[3]) if len(args) > 3 else None))
