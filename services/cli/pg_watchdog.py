"""Stops the embedded PostgreSQL when the `agentfeedback run` supervisor is gone, even by SIGKILL.

The postmaster is daemonized by `pg_ctl` (its parent is init, not the supervisor), so PR_SET_PDEATHSIG
cannot reach it. `start(pgdata)` runs `python -m services.cli.pg_watchdog <pgdata>` in its own session
with the read end of a pipe as stdin; the supervisor alone holds the write end, so the kernel closes it
when the supervisor dies, however it dies. The watchdog then fast-shuts-down whichever postmaster runs
in `pgdata` (`stop_postgres`: by its postmaster.pid, so never a recycled pid) and exits.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from services.cli.supervise import stop_postgres
from services.common.settings import PROJECT_ROOT


class Watchdog:
    """The running watchdog; `release()` on a clean stop (after PostgreSQL was stopped)."""

    def __init__(self, proc: subprocess.Popen, write_fd: int):
        self.proc = proc
        self._fd = write_fd

    def release(self, timeout_s: float = 10.0) -> None:
        """Close the pipe (the watchdog finds nothing to stop and exits) and wait for it."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start(pgdata: Path) -> Watchdog:
    """A watchdog for the PostgreSQL in `pgdata`, tied to this process's lifetime."""
    r, w = os.pipe()
    os.set_inheritable(w, False)  # only this process holds the write end (close_fds for the others)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_ROOT / "gen"), str(PROJECT_ROOT),
                                                                    os.environ.get("PYTHONPATH", "")) if p)}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "services.cli.pg_watchdog", str(pgdata)], stdin=r,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=PROJECT_ROOT,
                                env=env, start_new_session=True)  # own session: Ctrl-C is the supervisor's
    finally:
        os.close(r)
    return Watchdog(proc, w)


def main() -> None:
    pgdata = Path(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only the pipe's end stops it
    while sys.stdin.buffer.read(4096):  # nothing is ever written: returns b"" at EOF
        pass
    stop_postgres(pgdata)


if __name__ == "__main__":
    main()
