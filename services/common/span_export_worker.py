"""The span export child of a service (`services.common.span_pipe`): reads batches of compacted spans
on stdin, encodes them as OTLP requests on the parent's resource (`services.common.otlp_spans`, each
request's spans within `telemetry.EXPORT_REQUEST_MAX_BYTES`) and exports them with the exporter the
`OTEL_*` environment asks for (`telemetry.make_exporter(requests=True)`). Every message
(`spans` or `flush`) is answered with one line on stdout once handled: `<sequence number> <spans
dropped by the spool so far> <spans in the spool>` (a batch: exported, spooled, or — without a
spool — given up by the exporter's own retries). Exits at end of input.

With a spool (config `spool_dir`, `services.common.span_spool`), a batch the exporter fails is
written there and a resender thread sends the spool again, oldest first (backing off 0.5 s → 5 s
while the collector refuses), until the collector takes it; while the collector refuses, new
batches go straight to the spool (the reader never waits on a failing export, so the parent's pipe
keeps moving). The exporter then gives up after `SPOOLED_EXPORT_TIMEOUT_S` (the spool retries, not
the exporter). What is spooled at exit stays on disk for the next process.

A deferred record (`span_pipe.record_deferred`: a span the parent sent as the fields it is built
from, e.g. a rating's `feedback.evaluation` carrier) is built here first (`span_pipe.expand`), so the
spool and the encoder only see whole records.

Run by the parent only: `python -m services.common.span_export_worker` (first message: the config).
"""
from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path

from opentelemetry.sdk.trace.export import SpanExportResult

from services.common.incidents import INCIDENTS
from services.common.otlp_spans import RequestEncoder
from services.common.span_pipe import expand, read_msg
from services.common.span_spool import SpanSpool
from services.common.telemetry import EXPORT_REQUEST_MAX_BYTES, make_exporter, setup_logging

log = logging.getLogger("services.common.span_export_worker")

# Seconds one export may take when a spool backs it (the OTLP exporter's own retries otherwise run
# for OTEL_EXPORTER_OTLP_TIMEOUT, 10 s, holding every batch behind it).
SPOOLED_EXPORT_TIMEOUT_S = 2.0
RESEND_MIN_S = 0.5
RESEND_MAX_S = 5.0
SPOOL_INCIDENT = "SPAN_EXPORT_SPOOLING"


class Sender:
    """Exports batches; with a spool, spools what the collector refuses and resends it."""

    def __init__(self, exporter, encoder: RequestEncoder, spool: SpanSpool | None, service: str):
        self._exporter, self._encoder, self.spool, self._service = exporter, encoder, spool, service
        self._lock = threading.Lock()  # one export at a time (reader and resender share the exporter)
        self._refusing = False  # the last export failed: new batches go to the spool
        self._wake = threading.Event()
        self._stop = False
        self._thread = None
        if spool is not None:
            self._thread = threading.Thread(target=self._resend, name="SpanSpoolResend", daemon=True)
            self._thread.start()
            if spool.spans:
                self._wake.set()  # a previous process's spool

    def _export(self, batch: list[tuple]) -> bool:
        with self._lock:
            try:
                ok = True
                for request in self._encoder.requests(batch, EXPORT_REQUEST_MAX_BYTES):
                    ok = self._exporter.export(request) is SpanExportResult.SUCCESS and ok
                return ok
            except Exception:  # noqa: BLE001 - one bad batch must not stop the service's export
                log.exception("%s: a batch of %d spans failed to export", self._service, len(batch))
                return False

    def handle(self, batch: list[tuple]) -> None:
        if self.spool is not None and self._refusing:
            self.spool.put(batch)
            return
        if self._export(batch) or self.spool is None:
            return
        self._refusing = True
        self.spool.put(batch)
        INCIDENTS.failure(SPOOL_INCIDENT, f"{self._service}: the collector refuses spans; spooling them to "
                                          f"{self.spool.directory} (resent when it takes them again)")
        self._wake.set()

    def _resend(self) -> None:
        delay = RESEND_MIN_S
        while not self._stop:
            self._wake.wait(delay)
            self._wake.clear()
            if self._stop:
                return
            item = self.spool.oldest()
            if item is None:
                self._refusing = False
                delay = 3600.0  # nothing to do until a batch is spooled (handle() wakes this thread)
                continue
            path, batch = item
            if self._export(batch):
                self.spool.remove(path)
                self._refusing = False
                if not self.spool.spans:
                    INCIDENTS.resolved(SPOOL_INCIDENT)
                delay = 0.0
            else:
                self._refusing = True
                delay = min(RESEND_MAX_S, max(RESEND_MIN_S, delay * 2))

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(RESEND_MAX_S + SPOOLED_EXPORT_TIMEOUT_S * 2)


def _expanded(batch: list[tuple], service: str) -> list[tuple]:
    """`batch` with its deferred records built (`span_pipe.expand`). A record whose builder fails is
    dropped with its traceback logged: it would fail the same in the next child, which would get the
    batch again (the parent resends what was not confirmed)."""
    out = []
    for rec in batch:
        try:
            out.append(expand(rec))
        except Exception:  # noqa: BLE001 - one bad record must not stop the service's export
            log.exception("%s: a deferred span (%s) could not be built; dropped", service, rec[1])
    return out


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when export ends (its input closes)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    cfg = read_msg(inp)
    if cfg is None:
        return 0
    setup_logging()
    encoder = RequestEncoder(cfg["resource"], cfg.get("schema_url"))
    spool = SpanSpool(Path(cfg["spool_dir"]), cfg["spool_max_bytes"]) if cfg.get("spool_dir") else None
    inner = make_exporter(SPOOLED_EXPORT_TIMEOUT_S if spool is not None else None, requests=True)
    sender = Sender(inner, encoder, spool, cfg.get("service", "")) if inner is not None else None
    while (msg := read_msg(inp)) is not None:
        kind, seq, body = msg
        if kind == "spans" and sender is not None:
            sender.handle(_expanded(body, cfg.get("service", "")))
        dropped, spooled = (spool.dropped, spool.spans) if spool is not None else (0, 0)
        out.write(b"%d %d %d\n" % (seq, dropped, spooled))  # done with it (exported, spooled or given up)
        out.flush()
    if sender is not None:
        sender.close()
        inner.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
