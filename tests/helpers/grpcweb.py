"""Helpers for the gRPC-web gateway tests: Envoy in front of the in-process stack, gRPC-web framing
written from the spec (grpc/grpc doc/PROTOCOL-WEB.md) so the tests check Envoy's bytes, not a
client library's interpretation of them, and the console's static files on another origin.

Frame: 1 flag byte (0x00 data, 0x80 trailers) + 4-byte big-endian length + payload. The trailer
payload is an HTTP/1-style header block (`key: value\\r\\n` lines). Text mode
(`application/grpc-web-text`) base64-encodes the frames; a response may be several base64 chunks,
each padded separately.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import http.server
import struct
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from google.protobuf.message import Message
from google.rpc import status_pb2

from services.cli.envoy import EnvoyProcess, GatewayPorts, start_envoy
from services.common.settings import PROJECT_ROOT
from tests.stack import Stack

CONSOLE_DIST = PROJECT_ROOT / "console" / "dist"
CONSOLE_DIR = PROJECT_ROOT / "console"
ARTIFACTS = PROJECT_ROOT / "test-artifacts"

CHAT = "/agentfeedback.chat.v1.ChatService/"
FEEDBACK = "/agentfeedback.feedback.v1.FeedbackService/"
TRACES = "/agentfeedback.traces.v1.TraceQueryService/"

ALLOWED_ORIGIN = "http://127.0.0.1:8081"
FOREIGN_ORIGIN = "http://evil.example:8081"
GRPC_WEB_HEADERS = ("content-type", "x-grpc-web", "x-user-agent", "grpc-timeout", "authorization", "traceparent")
DATA, TRAILERS = 0x00, 0x80


def frame(payload: bytes, flag: int = DATA) -> bytes:
    return bytes([flag]) + struct.pack(">I", len(payload)) + payload


def parse_frames(body: bytes) -> list[tuple[int, bytes]]:
    """Split a gRPC-web body into (flag, payload); AssertionError on a truncated frame."""
    out, i = [], 0
    while i < len(body):
        assert i + 5 <= len(body), f"truncated frame header at byte {i} of {len(body)}"
        flag, n = body[i], struct.unpack(">I", body[i + 1:i + 5])[0]
        assert i + 5 + n <= len(body), f"frame at {i} claims {n} bytes, body has {len(body) - i - 5}"
        out.append((flag, body[i + 5:i + 5 + n]))
        i += 5 + n
    return out


def decode_text_body(body: bytes) -> bytes:
    """application/grpc-web-text: base64 chunks, each possibly padded, concatenated."""
    text = body.replace(b"\r", b"").replace(b"\n", b"")
    assert len(text) % 4 == 0, f"grpc-web-text body of {len(text)} characters is not base64"
    out, start = b"", 0
    for i in range(0, len(text), 4):
        if text[i:i + 4].endswith(b"="):  # a padded group ends one chunk
            out += base64.b64decode(text[start:i + 4], validate=True)
            start = i + 4
    return out + base64.b64decode(text[start:], validate=True)


def parse_trailer_block(payload: bytes) -> dict[str, str]:
    fields = {}
    for line in payload.decode("utf-8").split("\r\n"):
        if line:
            k, _, v = line.partition(":")
            fields[k.strip().lower()] = v.strip()
    return fields


@dataclass
class WebResult:
    """One gRPC-web exchange as a browser would see it."""

    http_status: int
    headers: httpx.Headers
    frames: list[tuple[int, bytes]]
    raw: bytes
    elapsed_s: float
    trailers: dict[str, str] = field(default_factory=dict)

    @property
    def messages(self) -> list[bytes]:
        return [p for f, p in self.frames if f == DATA]

    @property
    def grpc_status(self) -> int | None:
        """From the trailer frame, else from the response headers (trailers-only response)."""
        v = self.trailers.get("grpc-status", self.headers.get("grpc-status"))
        return None if v is None else int(v)

    @property
    def grpc_message(self) -> str:
        from urllib.parse import unquote  # noqa: PLC0415 - grpc-message is percent-encoded

        return unquote(self.trailers.get("grpc-message", self.headers.get("grpc-message", "")))

    def status_details(self) -> status_pb2.Status:
        v = self.trailers.get("grpc-status-details-bin", self.headers.get("grpc-status-details-bin", ""))
        return status_pb2.Status.FromString(base64.b64decode(v + "=" * (-len(v) % 4)))

    def exposed(self) -> set[str]:
        return {h.strip().lower() for h in self.headers.get("access-control-expose-headers", "").split(",") if h.strip()}


async def call(
    client: httpx.AsyncClient,
    base_url: str,
    method: str,
    request: Message,
    *,
    token: str | None = None,
    origin: str | None = ALLOWED_ORIGIN,
    text: bool = False,
    grpc_timeout: str | None = None,
) -> WebResult:
    """POST one gRPC-web request (binary or text) and split the response into frames + trailers."""
    body = frame(request.SerializeToString())
    headers = {
        "content-type": "application/grpc-web-text" if text else "application/grpc-web+proto",
        "accept": "application/grpc-web-text" if text else "application/grpc-web+proto",
        "x-grpc-web": "1",
        "x-user-agent": "agentfeedback-tests",
    }
    if text:
        body = base64.b64encode(body)
    if token:
        headers["authorization"] = f"Bearer {token}"
    if origin:
        headers["origin"] = origin
    if grpc_timeout:
        headers["grpc-timeout"] = grpc_timeout
    t0 = time.perf_counter()
    r = await client.post(base_url + method, content=body, headers=headers)
    elapsed = time.perf_counter() - t0
    raw = r.content
    decoded = decode_text_body(raw) if text and raw else raw
    frames = parse_frames(decoded) if r.headers.get("content-type", "").startswith("application/grpc-web") else []
    res = WebResult(http_status=r.status_code, headers=r.headers, frames=frames, raw=raw, elapsed_s=elapsed)
    trailer_frames = [p for f, p in frames if f & TRAILERS]
    if trailer_frames:
        res.trailers = parse_trailer_block(trailer_frames[-1])
    return res


def envoy_for(stack: Stack, config_dir: Path, origins: tuple[str, ...] = (ALLOWED_ORIGIN,)) -> EnvoyProcess:
    """Envoy on a port it binds (any free one, `EnvoyProcess.port`) in front of `stack` (blocking start; run it in a thread from async code)."""
    ports = GatewayPorts(gateway=0, chat=stack.ports["chat"], feedback=stack.ports["feedback"], traces=stack.ports["query"])
    return start_envoy(ports, origins, config_dir=config_dir)


@contextlib.asynccontextmanager
async def gateway(stack: Stack, config_dir: Path, origins: tuple[str, ...] = (ALLOWED_ORIGIN,)) -> AsyncIterator[EnvoyProcess]:
    envoy = await asyncio.to_thread(envoy_for, stack, config_dir, origins)
    try:
        yield envoy
    finally:
        await asyncio.to_thread(envoy.stop)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


@contextlib.contextmanager
def static_site(root: Path) -> Iterator[str]:
    """Serve `root` (the built console) on a free loopback port in a thread; yields its origin."""
    assert (root / "index.html").is_file(), f"{root}/index.html missing: build the console first (`make console`)"
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, name="console-static", daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        t.join(5)


async def in_console(stack: Stack, config_dir: Path, flow, *args) -> None:
    """Run the browser flow `flow(site, gateway_url, token, *args)` in a thread against the built console
    (a static site) and an Envoy gateway in front of `stack` that allows the site's origin; the token is
    alice's with every scope."""
    with static_site(CONSOLE_DIST) as site:
        async with gateway(stack, config_dir, origins=(site,)) as envoy:
            await asyncio.to_thread(flow, site, envoy.url, stack.token(), *args)
