"""Health that follows the database, and waiting for a server to be SERVING.

`DependencyWatch` probes PostgreSQL (`SELECT 1` over its own connection, never one of the pool's, so
a busy pool is not mistaken for a lost database) every `interval_s` (0.5 s) while it answers and every
`retry_s` (0.2 s) while it does not, each probe bounded by `timeout_s` (1 s). Every service of the
servers it watches goes NOT_SERVING on the first failed probe (at most 1.5 s after the database is
lost) and SERVING on the first answered one (at most 0.2 s + a connect after it returns), so
Kubernetes readiness and load balancers stop sending calls to a replica that would fail them.
Only the database is followed: another service being down makes calls that need it UNAVAILABLE,
not the whole replica (no cascade of NOT_SERVING through the call graph).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.db import connect as db_connect
from services.common.depfail import is_database_down
from services.common.incidents import INCIDENTS

log = logging.getLogger(__name__)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def postgres_probe(url: str, timeout_s: float = 1.0) -> Callable[[], Awaitable[None]]:
    """`async probe()`: returns when PostgreSQL at `url` answers `SELECT 1`, raises otherwise. Keeps one
    connection of its own open between probes (re-opened after a failure)."""
    conn: list[Any] = []

    async def probe() -> None:
        try:
            if not conn or conn[0].is_closed():
                conn[:] = [await db_connect(url, timeout=timeout_s, host_timeout_s=timeout_s)]
            await conn[0].fetchval("SELECT 1", timeout=timeout_s)
        except BaseException:
            if conn:
                conn.pop().terminate()
            raise

    async def close() -> None:
        if conn:
            await conn.pop().close(timeout=1.0)

    probe.close = close  # type: ignore[attr-defined]
    return probe


class DependencyWatch:
    """Sets the health of `servers` (GrpcServer-likes with `.health` and `.services`) from `probe`."""

    def __init__(self, servers: list[Any], probe: Callable[[], Awaitable[None]], dependency: str = "postgresql",
                 interval_s: float = 0.5, retry_s: float = 0.2, timeout_s: float = 1.0,
                 on_change: Callable[[bool], None] | None = None, meter: Any = None):
        self._servers = servers
        self._probe = probe
        self.dependency = dependency
        self._interval_s, self._retry_s, self._timeout_s = interval_s, retry_s, timeout_s
        self._on_change = on_change
        self.up = True
        self._task: asyncio.Task | None = None
        if meter is not None:  # `agentfeedback_dependency_up{dependency}`: 1 reachable, 0 not (the alert's input)
            from opentelemetry.metrics import Observation  # noqa: PLC0415

            meter.create_observable_gauge(
                "agentfeedback.dependency.up", [lambda _o: [Observation(int(self.up), {"dependency": dependency})]],
                description="1 while the dependency answers this process's probe, else 0.")

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"health-watch-{self.dependency}")

    async def stop(self) -> None:
        if self._task is not None:  # bounded: stopping a server never waits on the database
            self._task.cancel()
            await asyncio.wait([self._task], timeout=2.0)
            self._task = None
        close = getattr(self._probe, "close", None)
        if close is not None:
            try:
                await asyncio.wait_for(close(), 2.0)
            except Exception:  # noqa: BLE001 - the database may be gone; nothing to release then
                pass

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._probe(), self._timeout_s)
                ok, err = True, None
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - any failure of the probe means "not reachable"
                ok, err = False, e
            if ok != self.up:
                await self._set(ok, err)
            await asyncio.sleep(self._interval_s if ok else self._retry_s)

    async def _set(self, ok: bool, err: BaseException | None) -> None:
        self.up = ok
        status = SERVING if ok else NOT_SERVING
        for srv in self._servers:
            for name in ("", *srv.services):
                await srv.health.set(name, status)
        key = "DATABASE_UNAVAILABLE" if self.dependency == "postgresql" else f"{self.dependency.upper()}_UNAVAILABLE"
        if ok:
            log.warning("%s reachable again: health SERVING", self.dependency)
            INCIDENTS.resolved(key)
        else:
            kind = "down" if err is None or is_database_down(err) or isinstance(err, TimeoutError) else "failing"
            log.warning("%s %s (%s): health NOT_SERVING", self.dependency, kind, type(err).__name__)
        if self._on_change is not None:
            self._on_change(ok)


async def wait_serving(target: str, timeout_s: float = 60.0, proc: Any = None) -> None:
    """Poll grpc.health.v1 `Check("")` on `target` every 0.2 s until SERVING.

    `proc` (a subprocess.Popen, optional): fail fast with RuntimeError when it exits meanwhile.
    Raises TimeoutError after `timeout_s` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with grpc.aio.insecure_channel(target) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while True:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"process serving {target} exited with {proc.returncode}")
            try:
                r = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            if loop.time() > deadline:
                raise TimeoutError(f"{target} not SERVING after {timeout_s:.0f} s")
            await asyncio.sleep(0.2)
