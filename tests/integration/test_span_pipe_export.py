"""Spans of a service whose exporter comes from the `OTEL_*` environment leave through its span
export child process (services.common.span_pipe) and arrive whole at a real collector; a killed
child is replaced; shutdown exports what was still queued."""
from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import grpc
import pytest
from opentelemetry.trace import SpanKind, Status, StatusCode

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from services.common.span_pipe import WORKER_MODULE, ProcessSpanProcessor
from services.common.telemetry import setup_tracing


def _children() -> list[int]:
    """Pids of this process's span export children."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and WORKER_MODULE.encode() in cmd and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


@pytest.fixture
def otlp_env(collector, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{collector.ports['otlp_grpc']}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED", "AGENTFEEDBACK_SPAN_EXPORT"):
        monkeypatch.delenv(name, raising=False)
    return collector


async def _arrived(collector, trace_id: int, n: int, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            trace = await collector.get_trace(trace_id.to_bytes(16, "big"))
            if len(trace.spans) >= n:
                return trace
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.NOT_FOUND or time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            return trace
        await asyncio.sleep(0.1)


async def test_spans_arrive_whole_through_the_export_process_which_is_replaced_when_killed(otlp_env):
    tp = setup_tracing("pipe-test")
    tracer = tp.get_tracer("agentfeedback.test")
    try:
        with tracer.start_as_current_span("turn", kind=SpanKind.SERVER, attributes={"gen_ai.system": "x"}) as root:
            root.add_event("chat.in", {"n": 1})
            with tracer.start_as_current_span("tool.call", kind=SpanKind.CLIENT) as child:
                child.set_status(Status(StatusCode.ERROR, "tool failed"))
        tid = root.get_span_context().trace_id
        trace = await _arrived(otlp_env, tid, 2)
        by_name = {s.name: s for s in trace.spans}
        assert set(by_name) == {"turn", "tool.call"}
        assert by_name["turn"].service_name == "pipe-test"
        assert by_name["turn"].attributes["gen_ai.system"] == "x"
        assert by_name["turn"].events[0].name == "chat.in"
        assert by_name["tool.call"].parent_span_id == by_name["turn"].span_id
        assert by_name["tool.call"].status_message == "tool failed"
        (pid,) = _children()  # the export ran in a child, not here

        os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(0.3)
        with tracer.start_as_current_span("after.kill") as later:
            pass
        trace = await _arrived(otlp_env, later.get_span_context().trace_id, 1)
        assert [s.name for s in trace.spans] == ["after.kill"]  # a new child exported it
        assert _children() and pid not in _children()
    finally:
        await asyncio.to_thread(tp.shutdown)
    assert _children() == []  # shutdown stopped the child


async def test_a_batch_handed_to_a_child_that_dies_before_exporting_it_is_sent_again(otlp_env, caplog):
    # The processor setup_tracing installs, built here so the test can see its unconfirmed batches.
    processor = ProcessSpanProcessor(Resource.create({"service.name": "pipe-test"}), "pipe-test")
    tp = TracerProvider(resource=Resource.create({"service.name": "pipe-test"}))
    tp.add_span_processor(processor)
    try:
        (pid,) = _children()
        os.kill(pid, signal.SIGSTOP)  # it takes the batch into its pipe but cannot export it
        with tp.get_tracer("agentfeedback.test").start_as_current_span("handed.over") as s:
            pass
        deadline = time.monotonic() + 10
        while processor.unconfirmed_spans() != 1:  # the batch went down the pipe, unconfirmed
            assert time.monotonic() < deadline, "the batch never left for the stopped child"
            await asyncio.sleep(0.02)
        os.kill(pid, signal.SIGKILL)
        trace = await _arrived(otlp_env, s.get_span_context().trace_id, 1)
        assert [x.name for x in trace.spans] == ["handed.over"]  # the next child exported it
        assert any("is gone; starting another (1 spans to resend)" in r.getMessage() for r in caplog.records)
    finally:
        await asyncio.to_thread(tp.shutdown)


@pytest.mark.parametrize("name,value", [("OTEL_BSP_SCHEDULE_DELAY", "0"), ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "-1"),
                                        ("OTEL_BSP_MAX_QUEUE_SIZE", "many")])
def test_a_bsp_value_that_is_not_a_positive_integer_stops_the_service_at_start(otlp_env, monkeypatch, name, value):
    """Left alone, a zero delay or batch size spun the export thread at 100 % CPU (a tester found it)."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        setup_tracing("pipe-test")
    assert _children() == []


async def test_shutdown_exports_the_spans_still_queued(otlp_env, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")  # nothing leaves on the schedule
    tp = setup_tracing("pipe-test")
    with tp.get_tracer("agentfeedback.test").start_as_current_span("queued") as s:
        pass
    await asyncio.to_thread(tp.shutdown)
    assert _children() == []
    trace = await _arrived(otlp_env, s.get_span_context().trace_id, 1, timeout_s=5)
    assert [x.name for x in trace.spans] == ["queued"]
