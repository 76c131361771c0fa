"""The stack as real OS processes for fault tests (each service's own `main()`), on one database."""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.common.auth import ALL_SCOPES, mint_token
from tests.helpers.ports import free_ports, start_owning
from tests.stack import TEST_JWT_SECRET

ROOT = Path(__file__).resolve().parents[2]
MODULES = {
    "collector": ("services.tracecollector.main", "query"),
    "agent": ("services.chat.agent.main", "agent"),
    "chat": ("services.chat.main", "chat"),
    "feedback": ("services.feedback.main", "feedback"),
}
OWN = {"collector": ("otlp", "otlp_http", "query"), "agent": ("agent",), "chat": ("chat",), "feedback": ("feedback",)}


@dataclass
class Procs:
    """The services as processes. Ports are picked free before each starts (the processes point at
    each other); `start` checks the child listens on its own ports and, on a collision with another
    process, moves it (tests.helpers.ports) and restarts what it had started pointing at the old port."""

    env: dict[str, str]
    ports: dict[str, int]
    running: dict[str, subprocess.Popen] = field(default_factory=dict)
    extra: dict[str, dict[str, str]] = field(default_factory=dict)

    def md(self, sub: str = "alice"):
        return (("authorization", f"Bearer {mint_token(TEST_JWT_SECRET, sub, ALL_SCOPES)}"),)

    def target(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[MODULES[name][1]]}"

    async def start(self, name: str, **env: str) -> subprocess.Popen:
        module, health = MODULES[name]
        self.extra[name] = env

        def spawn(base) -> subprocess.Popen:
            return subprocess.Popen([sys.executable, "-m", module], env={**base, **env}, cwd=ROOT,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

        proc, moved = await start_owning(spawn, self.env, self.ports, OWN[name], health)
        self.running[name] = proc
        for other in [n for n in self.running if n != name and moved]:  # they point at an old port
            self.kill(other)
            await self.start(other, **self.extra[other])
        return proc

    def kill(self, name: str) -> None:
        """SIGKILL: no drain, no flush — whatever the process held in memory is gone."""
        proc = self.running.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop_all(self) -> None:
        for proc in self.running.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.running.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.running.clear()


def make_procs(database_url: str, data_dir: Path, **extra: str) -> Procs:
    otlp, otlp_http, query, chat, agent, feedback = free_ports(6)
    ports = {"otlp": otlp, "otlp_http": otlp_http, "query": query, "chat": chat, "agent": agent,
             "feedback": feedback}
    env = {
        **os.environ,
        "AGENTFEEDBACK_DATABASE_URL": database_url,
        "AGENTFEEDBACK_DATA_DIR": str(data_dir),
        "AGENTFEEDBACK_JWT_SECRET": TEST_JWT_SECRET,
        "AGENTFEEDBACK_LOG_LEVEL": "WARNING",
        "AGENTFEEDBACK_SHUTDOWN_DRAIN_S": "0",
        "AGENTFEEDBACK_SHUTDOWN_GRACE_S": "1",
        "AGENTFEEDBACK_AGENT_LISTEN": f"127.0.0.1:{agent}",
        "AGENTFEEDBACK_AGENT_THINK_MS": "0",
        "AGENTFEEDBACK_CHAT_LISTEN": f"127.0.0.1:{chat}",
        "AGENTFEEDBACK_CHAT_AGENT_TARGET": f"127.0.0.1:{agent}",
        "AGENTFEEDBACK_AGENT_FEEDBACK_TARGET": f"127.0.0.1:{feedback}",
        "AGENTFEEDBACK_FEEDBACK_LISTEN": f"127.0.0.1:{feedback}",
        "AGENTFEEDBACK_FEEDBACK_CHAT_TARGET": f"127.0.0.1:{chat}",
        "AGENTFEEDBACK_FEEDBACK_TRACES_TARGET": f"127.0.0.1:{query}",
        "AGENTFEEDBACK_FEEDBACK_TRACKER_MARKDOWN_DIR": str(data_dir / "tickets"),
        "AGENTFEEDBACK_COLLECTOR_OTLP_GRPC_LISTEN": f"127.0.0.1:{otlp}",
        "AGENTFEEDBACK_COLLECTOR_OTLP_HTTP_PORT": str(otlp_http),
        "AGENTFEEDBACK_COLLECTOR_QUERY_LISTEN": f"127.0.0.1:{query}",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp}",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "gen")]),
        **extra,
    }
    return Procs(env=env, ports=ports)


async def start_with_buffered_chat(procs: Procs) -> None:
    """Collector, agent, a chat gateway whose spans stay in its exporter's buffer (10 min schedule
    delay: a SIGKILL loses them, as when a process dies), and the feedback service."""
    await procs.start("collector", OTEL_TRACES_EXPORTER="none")
    await procs.start("agent")
    await procs.start("chat", OTEL_BSP_SCHEDULE_DELAY="600000")
    await procs.start("feedback")


async def report_then_kill_chat(procs: Procs, chat, fb):
    """A turn, a report on its reply, then SIGKILL of the chat process (its `chat.turn` span is lost).
    Returns (turn, report, monotonic time of the turn's end)."""
    md = procs.md()
    inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="k", agent="reference")), metadata=md)
    turn = await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content="hello",
                                                              request_id=str(uuid.uuid4())), metadata=md)
    t0 = time.monotonic()
    report = await fb.CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(message=turn.reply.name, body="wrong"), request_id=str(uuid.uuid4())), metadata=md)
    procs.kill("chat")
    return turn, report, t0


async def wait_for(fn, timeout_s: float, what: str):
    """`await fn()` every 0.1 s until it returns something other than None (returned); AssertionError
    naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = await fn()
        if got is not None:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout_s} s")
        await asyncio.sleep(0.1)


async def user_message_stored(chat, instance: str, md, timeout_s: float = 10.0) -> None:
    """Returns once the chat service lists the turn's user message ("think hard") of `instance`."""

    async def listed():
        msgs = (await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=instance), metadata=md)).messages
        return True if any(m.role == chat_pb2.ROLE_USER and m.content == "think hard" for m in msgs) else None

    await wait_for(listed, timeout_s, "the user message stored")


@contextlib.asynccontextmanager
async def turn_killed_midway(procs, think_ms: int, victim: str):
    """Collector (exporting nowhere), an agent thinking `think_ms` per turn and the chat gateway; a new
    instance and a SendMessage ("think hard", a request id) and, once its user message is stored (the
    agent called next, thinking for `think_ms`), SIGKILL of `victim`: the call must fail UNAVAILABLE.
    Yields (chat stub on a channel kept open, instance, request)."""
    await procs.start("collector", OTEL_TRACES_EXPORTER="none")
    await procs.start("agent", AGENTFEEDBACK_AGENT_THINK_MS=str(think_ms))
    await procs.start("chat")
    md = procs.md()
    async with grpc.aio.insecure_channel(procs.target("chat")) as cch:
        chat = chat_pb2_grpc.ChatServiceStub(cch)
        inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name="k", agent="reference")), metadata=md)
        req = chat_pb2.SendMessageRequest(instance=inst.name, content="think hard", request_id=str(uuid.uuid4()))
        first = asyncio.ensure_future(chat.SendMessage(req, metadata=md, timeout=30))
        await user_message_stored(chat, inst.name, md)
        assert not first.done(), "the turn ended before the kill: the agent's think time is too short"
        procs.kill(victim)
        try:
            await first
            raise AssertionError(f"the turn succeeded although the {victim} was killed")
        except grpc.aio.AioRpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, (e.code(), e.details())
        yield chat, inst, req
