"""`make run` refuses to start when a port it needs is taken, naming the variable that moves it
(README "The two commands"), before it starts anything."""
from __future__ import annotations

import socket

import pytest

from services.cli.stack import LocalStack, _check_ports_free
from services.common.settings import CommonSettings

_FREE_PORT_VARIABLES = (
    "AGENTFEEDBACK_CHAT_LISTEN", "AGENTFEEDBACK_FEEDBACK_LISTEN", "AGENTFEEDBACK_AGENT_LISTEN",
    "AGENTFEEDBACK_COLLECTOR_QUERY_LISTEN", "AGENTFEEDBACK_COLLECTOR_OTLP_GRPC_LISTEN",
    "AGENTFEEDBACK_CHAT_METRICS_LISTEN", "AGENTFEEDBACK_FEEDBACK_METRICS_LISTEN",
    "AGENTFEEDBACK_COLLECTOR_METRICS_LISTEN", "AGENTFEEDBACK_AGENT_METRICS_LISTEN",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def free_stack(monkeypatch: pytest.MonkeyPatch) -> LocalStack:
    """A stack whose every port is a free one (other stacks may run on this machine)."""
    for var in _FREE_PORT_VARIABLES:
        monkeypatch.setenv(var, f"127.0.0.1:{_free_port()}")
    for var in ("AGENTFEEDBACK_COLLECTOR_OTLP_HTTP_PORT", "AGENTFEEDBACK_GATEWAY_PORT", "AGENTFEEDBACK_GATEWAY_CONSOLE_PORT"):
        monkeypatch.setenv(var, str(_free_port()))
    return LocalStack(CommonSettings())


@pytest.mark.parametrize("variable", [
    "AGENTFEEDBACK_CHAT_LISTEN", "AGENTFEEDBACK_AGENT_METRICS_LISTEN", "AGENTFEEDBACK_CHAT_METRICS_LISTEN",
    "AGENTFEEDBACK_FEEDBACK_METRICS_LISTEN", "AGENTFEEDBACK_COLLECTOR_METRICS_LISTEN", "AGENTFEEDBACK_GATEWAY_ADMIN_PORT",
])
def test_a_taken_port_is_refused_naming_its_variable(free_stack: LocalStack, monkeypatch: pytest.MonkeyPatch, variable: str):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv(variable, str(port) if variable.endswith("_PORT") else f"127.0.0.1:{port}")
        with pytest.raises(RuntimeError) as e:
            _check_ports_free(free_stack.plan())
    assert variable in str(e.value) and str(port) in str(e.value)


def test_free_ports_and_disabled_endpoints_pass(free_stack: LocalStack, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AGENTFEEDBACK_AGENT_METRICS_LISTEN", "")  # no endpoint
    monkeypatch.setenv("AGENTFEEDBACK_CHAT_METRICS_LISTEN", "127.0.0.1:0")  # any free port
    monkeypatch.setenv("AGENTFEEDBACK_GATEWAY_ADMIN_PORT", "0")  # admin disabled
    _check_ports_free(free_stack.plan())


def test_benchmarks_leave_the_metrics_ports_free():
    """`make bench`'s services inherit its environment: none may take a default metrics port that a
    `make run` on the same machine needs."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from services.common.settings import PROJECT_ROOT  # noqa: PLC0415

    env = {k: v for k, v in os.environ.items() if not k.endswith("_METRICS_LISTEN")}
    out = subprocess.run(
        [sys.executable, "-c", "import os, tests.bench.run; print(sorted(v for k, v in os.environ.items() if k.endswith('_METRICS_LISTEN')))"],
        env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['', '', '', '']"


_FORKS_WHILE_GRPC_RUNS = """
import subprocess, sys, threading, time
import services.cli.main  # the runner's module, first (as `agentfeedback run` imports it)
import grpc
from services.cli.proc import die_with_parent
from grpc_health.v1 import health_pb2, health_pb2_grpc
channel = grpc.insecure_channel("127.0.0.1:1")
def busy():
    while True:
        try:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=0.05)
        except grpc.RpcError:
            pass
threading.Thread(target=busy, daemon=True).start()
time.sleep(0.5)
for _ in range(50):
    subprocess.Popen(["true"], preexec_fn=die_with_parent).wait()
"""


def test_restarting_children_prints_no_grpc_fork_warnings():
    """`make run` (re)starts children while its gRPC clients run: no gRPC fork-handler lines in its terminal
    (a `fork_posix.cc` line at every restart before services/cli/main.py turned fork support off)."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from services.common.settings import PROJECT_ROOT  # noqa: PLC0415

    env = {k: v for k, v in __import__("os").environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    run = subprocess.run([sys.executable, "-c", _FORKS_WHILE_GRPC_RUNS], env=env, cwd=PROJECT_ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.stderr == ""
