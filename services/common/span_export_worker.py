"""The span export child of a service (`services.common.span_pipe`): reads batches of compacted spans
on stdin, rebuilds them on the parent's resource and exports them with the exporter the `OTEL_*`
environment asks for (`telemetry.make_exporter`, wrapped in `SizeBoundedExporter`). Every message
(`spans` or `flush`) is answered with its sequence number, one line on stdout, once handled (a batch:
exported, or given up by the exporter's own retries). Exits at end of input.

Run by the parent only: `python -m services.common.span_export_worker` (first message: the config).
"""
from __future__ import annotations

import logging
import signal
import sys

from opentelemetry.sdk.resources import Resource

from services.common.span_pipe import read_msg, rebuild
from services.common.telemetry import SizeBoundedExporter, make_exporter, setup_logging

log = logging.getLogger("services.common.span_export_worker")


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when export ends (its input closes)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    cfg = read_msg(inp)
    if cfg is None:
        return 0
    setup_logging()
    resource = Resource(cfg["resource"], cfg.get("schema_url"))
    inner = make_exporter()
    exporter = SizeBoundedExporter(inner) if inner is not None else None
    while (msg := read_msg(inp)) is not None:
        kind, seq, body = msg
        if kind == "spans" and exporter is not None:
            try:
                exporter.export([rebuild(r, resource) for r in body])
            except Exception:  # noqa: BLE001 - one bad batch must not stop the service's export
                log.exception("%s: a batch of %d spans failed to export", cfg.get("service"), len(body))
        out.write(b"%d\n" % seq)  # done with it (exported, or failed after the exporter's own retries)
        out.flush()
    if exporter is not None:
        exporter.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
