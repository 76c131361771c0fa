"""Loopback ports of listeners that other processes bind (the services' own `main()`, Envoy, `make run`):
which process listens on a port (/proc), a port where nothing listens, and a service start that
survives a port collision.

A process given a port picked free earlier (`free_ports`: bound, released, bound again by the child)
can find it taken meanwhile by anything else on the machine. Our gRPC servers do not share ports
(`grpc.so_reuseport` 0), so such a child exits at start; but until it does, a health check on the port
may be answered by the *other* process. `start_owning` therefore waits for the child's health, then
checks that the child itself (or one of its descendants) listens on every port it was given, and on a
collision moves the service to new ports (`repick`) and starts it again.
"""
from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from services.common.health import wait_serving

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column
# Environment variables that carry an address or a port (a repicked port is rewritten only there).
_ADDRESS_KEYS = re.compile(r"(_LISTEN|_TARGET|_ENDPOINT|_PORT|_URL)$")


class PortTaken(RuntimeError):
    """Another process listens on a port a child was given."""


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free now (bound together, then released): for a child's listener only where
    `start_owning` checks who got it."""
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def free_port() -> int:
    """One port free now (see `free_ports`)."""
    return free_ports(1)[0]


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == _LISTEN and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    return inodes


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (Linux /proc children lists)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return out


def _socket_inodes(pid: int) -> set[str]:
    out: set[str] = set()
    with contextlib.suppress(OSError):
        for fd in os.scandir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(fd.path)
                if target.startswith("socket:["):
                    out.add(target[8:-1])
    return out


def listeners(pid: int, port: int) -> set[int]:
    """The processes among `pid` and its descendants that listen on TCP `port` (Linux /proc)."""
    inodes = _listening_inodes(port)
    return {p for p in descendants(pid) if inodes & _socket_inodes(p)} if inodes else set()


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` or one of its descendants listens on TCP `port`."""
    return bool(listeners(pid, port))


def taken(port: int) -> bool:
    """Whether anything listens on TCP `port` of this machine."""
    return bool(_listening_inodes(port))


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port where nothing listens for the duration of the block: it stays bound by this
    process without `listen()`, so a connection is refused and no one else can take it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def repick(env: dict[str, str], ports: dict[str, int], key: str) -> tuple[int, int]:
    """Moves `ports[key]` to a new free port, rewriting every address-like value of `env` (`*_LISTEN`,
    `*_TARGET`, `*_ENDPOINT`, `*_PORT`, `*_URL`) that names the old one. (old, new)."""
    old, new = ports[key], free_port()
    ports[key] = new
    pattern = re.compile(rf"(?<![0-9]){old}(?![0-9])")
    for k, v in env.items():
        if _ADDRESS_KEYS.search(k) and pattern.search(v):
            env[k] = pattern.sub(str(new), v)
    return old, new


async def start_owning(spawn: Callable[[Mapping[str, str]], subprocess.Popen], env: dict[str, str],
                       ports: dict[str, int], own: tuple[str, ...], health: str, timeout_s: float = 60.0,
                       attempts: int = 4) -> tuple[subprocess.Popen, dict[int, int]]:
    """Start a service (`spawn(env)`) that listens on `ports[k]` for each `k` in `own`, and wait until
    the one on `ports[health]` is SERVING and the child itself listens on all of them. On a collision
    (the child exited or another process answered, with one of its ports taken) its ports are moved
    (`repick`, which rewrites `env`) and it is started again. Returns (the child, {old port: new port}
    of what moved: the caller restarts what it started earlier pointing at an old port). Raises the
    child's own failure when it was not a collision, PortTaken after `attempts`."""
    moved: dict[int, int] = {}
    for _ in range(attempts):
        proc = spawn(env)
        try:
            await wait_serving(f"127.0.0.1:{ports[health]}", timeout_s, proc)
            if all(listens(proc.pid, ports[k]) for k in own):
                return proc, moved
        except RuntimeError:  # it exited: a port of its own taken, or its own failure
            if not any(taken(ports[k]) for k in own):
                raise
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        proc.kill()
        proc.wait()
        for k in own:
            if not listens(proc.pid, ports[k]) and taken(ports[k]):
                old, new = repick(env, ports, k)
                moved[old] = new
    raise PortTaken(f"{own}: ports taken by other processes {attempts} times in a row")
