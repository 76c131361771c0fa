"""A real webhook receiver for tests (issue 24): aiohttp on loopback, verifying every request with the
Standard Webhooks library; the change feed's event ids in feed order, what a receiver should get; a name
table for the delivery's resolver and a port that counts the connections it gets (the address guard)."""
from __future__ import annotations

import asyncio
import socket

import asyncpg
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from standardwebhooks.webhooks import Webhook, WebhookVerificationError


class Receiver:
    """An HTTP endpoint on loopback that verifies each POST's signature and records the verified payloads;
    `down()` stops listening (connections refused), `up()` listens again on the same port."""

    def __init__(self):
        self.secret = ""
        self.got: list[dict] = []
        self.bad: list[str] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.text()
        try:
            payload = Webhook(self.secret).verify(body, dict(request.headers))
        except WebhookVerificationError as e:
            self.bad.append(str(e))
            return web.Response(status=400)
        assert request.headers["webhook-id"] == payload["data"]["id"]
        self.got.append(payload)
        return web.Response(status=204)

    async def up(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        self.port = self.port or self._runner.addresses[0][1]

    async def down(self) -> None:
        await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


async def feed_event_ids(database_url: str) -> list[str]:
    """Every event id of the change feed's outbox (`feedback.feed_events`), in feed order."""
    conn = await asyncpg.connect(database_url, server_settings={"search_path": "feedback"})
    try:
        return [str(r["seq"]) for r in await conn.fetch("SELECT seq FROM feed_events ORDER BY xid, seq")]
    finally:
        await conn.close()


class HostsResolver(AbstractResolver):
    """A fixed table of names → addresses, like lines of /etc/hosts, which a test cannot safely add to the
    machine's. Given to the feedback service as `create_server(webhook_resolver=...)`, it is what webhook
    delivery looks names up in; the address guard then checks its answers. A name not in the table fails
    as the system's lookup does (OSError). `asked`: the names looked up, in order."""

    def __init__(self, table: dict[str, list[str]]):
        self.table = table
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        self.asked.append(host)
        if host not in self.table:
            raise OSError(socket.EAI_NONAME, "Name or service not known")
        return [ResolveResult(hostname=host, host=a, port=port, family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                              proto=0, flags=socket.AI_NUMERICHOST) for a in self.table[host]]

    async def close(self) -> None:
        pass


class Listener:
    """A TCP port on 127.0.0.1 that counts the connections made to it and closes each at once (a TLS client
    gets no handshake): whether a delivery reached the address at all."""

    def __init__(self):
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def _accept(self, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
