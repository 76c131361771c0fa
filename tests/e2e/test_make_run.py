"""The README's first command's job (`agentfeedback run`, what `make run` calls) as a user runs it:
the whole stack as real processes on an embedded PostgreSQL, the demo's evidence printed, then
serving; a dead service is reported and restarted while the rest serve; Ctrl-C stops everything, PostgreSQL
included; a killed runner leaves nothing behind."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from services.cli.supervise import stop_postgres
from services.common.settings import PROJECT_ROOT
from tests.helpers.ports import free_ports, listeners, listens

NAMES = ["chat", "feedback", "query", "agent", "otlp_grpc", "otlp_http", "gateway", "console"]
# What the runner serves: the console only when built (`make console`; `make test` builds it).
SERVED = [n for n in NAMES if n != "console" or (PROJECT_ROOT / "console" / "dist" / "index.html").exists()]


def _env(data_dir: Path) -> tuple[dict[str, str], dict[str, int]]:
    # Picked free, then bound by the runner's children: `_start_owning` checks they got them.
    p = dict(zip(NAMES, free_ports(len(NAMES)), strict=True))
    # Only the listen addresses move: the stack points its services at each other (no *_TARGET set).
    env = {
        **{k: v for k, v in os.environ.items() if not k.endswith("_TARGET")},
        "AGENTFEEDBACK_DATA_DIR": str(data_dir),
        "AGENTFEEDBACK_CHAT_LISTEN": f"127.0.0.1:{p['chat']}",
        "AGENTFEEDBACK_FEEDBACK_LISTEN": f"127.0.0.1:{p['feedback']}",
        "AGENTFEEDBACK_COLLECTOR_QUERY_LISTEN": f"127.0.0.1:{p['query']}",
        "AGENTFEEDBACK_AGENT_LISTEN": f"127.0.0.1:{p['agent']}",
        "AGENTFEEDBACK_COLLECTOR_OTLP_GRPC_LISTEN": f"127.0.0.1:{p['otlp_grpc']}",
        "AGENTFEEDBACK_COLLECTOR_OTLP_HTTP_PORT": str(p["otlp_http"]),
        "AGENTFEEDBACK_GATEWAY_PORT": str(p["gateway"]),
        "AGENTFEEDBACK_GATEWAY_CONSOLE_PORT": str(p["console"]),
        "AGENTFEEDBACK_GATEWAY_ALLOWED_ORIGINS": f"http://127.0.0.1:{p['console']}",
        "AGENTFEEDBACK_SHUTDOWN_DRAIN_S": "0",
    }
    env.pop("AGENTFEEDBACK_DATABASE_URL", None)
    return env, p


def _serving(runner: subprocess.Popen, ports: dict[str, int]) -> set[int]:
    """The runner's children that listen on the stack's ports (services, Envoy, the console)."""
    got = {n: listeners(runner.pid, ports[n]) for n in SERVED}
    assert all(got.values()), {n: sorted(p) for n, p in got.items()}
    return set().union(*got.values())


def _alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start(env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "services.cli.main", "run"], cwd=PROJECT_ROOT, env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _start_owning(data_dir: Path, log: Path, attempts: int = 3) -> tuple[subprocess.Popen, dict[str, str], dict[str, int], str]:
    """The runner started and up ("Ctrl-C stops everything."), its own children listening on every port
    it was given; when another process had taken one meanwhile (the runner's service then failed to
    bind, or a health check reached the other process), it is stopped and started again on new ports.
    (runner, env, ports, its output so far)."""
    for _ in range(attempts):
        env, ports = _env(data_dir)
        runner = _start(env, log)
        out = _wait_for(log, "Ctrl-C stops everything.", runner)
        if all(listens(runner.pid, ports[n]) for n in SERVED):
            return runner, env, ports, out
        os.killpg(runner.pid, signal.SIGINT)
        runner.wait(60)
    raise AssertionError(f"ports taken by other processes {attempts} times in a row")


def _wait_for(log: Path, text: str, proc: subprocess.Popen, timeout_s: float = 240) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = log.read_text(errors="replace")
        if text in out:
            return out
        assert proc.poll() is None, f"runner exited ({proc.returncode}):\n{out[-3000:]}"
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not printed in {timeout_s}s:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_run_prints_evidence_restarts_a_dead_service_and_leaves_nothing_when_stopped_or_killed(tmp_path):
    # Not pytest's tmp_path: PostgreSQL runs as its own user and needs to traverse the path.
    data_dir = Path(tempfile.mkdtemp(prefix="af-run-")) / "data"
    log = tmp_path / "run.log"
    runner, env, ports, out = _start_owning(data_dir, log)
    try:
        # The evidence of the flagged reply: the owner's words, the quoted turn, its trace and tool call.
        assert "the owner flags instances/" in out and "That's wrong." in out
        assert "quoted target (ROLE_ASSISTANT" in out and "trace id:" in out
        assert "tool.call [" in out and "frozen trace: CAPTURED" in out
        assert f"?gateway=http://127.0.0.1:{ports['gateway']}" in out

        # A service dies: the runner says which (with its log's path) and restarts it with backoff, while
        # the rest keep serving; then Ctrl-C stops everything, PostgreSQL included.
        # This runner's own chat (its child): other stacks on the machine run services.chat.main too.
        chat_pid = int(subprocess.check_output(["pgrep", "-P", str(runner.pid), "-f", "services.chat.main"], text=True).split()[0])
        os.kill(chat_pid, signal.SIGKILL)
        out = _wait_for(log, "chat restarted (pid", runner, timeout_s=60)
        assert f"chat exited with status -9; restarting in 1 s (the rest keep serving; log: {data_dir}/logs/chat.log)" in out
        assert all(listens(runner.pid, ports[n]) for n in ("feedback", "query", "agent", "gateway"))
        deadline = time.monotonic() + 60
        while not listens(runner.pid, ports["chat"]):
            assert time.monotonic() < deadline, "the restarted chat gateway never listened again"
            time.sleep(0.2)
        assert runner.poll() is None
        children = _serving(runner, ports)
        os.killpg(runner.pid, signal.SIGINT)
        assert runner.wait(60) == 0
        assert "fork_posix" not in log.read_text()
        assert not [p for p in children if _alive(p)], "a service, Envoy or the console outlived Ctrl-C"
        assert not (data_dir / "pg" / "postmaster.pid").exists(), "Ctrl-C left PostgreSQL running"

        # Started again on the same data; then the runner is SIGKILLed: its children go with it.
        runner = _start(env, tmp_path / "run2.log")
        _wait_for(tmp_path / "run2.log", "Ctrl-C stops everything.", runner)
        children = _serving(runner, ports)
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(10)
        deadline = time.monotonic() + 30
        while [p for p in children if _alive(p)]:
            assert time.monotonic() < deadline, "services, Envoy or the console outlived a killed runner"
            time.sleep(0.5)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGINT)
            runner.wait(60)
        # By signal (any user: as non-root, pg_ctl as 'embedded_postgres' failed and left it running).
        stop_postgres(data_dir / "pg")
        shutil.rmtree(data_dir.parent, ignore_errors=True)
