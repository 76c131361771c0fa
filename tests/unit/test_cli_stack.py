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
from services.cli.proc import pdeathsig_argv
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
    subprocess.Popen([*pdeathsig_argv(), "true"], start_new_session=True).wait()
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


_PARENT_OF_A_SLEEPER = """
import subprocess, sys
from services.cli.proc import pdeathsig_argv
child = subprocess.Popen([*pdeathsig_argv(), "sleep", "60"], start_new_session=True)
print(child.pid, flush=True)
child.wait()
"""


def test_a_child_started_with_the_pdeathsig_prefix_dies_with_its_parent_killed_outright():
    """`make run`'s children (services, Envoy) get SIGTERM when the supervisor dies even by SIGKILL (in a
    session of their own, so no terminal signal reaches them): the parent-death signal is set by setpriv
    in the child, not by Python between fork and exec."""
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import time  # noqa: PLC0415

    from services.cli.proc import pdeathsig_argv  # noqa: PLC0415
    from services.common.settings import PROJECT_ROOT  # noqa: PLC0415

    assert pdeathsig_argv(), "setpriv (util-linux) is missing: children would outlive a killed make run"
    parent = subprocess.Popen([sys.executable, "-c", _PARENT_OF_A_SLEEPER], cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
                              text=True)
    pid = int(parent.stdout.readline())
    deadline = time.monotonic() + 10
    while open(f"/proc/{pid}/comm").read().strip() != "sleep":  # setpriv has set the signal and exec'd
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.01)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break  # gone (reaped by init once it died)
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break  # died, not yet reaped
        assert time.monotonic() < deadline, "the child outlived its parent's SIGKILL"
        time.sleep(0.05)
