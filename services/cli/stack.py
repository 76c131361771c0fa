"""`agentfeedback run`: the whole local stack as real processes, one per service (as deployed).

Order: PostgreSQL (the configured URL, or the embedded cluster in `.data/pg`) → trace collector →
feedback → reference agent → chat gateway (→ Envoy + console when built). Each child gets the
database URL and the standard `OTEL_*` variables pointing its exporter at the collector (with the
collector's first OTLP ingest token in `OTEL_EXPORTER_OTLP_TRACES_HEADERS` when
AGENTFEEDBACK_COLLECTOR_OTLP_BEARER_TOKENS is set; unset, ingest stays open on loopback); its output
goes to `.data/logs/<name>.log`. Readiness = `grpc.health.v1` SERVING.
Stop: SIGTERM to every child (they drain: NOT_SERVING → in-flight calls finish), then PostgreSQL.
A supervisor killed outright takes its children with it (PR_SET_PDEATHSIG) and the embedded
PostgreSQL too (services.cli.pg_watchdog).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from services.common.db import embedded_postgres_server
from services.cli import pg_watchdog
from services.cli.proc import pdeathsig_argv
from services.cli.supervise import _alive, open_log, stop_postgres
from services.cli.client import loopback as _loopback
from services.common.health import wait_serving
from services.common.settings import PROJECT_ROOT, CommonSettings, load_settings

log = logging.getLogger(__name__)


@dataclass
class Child:
    name: str
    module: str
    health_target: str | None
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    args: tuple[str, ...] = ()


@dataclass
class LocalStack:
    """Processes of the local stack. Ports are the docs/architecture.md "Processes" defaults unless the environment says otherwise."""

    settings: CommonSettings
    children: list[Child] = field(default_factory=list)
    database_url: str = ""
    envoy: object | None = None
    console_url: str = ""
    _pg_handle: object | None = None
    _pg_watchdog: object | None = None

    @property
    def log_dir(self) -> Path:
        return Path(self.settings.data_dir) / "logs"

    def _database(self) -> str:
        if self.settings.database_url:
            return self.settings.database_url
        pgdata = Path(self.settings.data_dir) / "pg"
        _forget_dead_handles(pgdata)
        self._pg_handle = embedded_postgres_server(pgdata, cleanup_mode="stop")
        # The postmaster outlives a SIGKILLed supervisor (pg_ctl daemonizes it): a watchdog stops it.
        self._pg_watchdog = pg_watchdog.start(pgdata)
        return self._pg_handle.get_uri("postgres")  # type: ignore[attr-defined]

    @property
    def pgdata(self) -> Path | None:
        """The embedded cluster's data directory; None when the stack uses a configured database."""
        return Path(self.settings.data_dir) / "pg" if self._pg_handle is not None else None

    def restart_postgres(self) -> int:
        """Start the embedded cluster again after its postmaster died (services.cli.supervise); its pid."""
        self._pg_handle.ensure_postgres_running()  # type: ignore[attr-defined]
        return self._pg_handle.get_pid()  # type: ignore[attr-defined]

    def plan(self) -> list[Child]:
        base = {
            **os.environ,
            "AGENTFEEDBACK_DATA_DIR": str(self.settings.data_dir),
            "OTEL_EXPORTER_OTLP_ENDPOINT": os.environ.get(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http://" + os.environ.get("AGENTFEEDBACK_COLLECTOR_OTLP_GRPC_LISTEN", "127.0.0.1:4317")),
            "OTEL_BSP_SCHEDULE_DELAY": os.environ.get("OTEL_BSP_SCHEDULE_DELAY", "500"),
            "PYTHONUNBUFFERED": "1",
        }
        gen = str(PROJECT_ROOT / "gen")
        base["PYTHONPATH"] = os.pathsep.join(p for p in (gen, str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        # Each service finds the others where this stack starts them (a moved *_LISTEN moves its *_TARGETs).
        for target_var, listen_var, default in _TARGETS:
            base.setdefault(target_var, _loopback(os.environ.get(listen_var, default)))
        base.update(_ingest_headers())
        collector_env = {**base, "OTEL_TRACES_EXPORTER": "none"}  # the collector never exports to itself
        env = os.environ.get
        return [
            Child("tracecollector", "services.tracecollector.main",
                  env("AGENTFEEDBACK_COLLECTOR_QUERY_LISTEN", "127.0.0.1:50053"), collector_env),
            Child("feedback", "services.feedback.main", env("AGENTFEEDBACK_FEEDBACK_LISTEN", "127.0.0.1:50052"), base),
            Child("agent", "services.chat.agent.main", env("AGENTFEEDBACK_AGENT_LISTEN", "127.0.0.1:50054"), base),
            Child("chat", "services.chat.main", env("AGENTFEEDBACK_CHAT_LISTEN", "127.0.0.1:50051"), base),
        ]

    async def start(self, timeout_s: float = 120.0) -> None:
        """Start everything; RuntimeError naming the process and its log when one fails, or naming
        the port and the variable that moves it when a port is already taken (another stack?)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.children = self.plan()
        _check_ports_free(self.children)
        self.database_url = self._database()
        for c in self.children:
            c.env["AGENTFEEDBACK_DATABASE_URL"] = self.database_url
        for c in self.children:
            self.spawn(c)
            if c.health_target:
                try:
                    await wait_serving(c.health_target, timeout_s, c.proc)
                except (RuntimeError, TimeoutError) as e:
                    raise RuntimeError(f"{c.name}: {e}\n{self.log_tail(c.name)}") from None
            log.info("%s ready", c.name)
        self._start_gateway_and_console()

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def spawn(self, c: Child) -> None:
        """Start (or restart) child `c`, its output appended to its log (services.cli.supervise.open_log)."""
        event = "started" if c.proc is None else f"restarted (the last one exited with status {c.proc.poll()})"
        with open_log(self.log_path(c.name), event) as out:  # the child keeps its own descriptor
            c.proc = subprocess.Popen([*pdeathsig_argv(), sys.executable, "-m", c.module, *c.args], env=c.env or None,
                                      stdout=out, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT, start_new_session=True)

    def _port(self, name: str) -> int:
        target = next(c.health_target for c in self.children if c.name == name)
        return int(str(target).rsplit(":", 1)[1])

    def _start_gateway_and_console(self) -> None:
        """Envoy (gRPC-web gateway) in front of the services, and the built console on its own origin."""
        from services.cli.envoy import GatewayPorts, GatewaySettings, start_envoy  # noqa: PLC0415

        gs = load_settings(GatewaySettings)
        self.envoy = start_envoy(
            GatewayPorts(gateway=gs.port, chat=self._port("chat"), feedback=self._port("feedback"),
                         traces=self._port("tracecollector"), admin=gs.admin_port or None),
            gs.origins, config_dir=Path(self.settings.data_dir) / "envoy", concurrency=gs.concurrency,
            rate_limit_per_s=gs.rate_limit_per_s, rate_limit_burst=gs.rate_limit_burst)
        dist = PROJECT_ROOT / "console" / "dist"
        if not (dist / "index.html").exists():
            log.warning("console not built (make console); the gateway runs without it")
            return
        port = str(gs.console_port)
        console = Child("console", "http.server", None, {}, args=(port, "--bind", "127.0.0.1", "--directory", str(dist)))
        self.spawn(console)
        self.children.append(console)
        # The console reads its gateway from ?gateway= (default: port 8080 on its own host).
        self.console_url = f"http://127.0.0.1:{port}/?gateway={self.envoy.url}"  # type: ignore[attr-defined]

    def log_tail(self, name: str, lines: int = 15) -> str:
        """The last lines of a child's log, indented, with the log's path."""
        path = self.log_dir / f"{name}.log"
        try:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            tail = []
        return "\n".join([f"  {line}" for line in tail] + [f"  (log: {path})"])

    def stop(self, grace_s: float = 15.0) -> None:
        if self.envoy is not None:
            self.envoy.stop()  # type: ignore[attr-defined]
        for c in reversed(self.children):
            if c.proc and c.proc.poll() is None:
                c.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for c in self.children:
            if c.proc:
                try:
                    c.proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    c.proc.kill()
        if self._pg_handle is not None:
            # By signal to whichever postmaster runs in the data directory now (also one restarted
            # by hand); the handle's cleanup then finds nothing to stop (no pg_ctl fork).
            stop_postgres(Path(self.settings.data_dir) / "pg")
            self._pg_handle.cleanup()  # type: ignore[attr-defined]
        if self._pg_watchdog is not None:
            self._pg_watchdog.release()  # type: ignore[attr-defined]


_TARGETS = (
    ("AGENTFEEDBACK_CHAT_AGENT_TARGET", "AGENTFEEDBACK_AGENT_LISTEN", "127.0.0.1:50054"),
    ("AGENTFEEDBACK_CHAT_FEEDBACK_TARGET", "AGENTFEEDBACK_FEEDBACK_LISTEN", "127.0.0.1:50052"),
    ("AGENTFEEDBACK_AGENT_FEEDBACK_TARGET", "AGENTFEEDBACK_FEEDBACK_LISTEN", "127.0.0.1:50052"),
    ("AGENTFEEDBACK_FEEDBACK_CHAT_TARGET", "AGENTFEEDBACK_CHAT_LISTEN", "127.0.0.1:50051"),
    ("AGENTFEEDBACK_FEEDBACK_TRACES_TARGET", "AGENTFEEDBACK_COLLECTOR_QUERY_LISTEN", "127.0.0.1:50053"),
    ("AGENTFEEDBACK_COLLECTOR_FEEDBACK_TARGET", "AGENTFEEDBACK_FEEDBACK_LISTEN", "127.0.0.1:50052"),
)


def _ingest_headers() -> dict[str, str]:
    """The exporter header variable that makes this stack's services send the collector's first OTLP ingest
    token (AGENTFEEDBACK_COLLECTOR_OTLP_BEARER_TOKENS), when tokens are set, the services export to this
    stack's collector (no OTEL_EXPORTER_OTLP_*ENDPOINT of the caller's) and no exporter headers are set
    already; else nothing (ingest stays as configured: open on loopback by default)."""
    first = next((t.strip() for t in os.environ.get("AGENTFEEDBACK_COLLECTOR_OTLP_BEARER_TOKENS", "").split(",")
                  if t.strip()), "")
    own = not any(os.environ.get(v) for v in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                                                "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"))
    if not first or not own:
        return {}
    # W3C Baggage format (the OTEL_EXPORTER_OTLP_HEADERS specification): the value percent-encoded.
    return {"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "authorization=" + quote(f"Bearer {first}", safe="")}


_PORT_VARIABLES = {
    "tracecollector": "AGENTFEEDBACK_COLLECTOR_QUERY_LISTEN",
    "feedback": "AGENTFEEDBACK_FEEDBACK_LISTEN",
    "agent": "AGENTFEEDBACK_AGENT_LISTEN",
    "chat": "AGENTFEEDBACK_CHAT_LISTEN",
}


def _metrics_listens() -> list[tuple[str, str]]:
    """(variable, default) of each service's metrics endpoint, from the services' own settings."""
    from services.chat.agent.settings import AgentSettings  # noqa: PLC0415
    from services.chat.settings import ChatSettings  # noqa: PLC0415
    from services.feedback.settings import FeedbackSettings  # noqa: PLC0415
    from services.tracecollector.settings import CollectorSettings  # noqa: PLC0415

    return [(cls.model_config["env_prefix"] + "METRICS_LISTEN", cls.model_fields["metrics_listen"].default)
            for cls in (ChatSettings, FeedbackSettings, CollectorSettings, AgentSettings)]


def _check_ports_free(children: list[Child]) -> None:
    """RuntimeError when something already listens on a port the stack needs (health checks would
    otherwise talk to the other process)."""
    import socket  # noqa: PLC0415

    from services.cli.envoy import GatewaySettings  # noqa: PLC0415

    gs = load_settings(GatewaySettings)
    wanted = [(c.health_target, _PORT_VARIABLES.get(c.name, "")) for c in children if c.health_target]
    wanted += [
        (os.environ.get("AGENTFEEDBACK_COLLECTOR_OTLP_GRPC_LISTEN", "127.0.0.1:4317"), "AGENTFEEDBACK_COLLECTOR_OTLP_GRPC_LISTEN"),
        (f"127.0.0.1:{os.environ.get('AGENTFEEDBACK_COLLECTOR_OTLP_HTTP_PORT', '4318')}", "AGENTFEEDBACK_COLLECTOR_OTLP_HTTP_PORT"),
        (f"127.0.0.1:{gs.port}", "AGENTFEEDBACK_GATEWAY_PORT"),
        (f"127.0.0.1:{gs.console_port}", "AGENTFEEDBACK_GATEWAY_CONSOLE_PORT"),
        (f"127.0.0.1:{gs.admin_port}", "AGENTFEEDBACK_GATEWAY_ADMIN_PORT"),
    ]
    # Each service's Prometheus endpoint (a taken one stopped `make run` half-started, with a traceback).
    wanted += [(os.environ.get(var, default), var) for var, default in _metrics_listens()]
    for target, var in wanted:
        host, _, port = str(target).rpartition(":")
        if not port or int(port) == 0:  # no endpoint, or any free port
            continue
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((host or "127.0.0.1", int(port))) == 0:
                raise RuntimeError(f"{target} is already in use (another stack running?); stop it or set {var}")


def _forget_dead_handles(pgdata: Path) -> None:
    """embedded-postgres stops the cluster when its last *registered* process exits; a runner killed
    with SIGKILL stays registered in `.handle_pids.json` forever and the cluster is then never stopped.
    Drop the PIDs that no longer exist before registering."""
    path = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    alive = [p for p in pids if isinstance(p, int) and _alive(p)]
    if alive != pids:
        path.write_text(json.dumps(alive))

