"""`make run` supervision (services/cli/supervise.py): logs appended across runs and rotated, a dead
child restarted with backoff while the others keep serving, PostgreSQL stopped even when it was
restarted by hand (real processes, a real embedded PostgreSQL)."""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from services.cli import supervise
from services.cli.supervise import Supervisor, open_log, stop_postgres


def test_logs_are_appended_across_runs_and_rotated_past_the_size(tmp_path: Path, monkeypatch):
    log = tmp_path / "chat.log"
    for run in range(2):
        with open_log(log) as out:
            out.write(f"line of run {run}\n".encode())
    text = log.read_text()
    assert "line of run 0" in text and "line of run 1" in text and text.count("=== make run: started") == 2
    monkeypatch.setattr(supervise, "LOG_ROTATE_BYTES", 10)
    for run in range(2, 6):
        with open_log(log) as out:
            out.write(f"line of run {run}\n".encode())
    assert "line of run 5" in log.read_text() and "line of run 4" not in log.read_text()
    assert "line of run 4" in (tmp_path / "chat.log.1").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chat.log", "chat.log.1", "chat.log.2", "chat.log.3"]


@dataclass
class _Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen | None = None


class _Stack:
    def __init__(self, children):
        self.children = children
        for c in children:
            self.spawn(c)

    def spawn(self, c: _Child) -> None:
        c.proc = subprocess.Popen(c.argv)

    def log_path(self, name: str) -> Path:
        return Path(f"/logs/{name}.log")


async def test_a_dead_child_is_restarted_with_backoff_while_the_others_keep_serving(monkeypatch):
    monkeypatch.setattr(supervise, "BACKOFF_FIRST_S", 0.3)
    dies = _Child("feedback", [sys.executable, "-c", "import sys; sys.exit(3)"])
    lives = _Child("chat", [sys.executable, "-c", "import time; time.sleep(60)"])
    stack = _Stack([dies, lives])
    said: list[str] = []
    sup = Supervisor(stack, said.append, poll_s=0.05)
    steady = lives.proc.pid
    task = asyncio.ensure_future(sup.run())
    try:
        t0 = time.monotonic()
        while sup.restarts.get("feedback", 0) < 2 and time.monotonic() - t0 < 10:
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        lives.proc.kill()
    assert sup.restarts["feedback"] >= 2
    assert lives.proc.pid == steady and "chat" not in sup.restarts
    assert said[0] == "feedback exited with status 3; restarting in 0 s (the rest keep serving; log: /logs/feedback.log)"
    assert "feedback restarted (pid" in said[1]
    # Backoff doubles: the second restart comes ≥ 0.6 s after the second exit.
    assert "restarting in 1 s" in said[2]


def test_postgres_restarted_by_hand_is_still_stopped():
    from services.common.db import embedded_postgres_server  # noqa: PLC0415

    pgdata = Path(tempfile.mkdtemp(prefix="af-stop-pg-")) / "pg"
    handle = embedded_postgres_server(pgdata, cleanup_mode="delete")
    first = int((pgdata / "postmaster.pid").read_text().split()[0])
    assert stop_postgres(pgdata)
    assert not (pgdata / "postmaster.pid").exists()
    code = ("from pathlib import Path; from services.common.db import embedded_postgres_server; "
            f"embedded_postgres_server(Path({str(pgdata)!r}), cleanup_mode=None)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])  # "by hand"
    second = int((pgdata / "postmaster.pid").read_text().split()[0])
    assert second != first
    assert stop_postgres(pgdata)
    assert not (pgdata / "postmaster.pid").exists()
    assert not stop_postgres(pgdata)  # nothing left to stop
    handle.cleanup()


def _gone(pid: int) -> bool:
    import os  # noqa: PLC0415

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _exited(pid: int) -> bool:
    """Gone, or a zombie its new parent (init, maybe not reaping in a container) has not reaped yet."""
    try:
        return _gone(pid) or Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class _PgStack:
    """A stack of no children whose embedded PostgreSQL is supervised (as LocalStack's)."""

    def __init__(self, pgdata: Path):
        from services.common.db import embedded_postgres_server  # noqa: PLC0415

        self.children: list = []
        self.pgdata = pgdata
        self.handle = embedded_postgres_server(pgdata, cleanup_mode="delete")

    def restart_postgres(self) -> int:
        self.handle.ensure_postgres_running()
        return self.handle.get_pid()


async def test_a_killed_postgres_is_started_again_in_its_data_directory(monkeypatch):
    import asyncpg  # noqa: PLC0415
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415

    monkeypatch.setattr(supervise, "BACKOFF_FIRST_S", 0.2)
    stack = _PgStack(Path(tempfile.mkdtemp(prefix="af-sup-pg-")) / "pg")
    url = stack.handle.get_uri("postgres")
    said: list[str] = []
    task = asyncio.ensure_future(Supervisor(stack, said.append, poll_s=0.05).run())
    try:
        first = stack.handle.get_pid()
        os.kill(first, signal.SIGKILL)  # as the OOM killer would
        t0 = time.monotonic()
        while not any("restarted" in line for line in said) and time.monotonic() - t0 < 30:
            await asyncio.sleep(0.05)
        conn = await asyncpg.connect(url)  # the same URL (socket in the data directory) works again
        assert await conn.fetchval("SELECT 1") == 1
        await conn.close()
    finally:
        task.cancel()
        second = stack.handle.get_pid()
        assert stop_postgres(stack.pgdata)
        stopped = _gone(second)  # stop_postgres waits for the process, not only its pid file
        stack.handle.cleanup()
    assert stopped
    assert said[0].startswith("PostgreSQL (") and "exited; restarting in 0 s" in said[0]
    assert said[1].startswith("PostgreSQL restarted (pid ") and str(first) not in said[1]


def test_a_killed_supervisor_leaves_no_postgres_running():
    """`make run` SIGKILLed: its embedded PostgreSQL (daemonized by pg_ctl, reparented to init) stops
    too, through the watchdog the supervisor starts beside it."""
    pgdata = Path(tempfile.mkdtemp(prefix="af-watchdog-")) / "pg"
    code = ("import sys, time; from pathlib import Path; from services.common.db import embedded_postgres_server; "
            "from services.cli import pg_watchdog; "
            f"pg = Path({str(pgdata)!r}); embedded_postgres_server(pg, cleanup_mode=None); pg_watchdog.start(pg); "
            "print('ready', flush=True); time.sleep(600)")
    sup = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).parents[2], stdout=subprocess.PIPE, text=True)
    try:
        assert sup.stdout.readline().strip() == "ready"
        postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait(10)
        deadline = time.monotonic() + 60
        while not _exited(postmaster) or (pgdata / "postmaster.pid").exists():
            assert time.monotonic() < deadline, "PostgreSQL outlived its killed supervisor"
            time.sleep(0.1)
    finally:
        if sup.poll() is None:
            sup.kill()
        stop_postgres(pgdata)
        shutil.rmtree(pgdata.parent, ignore_errors=True)


def test_a_restarted_child_says_restarted_in_its_log_not_a_new_run(tmp_path: Path, monkeypatch):
    """The supervisor's restart of a child that died wrote `=== make run: started …` into its log as if a
    new `make run` had begun; the reader of the log must tell a crash from a new run."""
    from services.cli.stack import Child, LocalStack  # noqa: PLC0415
    from services.common.settings import CommonSettings  # noqa: PLC0415

    monkeypatch.setenv("AGENTFEEDBACK_DATA_DIR", str(tmp_path))
    stack = LocalStack(CommonSettings())
    stack.log_dir.mkdir(parents=True)
    child = Child(name="quick", module="json.tool", health_target=None, env={}, args=("--help",))
    for _ in range(2):
        stack.spawn(child)
        assert child.proc is not None and child.proc.wait(timeout=30) == 0
    banners = [line for line in stack.log_path("quick").read_text().splitlines() if line.startswith("=== make run:")]
    assert len(banners) == 2, banners
    assert banners[0].startswith("=== make run: started ")
    assert banners[1].startswith("=== make run: restarted (the last one exited with status 0) "), banners[1]
