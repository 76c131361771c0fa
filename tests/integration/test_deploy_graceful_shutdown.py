"""Graceful shutdown as Kubernetes and compose drive it: SIGTERM to a service process under load.

Each service runs as a real subprocess through its entry point (what the image runs), against the test
PostgreSQL: the trace collector (eight OTLP exporters sending large Export requests) and the feedback
service (eight clients creating feedback; the chat service is down, so the client snapshot is kept).
Writes are stalled on a table lock while SIGTERM arrives, so every client's call is provably in flight.
A health Watch stream is open; then the process gets SIGTERM. What must hold (docs/architecture.md "Spans": the collector
acknowledges only after commit; style.md server wiring: NOT_SERVING → stop(grace) → pool close):
- health goes NOT_SERVING (the Watch stream sees it) before the listener goes away;
- every call in flight at SIGTERM finishes with OK: the server drains it instead of cutting it;
- every call ends OK or with a retryable code (nothing acknowledged), never INTERNAL/UNKNOWN/...;
- nothing acknowledged is lost: every span of every OK Export is in `traces.spans`, every feedback
  returned by CreateFeedback is a row in `feedback.feedback`, after the exit;
- the process exits 0 within its shutdown grace.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from agentfeedback.feedback.v1 import feedback_pb2, feedback_pb2_grpc
from services.common.health import wait_serving
from services.common.auth import mint_token
from tests.helpers.procs import reported_port
from tests.helpers.ports import closed_port
from tests.helpers.scrape import scrape, value

WORKERS = 8
SPANS_PER_EXPORT = 2000
GRACE_S = 10.0
# Deadlines of the waits for a condition (a loaded machine takes seconds where an idle one takes ms):
# every worker has had a call acknowledged; every worker's call is held by the server on the stall.
START_DEADLINE_S = 90.0  # the process's start-up, to its port logged and SERVING
LOAD_DEADLINE_S = 60.0
HELD_DEADLINE_S = 30.0
# opentelemetry-proto docs/specification.md, "OTLP/gRPC Response" → retryable gRPC codes (subset seen here).
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}
JWT_SECRET = "shutdown-test-secret-0123456789abcdef"
# Writes stalled this long before SIGTERM when the server's held calls cannot be counted (no `held_fn`),
# and kept stalled this long after NOT_SERVING (stop(grace) has begun): see sigterm_under_load.
STALL_BEFORE_SIGTERM_S = 0.5
STALL_AFTER_NOT_SERVING_S = 0.5


def _export_request(trace_id: bytes, first_span: int) -> trace_service_pb2.ExportTraceServiceRequest:
    now = time.time_ns()
    spans = [
        trace_pb2.Span(
            trace_id=trace_id,
            span_id=(first_span + i).to_bytes(8, "big"),
            name="load.span",
            kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=now - 1_000_000,
            end_time_unix_nano=now,
            attributes=[common_pb2.KeyValue(key="i", value=common_pb2.AnyValue(int_value=i))],
        )
        for i in range(SPANS_PER_EXPORT)
    ]
    resource = resource_pb2.Resource(attributes=[
        common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value="shutdown-load"))])
    return trace_service_pb2.ExportTraceServiceRequest(resource_spans=[
        trace_pb2.ResourceSpans(resource=resource, scope_spans=[trace_pb2.ScopeSpans(spans=spans)])])


@dataclass
class Call:
    key: str
    worker: int
    started: float
    ended: float = 0.0
    code: grpc.StatusCode | None = None
    details: str = ""
    # Set when the call raised something other than an RPC error (e.g. the check of its answer):
    # its worker stopped, so the call is neither in flight nor answered.
    error: str = ""


@dataclass
class Load:
    calls: list[Call] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)


# One call of the load: (channel, worker, n) → the key of what the server acknowledged (raises AioRpcError).
CallFn = Callable[[grpc.aio.Channel, int, int], Awaitable[str]]
# How many calls the server holds stalled on the locked table: (the test's connection, the service's log).
HeldFn = Callable[[asyncpg.Connection, Path], Awaitable[int]]


async def _client(port: int, load: Load, worker: int, call_fn: CallFn) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        n = 0
        while not load.stop.is_set():
            n += 1
            call = Call(key="", worker=worker, started=time.monotonic())
            load.calls.append(call)
            try:
                call.key = await call_fn(ch, worker, n)
                call.code = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as e:
                call.code = e.code()
                call.details = e.details() or ""
            except Exception as e:
                call.error = f"{type(e).__name__}: {e}"[:300]
                call.ended = time.monotonic()
                return
            call.ended = time.monotonic()
            if call.code != grpc.StatusCode.OK:
                return  # the server is going away; a client would back off and retry elsewhere


async def _wait_serving(port: int, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    await wait_serving(f"127.0.0.1:{port}", timeout_s, proc)


async def _watch_health(stub: health_pb2_grpc.HealthStub, seen: list[tuple[float, int]]) -> None:
    call = stub.Watch(health_pb2.HealthCheckRequest(service=""))
    try:
        async for r in call:
            seen.append((time.monotonic(), r.status))
            if r.status == health_pb2.HealthCheckResponse.NOT_SERVING:
                # Release the stream at once: an open Watch would hold the drain for the whole grace.
                call.cancel()
                return
    except (grpc.aio.AioRpcError, asyncio.CancelledError):
        return


async def _until(what: Callable[[], Awaitable[bool]], deadline_s: float) -> None:
    """Return once `what()` holds (checked every 10 ms) or `deadline_s` has passed: the caller's
    assertion then names what did not happen."""
    deadline = time.monotonic() + deadline_s
    while not await what() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


async def sigterm_under_load(entry_point: str, env: dict[str, str], port_logged: str, call_fn: CallFn,
                             held_fn: HeldFn | None, log_path: Path, database_url: str, table: str) -> list[str]:
    """Start `entry_point` (its listener on port 0; `port_logged`: the regex of its log line naming the port
    it got, group 1), load it with WORKERS concurrent clients, stall its writes, SIGTERM it, and check
    the shutdown properties of the module docstring seen from outside. Returns the acknowledged keys.

    The stall makes "in flight" certain rather than a matter of timing: the test holds a SHARE lock on
    `table` (what every call writes), and SIGTERM is sent once `held_fn` sees every client's call inside
    the server waiting for the database (without one: STALL_BEFORE_SIGTERM_S after the lock); the lock is released only after the server has reported NOT_SERVING and waited
    STALL_AFTER_NOT_SERVING_S in stop(grace). A drained call then ends OK after that release; with a grace
    of 0 it would be cancelled (checked by hand: the test fails)."""
    exe = Path(sys.executable).parent / entry_point
    assert exe.exists(), f"entry point {entry_point} not installed (pip install -e .)"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(exe)], env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
    locker = await asyncpg.connect(database_url)
    load = Load()
    tasks: list[asyncio.Task] = []
    health_ch = None
    try:
        port = await reported_port(log_path, proc, port_logged, timeout_s=START_DEADLINE_S)
        health_ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        await _wait_serving(port, proc, START_DEADLINE_S)
        workers = [asyncio.create_task(_client(port, load, w, call_fn)) for w in range(WORKERS)]
        seen: list[tuple[float, int]] = []
        watcher = asyncio.create_task(_watch_health(health_pb2_grpc.HealthStub(health_ch), seen))
        tasks = [*workers, watcher]

        def acked_workers() -> int:
            return len({c.worker for c in load.calls if c.code == grpc.StatusCode.OK})

        async def loaded() -> bool:
            return acked_workers() == WORKERS or any(t.done() for t in workers)

        await _until(loaded, LOAD_DEADLINE_S)
        acked_before = acked_workers()
        assert acked_before == WORKERS, (
            f"not under load: {acked_before} of {WORKERS} clients had a call acknowledged before SIGTERM; "
            f"{[(c.code, c.details) for c in load.calls if c.code not in (None, grpc.StatusCode.OK)][:3]}")

        stall = locker.transaction()
        await stall.start()
        await locker.execute(f"LOCK TABLE {table} IN SHARE MODE")  # blocks INSERT/COPY, not reads

        if held_fn is None:
            await asyncio.sleep(STALL_BEFORE_SIGTERM_S)
        else:
            async def all_held() -> bool:
                return await held_fn(locker, log_path) >= WORKERS

            await _until(all_held, HELD_DEADLINE_S)
        died = [c.error for c in load.calls if c.error]
        assert not died, f"{len(died)} clients stopped on an unexpected error: {died[:3]}"
        in_flight = [c for c in load.calls if c.code is None]
        held = WORKERS if held_fn is None else await held_fn(locker, log_path)
        # Each client's last call, for a failure message: (code, seconds since it started).
        last_calls = [(c.code, round(time.monotonic() - c.started, 2)) for c in load.calls[-2 * WORKERS:]]
        sigterm_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        deadline = sigterm_at + 10
        while not any(s == health_pb2.HealthCheckResponse.NOT_SERVING for _, s in seen):
            assert time.monotonic() < deadline, f"no NOT_SERVING within 10 s of SIGTERM: {seen}"
            await asyncio.sleep(0.01)
        await asyncio.sleep(STALL_AFTER_NOT_SERVING_S)
        released_at = time.monotonic()
        await stall.rollback()
        # Workers stop after their first non-OK answer (the listener is gone).
        await asyncio.wait(workers, timeout=GRACE_S + 20)
        load.stop.set()
        await asyncio.gather(*workers, return_exceptions=True)
        await asyncio.wait_for(watcher, timeout=GRACE_S + 5)
        rc = await asyncio.to_thread(proc.wait, GRACE_S + 20)
        exited_after = time.monotonic() - sigterm_at
    finally:
        load.stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if health_ch is not None:
            await health_ch.close()
        await locker.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    logs = log_path.read_text(errors="replace")[-3000:]
    assert rc == 0, f"{entry_point} exited with {rc}:\n{logs}"
    assert exited_after < GRACE_S + 10, f"shutdown took {exited_after:.1f} s"

    # Health: SERVING while running, then NOT_SERVING after SIGTERM (while calls are still draining).
    statuses = [s for _, s in seen]
    assert statuses and statuses[0] == health_pb2.HealthCheckResponse.SERVING, statuses
    not_serving_seen = next(t for t, s in seen if s == health_pb2.HealthCheckResponse.NOT_SERVING)
    assert sigterm_at <= not_serving_seen < released_at

    # Every call ended OK, or with a code a client retries (nothing acknowledged): UNAVAILABLE once the
    # listener is gone; CANCELLED for a request grpc-core had received but not yet handed to the server
    # when stop() began (grpc kills such pending calls; the OTLP spec lists CANCELLED as retryable).
    codes = {c.code for c in load.calls if c.code is not None}
    assert codes <= RETRYABLE | {grpc.StatusCode.OK}, [
        (c.code, c.details, round(c.started - sigterm_at, 3), round(c.ended - sigterm_at, 3))
        for c in load.calls if c.code not in (grpc.StatusCode.OK, None)]
    # Every call in flight at SIGTERM (stalled on the database) finished OK once the database moved again.
    assert len(in_flight) == WORKERS, f"{len(in_flight)} calls in flight at SIGTERM, expected {WORKERS}"
    assert held >= WORKERS, (f"{held} calls held by the server on the stall at SIGTERM, expected {WORKERS};"
                             f" the last calls (code, age s): {last_calls}\n{logs}")
    not_drained = [(c.code, c.details, round(c.ended - released_at, 3)) for c in in_flight
                   if c.code != grpc.StatusCode.OK or c.ended < released_at]
    assert not not_drained, f"in-flight calls not drained: {not_drained}\n{logs}"
    return [c.key for c in load.calls if c.code == grpc.StatusCode.OK]


def _base_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return {
        "AGENTFEEDBACK_DATABASE_URL": database_url,
        "AGENTFEEDBACK_DATA_DIR": str(tmp_path),
        "AGENTFEEDBACK_JWT_SECRET": JWT_SECRET,
        "AGENTFEEDBACK_SHUTDOWN_GRACE_S": str(GRACE_S),
        "OTEL_TRACES_EXPORTER": "none",
    }


async def test_collector_sigterm_under_load_drains_and_loses_no_acknowledged_span(database_url: str,
                                                                                  tmp_path: Path):
    env = {
        **_base_env(database_url, tmp_path),
        "AGENTFEEDBACK_COLLECTOR_OTLP_GRPC_LISTEN": "127.0.0.1:0",
        "AGENTFEEDBACK_COLLECTOR_OTLP_HTTP_HOST": "127.0.0.1",
        "AGENTFEEDBACK_COLLECTOR_OTLP_HTTP_PORT": "0",
        "AGENTFEEDBACK_COLLECTOR_QUERY_LISTEN": "127.0.0.1:0",
        "AGENTFEEDBACK_COLLECTOR_METRICS_LISTEN": "127.0.0.1:0",  # its span queue: what `held` reads
    }

    async def export(ch: grpc.aio.Channel, worker: int, n: int) -> str:
        trace_id = os.urandom(8) + worker.to_bytes(4, "big") + n.to_bytes(4, "big")
        resp = await trace_service_pb2_grpc.TraceServiceStub(ch).Export(_export_request(trace_id, 1), timeout=60)
        assert not resp.partial_success.rejected_spans, resp.partial_success.error_message
        return trace_id.hex()

    async def held(_conn: asyncpg.Connection, log: Path) -> int:
        # An Export reserves its spans in the write queue on arrival and holds them until committed;
        # its COPY waits on the lock (group commit: fewer COPYs than Exports, so not countable in pg_locks).
        port = int(re.search(r"metrics (\d+)", log.read_text(errors="replace")).group(1))
        return int(value(await scrape(port), "otelcol_exporter_queue_size", exporter="postgresql")) // SPANS_PER_EXPORT

    acked = await sigterm_under_load("agentfeedback-tracecollector", env, r"OTLP/gRPC (\d+), OTLP/HTTP", export,
                                     held, tmp_path / "collector.log", database_url, "traces.spans")
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT trace_id, count(DISTINCT span_id) AS n FROM traces.spans WHERE trace_id = ANY($1::bytea[])"
            " GROUP BY trace_id", [bytes.fromhex(t) for t in acked])
    finally:
        await conn.close()
    stored = {bytes(r["trace_id"]).hex(): r["n"] for r in rows}
    missing = [t for t in acked if stored.get(t, 0) != SPANS_PER_EXPORT]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged Exports not fully stored: {missing[:5]}"


@pytest.fixture
def closed_ports():
    """`closed_ports(n)`: n loopback ports where nothing listens until the test ends (tests.helpers.ports)."""
    with contextlib.ExitStack() as held:
        yield lambda n: [held.enter_context(closed_port()) for _ in range(n)]


async def test_feedback_sigterm_under_load_drains_and_loses_no_acknowledged_row(database_url: str,
                                                                                tmp_path: Path, closed_ports):
    chat_down, traces_down = closed_ports(2)
    env = {
        **_base_env(database_url, tmp_path),
        "AGENTFEEDBACK_FEEDBACK_LISTEN": "127.0.0.1:0",
        # Nothing listens there: snapshots fall back to the client's (capture never fails).
        "AGENTFEEDBACK_FEEDBACK_CHAT_TARGET": f"127.0.0.1:{chat_down}",
        "AGENTFEEDBACK_FEEDBACK_TRACES_TARGET": f"127.0.0.1:{traces_down}",
        "AGENTFEEDBACK_FEEDBACK_TRACKER_MARKDOWN_DIR": str(tmp_path / "tickets"),
        # One owner writing at machine speed is exactly what the per-owner quota refuses; this test is
        # about draining on SIGTERM, so the quota is off here (quotas have their own tests).
        "AGENTFEEDBACK_WRITE_QUOTA_PER_MINUTE": "0",
    }
    md = (("authorization", f"Bearer {mint_token(JWT_SECRET, 'owner-shutdown')}"),)

    async def create(ch: grpc.aio.Channel, worker: int, n: int) -> str:
        trace_id = uuid.uuid4().hex
        fb = await feedback_pb2_grpc.FeedbackServiceStub(ch).CreateFeedback(
            feedback_pb2.CreateFeedbackRequest(
                feedback=feedback_pb2.Feedback(trace_id=trace_id, instance="instances/shutdown", body=f"worker {worker} call {n}: wrong answer",
                                               sentiment=feedback_pb2.SENTIMENT_BAD,
                                               surface=feedback_pb2.SURFACE_CHAT),
                request_id=str(uuid.uuid4()),
                client_snapshot=feedback_pb2.Snapshot(target_role="ROLE_ASSISTANT", target_text="the reply",
                                                      trace_id=trace_id),
            ),
            metadata=md, timeout=60)
        assert fb.name.startswith("feedback/"), fb.name
        return fb.name.removeprefix("feedback/")

    acked = await sigterm_under_load("agentfeedback-feedback", env, r"FeedbackService listening on port (\d+)", create,
                                     None, tmp_path / "feedback.log", database_url, "feedback.feedback")
    conn = await asyncpg.connect(database_url)
    try:
        stored = {r["id"] for r in await conn.fetch("SELECT id FROM feedback.feedback WHERE id = ANY($1::text[])",
                                                    acked)}
    finally:
        await conn.close()
    missing = sorted(set(acked) - stored)
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged feedback rows not stored: {missing[:5]}"
