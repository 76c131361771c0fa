"""A bounded on-disk queue of span batches the collector could not take (the OpenTelemetry Collector's
persistent sending queue is the model: `exporterhelper` with a `file_storage` extension).

Why (issue 25): the export child gave a batch up after the OTLP exporter's own retries (≈ 7 s), so a
collector whose database stopped for 10 s under load lost the spans of turns acknowledged in the half
second before, and their reports froze incomplete evidence. Now a batch the exporter fails is written
here and sent again, oldest first, until the collector takes it: an outage of minutes loses nothing
while the spool has room.

One file per batch in `directory` (`<time ns>-<pid>-<n spans>.spool`, a pickle of the compacted spans
`span_pipe.compact` makes), written to a temporary name, fsynced and renamed, so a crash leaves whole
files only; a restarted service sends what its last process spooled. Bounded by `max_bytes`: a batch
that does not fit pushes the oldest files out, and their spans are counted in `dropped` (the parent
exports it as a metric; an alert rule watches it). Files older than `max_age_s` are dropped the same
way (a collector refusing a batch for a day will not take it later). At least once: a batch sent and
not yet removed when the process dies is sent again (the collector keeps one copy of a span).
"""
from __future__ import annotations

import os
import pickle
import threading
import time
from pathlib import Path

SUFFIX = ".spool"
# Defaults of AGENTFEEDBACK_SPAN_SPOOL_MAX_BYTES and of a spooled batch's life.
MAX_BYTES = 64 * 1024 * 1024
MAX_AGE_S = 24 * 3600.0


class SpanSpool:
    """The spool in `directory` (created). Thread-safe: the export child's reader and its resender use it."""

    def __init__(self, directory: Path, max_bytes: int = MAX_BYTES, max_age_s: float = MAX_AGE_S):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.dropped = 0  # spans pushed out (full) or aged out since this process started
        self._lock = threading.Lock()
        self._files: dict[Path, tuple[int, int]] = {}  # path → (bytes, spans), oldest first
        for p in sorted(self.directory.glob(f"*{SUFFIX}")):  # a previous process's batches, kept
            try:
                self._files[p] = (p.stat().st_size, _spans_in(p))
            except (OSError, ValueError):
                continue
        for tmp in self.directory.glob("*.tmp"):  # a write cut short by a crash: never renamed, not whole
            tmp.unlink(missing_ok=True)
        self._seq = 0

    @property
    def spans(self) -> int:
        """Spans waiting in the spool."""
        with self._lock:
            return sum(n for _, n in self._files.values())

    def put(self, batch: list[tuple]) -> None:
        """Store `batch` (compacted spans) durably; older batches are dropped (counted) to make room.
        A batch larger than the whole spool is dropped itself (counted)."""
        data = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            if len(data) > self.max_bytes:
                self.dropped += len(batch)
                return
            self._seq += 1
            path = self.directory / f"{time.time_ns():020d}-{os.getpid()}-{self._seq}-{len(batch)}{SUFFIX}"
            self._make_room(len(data))
            tmp = path.with_suffix(".tmp")
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            self._files[path] = (len(data), len(batch))

    def oldest(self) -> tuple[Path, list[tuple]] | None:
        """The oldest batch still spooled (after dropping aged-out ones), or None."""
        while True:
            with self._lock:
                self._age_out()
                if not self._files:
                    return None
                path = next(iter(self._files))
            try:
                return path, pickle.loads(path.read_bytes())
            except (OSError, pickle.UnpicklingError, EOFError, ValueError):
                self.remove(path, lost=True)  # unreadable (removed by a twin process, damaged): skip it

    def remove(self, path: Path, lost: bool = False) -> None:
        """Forget a batch the collector took (`lost`: one that could not be read, counted as dropped)."""
        with self._lock:
            size_spans = self._files.pop(path, None)
            if lost and size_spans is not None:
                self.dropped += size_spans[1]
        path.unlink(missing_ok=True)

    def _make_room(self, need: int) -> None:
        total = sum(b for b, _ in self._files.values())
        while self._files and total + need > self.max_bytes:
            path, (size, n) = next(iter(self._files.items()))
            del self._files[path]
            path.unlink(missing_ok=True)
            total -= size
            self.dropped += n

    def _age_out(self) -> None:
        cutoff_ns = time.time_ns() - int(self.max_age_s * 1e9)
        for path in list(self._files):
            if int(path.name.split("-", 1)[0]) >= cutoff_ns:
                break
            _, n = self._files.pop(path)
            path.unlink(missing_ok=True)
            self.dropped += n


def _spans_in(path: Path) -> int:
    """The span count a spool file's name carries."""
    return int(path.name.removesuffix(SUFFIX).rsplit("-", 1)[1])
