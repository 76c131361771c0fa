"""Helpers of the tests that run a service as its own OS process: the port it bound (it was given port 0
and logged the port it got: no port picked free, released and bound later by someone else)."""
from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path


async def reported_port(log: Path, proc: subprocess.Popen, pattern: str, timeout_s: float = 30.0) -> int:
    """The port a child logged in `log` (`pattern`: a regex whose group 1 is the port, e.g. the service
    mains' "FeedbackService listening on port (\\d+)"). AssertionError, with the log's tail, when the child
    exits or `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        if m := re.search(pattern, text):
            return int(m.group(1))
        if proc.poll() is not None or time.monotonic() > deadline:
            why = f"exited {proc.returncode}" if proc.returncode is not None else f"silent for {timeout_s} s"
            raise AssertionError(f"no port logged ({why}): {text[-2000:]}")
        await asyncio.sleep(0.05)


ROOT = Path(__file__).resolve().parents[2]


def _spawn(stack, module: str, log: Path, env: dict[str, str]) -> subprocess.Popen:
    """`python -m <module>` as its own OS process on the stack's database and secret, `env` added."""
    from tests.stack import TEST_JWT_SECRET  # noqa: PLC0415 - tests.stack imports the services

    env = {
        **os.environ,
        "AGENTFEEDBACK_DATABASE_URL": stack.database_url,
        "AGENTFEEDBACK_JWT_SECRET": TEST_JWT_SECRET,
        "AGENTFEEDBACK_DATA_DIR": str(stack.data_dir / "second"),
        "OTEL_TRACES_EXPORTER": "none",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "gen")]),
        **env,
    }
    return subprocess.Popen([sys.executable, "-m", module], cwd=ROOT, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)


def spawn_feedback_process(stack, port: int, log: Path, **extra_env: str) -> subprocess.Popen:
    """`python -m services.feedback.main` as its own OS process on the stack's database and services
    (`port` 0: it binds any free port and logs it, `reported_port`)."""
    return _spawn(stack, "services.feedback.main", log, {
        "AGENTFEEDBACK_FEEDBACK_LISTEN": f"127.0.0.1:{port}",
        "AGENTFEEDBACK_FEEDBACK_CHAT_TARGET": f"127.0.0.1:{stack.ports['chat']}",
        "AGENTFEEDBACK_FEEDBACK_TRACES_TARGET": f"127.0.0.1:{stack.ports['query']}",
        **extra_env,
    })


def spawn_chat_process(stack, log: Path, **extra_env: str) -> subprocess.Popen:
    """`python -m services.chat.main` as its own OS process on the stack's database, agent and feedback
    service, on any free port (logged: "ChatService listening on port N", `reported_port`)."""
    return _spawn(stack, "services.chat.main", log, {
        "AGENTFEEDBACK_CHAT_LISTEN": "127.0.0.1:0",
        "AGENTFEEDBACK_CHAT_METRICS_LISTEN": "",
        "AGENTFEEDBACK_CHAT_AGENT_TARGET": f"127.0.0.1:{stack.ports['agent']}",
        "AGENTFEEDBACK_CHAT_FEEDBACK_TARGET": f"127.0.0.1:{stack.ports['feedback']}",
        **extra_env,
    })


async def wait_serving(port: int, proc: subprocess.Popen, log: Path, timeout_s: float = 30.0) -> None:
    """Until the child on `port` answers health SERVING; AssertionError with its log's tail otherwise."""
    from services.common.health import wait_serving as common_wait_serving  # noqa: PLC0415

    try:
        await common_wait_serving(f"127.0.0.1:{port}", timeout_s, proc)
    except (RuntimeError, TimeoutError) as e:
        raise AssertionError(f"second feedback process: {e}: {log.read_text()[-2000:]}") from None


async def stop_postgres_fast(pgdata: Path, sig: signal.Signals = signal.SIGINT) -> None:
    """PostgreSQL's fast shutdown (SIGINT to the postmaster: sessions are terminated), waited for. A signal,
    not pg_ctl: a process forked from this one (gRPC's threads) can crash before it execs. `sig` SIGQUIT:
    the immediate shutdown, as a crash (no checkpoint; the next start runs crash recovery, which empties
    every unlogged table)."""
    pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    os.kill(pid, sig)
    deadline = time.monotonic() + 30
    while (pgdata / "postmaster.pid").exists():
        assert time.monotonic() < deadline, "PostgreSQL did not stop in 30 s"
        await asyncio.sleep(0.02)


async def start_postgres_again(pgdata: Path) -> None:
    """Start the stopped cluster again from a fresh interpreter (pg_ctl forked from this process, which
    runs gRPC's threads, can crash), leaving it running (cleanup_mode None)."""
    code = ("from pathlib import Path; from services.common.db import embedded_postgres_server; "
            f"embedded_postgres_server(Path({str(pgdata)!r}), cleanup_mode=None)")
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, cwd=str(ROOT))
    assert await proc.wait() == 0
