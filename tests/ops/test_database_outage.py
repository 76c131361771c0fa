"""PostgreSQL stopped and started again under a steady mixed load (the real embedded server, its own
cluster so the session's is untouched), as an SRE would see it:

- every call that failed during the outage is UNAVAILABLE with RetryInfo and an ErrorInfo reason
  (never INTERNAL or UNKNOWN); a failed SendMessage names its trace id;
- each server's health goes NOT_SERVING within 2 s of the database going away and SERVING within
  1 s of its return; the liveness service stays SERVING;
- nothing acknowledged is lost (every OK turn, report and exported span is there afterwards);
- the first calls after the database is back succeed within 1 s;
- the logs hold a few lines per incident, not one traceback per failed call; each line has a UTC
  time with its offset, and a line about a request carries its trace id in the trace_id field.
"""
from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from agentfeedback.traces.v1 import traces_pb2
from services.common.db import embedded_postgres_server
from services.common.errors import error_info, status_details
from services.common.server import LIVENESS_SERVICE
from services.common.telemetry import log_handler
from tests.helpers.procs import start_postgres_again, stop_postgres_fast
from tests.stack import start_stack

OUTAGE_S = 4.0
pytestmark = pytest.mark.slow


@dataclass
class Call:
    t: float
    what: str
    ok: bool
    code: grpc.StatusCode | None = None
    reason: str = ""
    retry_info: bool = False
    trace_id: str = ""
    key: str = ""  # what to look up afterwards for an acknowledged write


@dataclass
class Record:
    calls: list[Call] = field(default_factory=list)
    health: dict[str, list[tuple[float, int]]] = field(default_factory=dict)

    def add_failure(self, what: str, e: grpc.aio.AioRpcError) -> None:
        info = error_info(e)
        retry = any(d.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for d in status_details(e))
        self.calls.append(Call(time.monotonic(), what, False, e.code(), info.reason if info else "", retry,
                               info.metadata.get("trace_id", "") if info else ""))


def _span_request(trace_id: bytes) -> trace_service_pb2.ExportTraceServiceRequest:
    now = time.time_ns()
    span = trace_pb2.Span(trace_id=trace_id, span_id=os.urandom(8), name="outage-load",
                          start_time_unix_nano=now - 1000, end_time_unix_nano=now)
    return trace_service_pb2.ExportTraceServiceRequest(resource_spans=[trace_pb2.ResourceSpans(
        scope_spans=[trace_pb2.ScopeSpans(spans=[span])])])


async def test_database_outage_under_load_is_unavailable_with_retry_info_and_health_follows(tmp_path: Path, caplog):
    # Its own cluster (as tests/conftest.py makes the session's: under a fresh /tmp directory the
    # server's system user can enter), so stopping it leaves every other test's database alone.
    pg = embedded_postgres_server(Path(tempfile.mkdtemp(prefix="af-outage-pg-")) / "pg", cleanup_mode="delete")
    url = pg.get_uri("postgres")
    stack = await start_stack(url, tmp_path / "data")
    caplog.set_level(logging.WARNING)
    logged = io.StringIO()  # the services' own log format, as written to their log files
    handler = log_handler(logged, "json")
    logging.getLogger().addHandler(handler)
    rec = Record()
    stop = asyncio.Event()
    try:
        md = stack.md()
        chat, fb, traces = stack.chat(), stack.feedback(), stack.traces()
        otlp = trace_service_pb2_grpc.TraceServiceStub(stack.channel("otlp_grpc"))
        inst = (await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name="outage", agent="reference")), metadata=md)).name
        first = await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst, content="hello",
                                                                   request_id=str(uuid.uuid4())), metadata=md)
        await stack.wait_trace(first.trace_id)  # GetTrace below reads a trace that is stored

        async def turns() -> None:
            while not stop.is_set():
                try:
                    r = await chat.SendMessage(chat_pb2.SendMessageRequest(
                        instance=inst, content="still there?", request_id=str(uuid.uuid4())), metadata=md, timeout=5)
                    rec.calls.append(Call(time.monotonic(), "SendMessage", True, key=r.reply.name))
                except grpc.aio.AioRpcError as e:
                    rec.add_failure("SendMessage", e)
                await asyncio.sleep(0.05)

        async def reports() -> None:
            while not stop.is_set():
                try:
                    f = await fb.CreateFeedback(pb.CreateFeedbackRequest(
                        feedback=pb.Feedback(message=first.reply.name, body="outage load"),
                        request_id=str(uuid.uuid4())), metadata=md, timeout=5)
                    rec.calls.append(Call(time.monotonic(), "CreateFeedback", True, key=f.name))
                except grpc.aio.AioRpcError as e:
                    rec.add_failure("CreateFeedback", e)
                await asyncio.sleep(0.05)

        async def reads() -> None:
            while not stop.is_set():
                for what, call in (("GetInstance", chat.GetInstance(chat_pb2.GetInstanceRequest(name=inst), metadata=md,
                                                                    timeout=5)),
                                   ("ListFeedback", fb.ListFeedback(pb.ListFeedbackRequest(page_size=5), metadata=md,
                                                                    timeout=5)),
                                   ("GetTrace", traces.GetTrace(traces_pb2.GetTraceRequest(trace_id=first.trace_id),
                                                                metadata=md, timeout=5))):
                    try:
                        await call
                        rec.calls.append(Call(time.monotonic(), what, True))
                    except grpc.aio.AioRpcError as e:
                        rec.add_failure(what, e)
                await asyncio.sleep(0.05)

        async def exports() -> None:
            while not stop.is_set():
                tid = os.urandom(16)
                try:
                    await otlp.Export(_span_request(tid), timeout=5)
                    rec.calls.append(Call(time.monotonic(), "Export", True, key=tid.hex()))
                except grpc.aio.AioRpcError as e:
                    rec.add_failure("Export", e)
                await asyncio.sleep(0.05)

        async def health(name: str, port_key: str, service: str = "") -> None:
            stub = health_pb2_grpc.HealthStub(stack.channel(port_key))
            seen = rec.health.setdefault(f"{name}{'/' + service if service else ''}", [])
            while not stop.is_set():
                try:
                    st = (await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1)).status
                except grpc.aio.AioRpcError:
                    st = -1
                if not seen or seen[-1][1] != st:
                    seen.append((time.monotonic(), st))
                await asyncio.sleep(0.05)

        tasks = [asyncio.create_task(c) for c in (turns(), reports(), reads(), exports(),
                                                 health("chat", "chat"), health("feedback", "feedback"),
                                                 health("query", "query"), health("otlp", "otlp_grpc"),
                                                 health("chat", "chat", LIVENESS_SERVICE))]
        await asyncio.sleep(1.0)
        log_start = len(caplog.records)
        t_stopping = time.monotonic()
        await stop_postgres_fast(Path(pg.pgdata))
        t_down = time.monotonic()
        await asyncio.sleep(OUTAGE_S)
        await start_postgres_again(Path(pg.pgdata))
        t_up = time.monotonic()
        await asyncio.sleep(2.5)
        stop.set()
        await asyncio.gather(*tasks)
        log_lines = caplog.records[log_start:]

        # Every failure: UNAVAILABLE + RetryInfo + a reason naming what is down; never INTERNAL/UNKNOWN.
        failures = [c for c in rec.calls if not c.ok]
        assert failures, "the outage made no call fail: the database was not really stopped"
        bad = [(c.what, c.code, c.reason, c.retry_info) for c in failures
               if c.code != grpc.StatusCode.UNAVAILABLE or not c.retry_info or not c.reason.endswith("_UNAVAILABLE")]
        assert not bad, f"{len(bad)} of {len(failures)} failed calls were not UNAVAILABLE+RetryInfo+reason: {bad[:5]}"
        assert {c.reason for c in failures} <= {"DATABASE_UNAVAILABLE", "CHAT_UNAVAILABLE"}, {c.reason for c in failures}
        turn_failures = [c for c in failures if c.what == "SendMessage"]
        assert turn_failures and all(len(c.trace_id) == 32 for c in turn_failures), "a failed turn without its trace id"
        for what in ("SendMessage", "CreateFeedback", "GetInstance", "ListFeedback", "GetTrace", "Export"):
            assert any(c.what == what for c in failures), f"{what} never failed during the outage"

        # Health: NOT_SERVING within 2 s of losing the database, SERVING within 1 s of its return.
        for name in ("chat", "feedback", "query", "otlp"):
            seen = rec.health[name]
            down = next((t for t, st in seen if t >= t_stopping and st == health_pb2.HealthCheckResponse.NOT_SERVING),
                        None)
            assert down is not None and down - t_down <= 2.0, (name, seen, t_down)
            up = next((t for t, st in seen if t > down and st == health_pb2.HealthCheckResponse.SERVING), None)
            assert up is not None and up - t_up <= 1.0, (name, [(round(t - t_up, 2), s) for t, s in seen])
        assert [st for _, st in rec.health[f"chat/{LIVENESS_SERVICE}"]] == [health_pb2.HealthCheckResponse.SERVING]

        # The first calls after the database is back succeed within 1 s.
        for what in ("SendMessage", "CreateFeedback", "GetInstance", "ListFeedback", "GetTrace", "Export"):
            ok_after = [c.t for c in rec.calls if c.what == what and c.ok and c.t > t_up]
            assert ok_after and ok_after[0] - t_up <= 1.0, (what, ok_after[:1], t_up)

        # Nothing acknowledged is lost.
        for c in (c for c in rec.calls if c.ok and c.key):
            if c.what == "SendMessage":
                await chat.GetMessage(chat_pb2.GetMessageRequest(name=c.key), metadata=md)
            elif c.what == "CreateFeedback":
                await fb.GetFeedback(pb.GetFeedbackRequest(name=c.key), metadata=md)
            else:
                got = await traces.GetTrace(traces_pb2.GetTraceRequest(trace_id=c.key), metadata=md)
                assert len(got.spans) == 1, c.key

        # A few lines per process and incident (first in full, then counted), not one per failure.
        from collections import Counter  # noqa: PLC0415
        kinds = Counter(f"{r.name}: {r.getMessage()[:70]}" for r in log_lines)
        assert len(log_lines) <= 40, (len(log_lines), len(failures), kinds.most_common(12))
        # No ERROR but the OpenTelemetry SDK's own exporter giving up on a batch the collector refused
        # with UNAVAILABLE (never acknowledged, so not lost by us): ours are WARNING, once per incident.
        errors = [r.getMessage()[:200] for r in log_lines
                  if r.levelno >= logging.ERROR and not r.name.startswith("opentelemetry.exporter")]
        assert not errors, errors[:5]
        # Every line: UTC time with its offset; a line about a request names its trace in the field.
        lines = [json.loads(x) for x in logged.getvalue().splitlines()]
        assert lines and all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", x["time"]) for x in lines)
        for x in lines:
            named = re.search(r"(?:trace_id |turn )([0-9a-f]{32})", x["message"])
            if named:
                assert x["trace_id"] == named.group(1), x
    finally:
        logging.getLogger().removeHandler(handler)
        stop.set()
        await stack.stop()
        await asyncio.to_thread(pg.cleanup)
