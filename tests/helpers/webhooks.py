"""A real webhook receiver for tests (issue 24): aiohttp on loopback, verifying every request with the
Standard Webhooks library; and the change feed's event ids in feed order, what a receiver should get."""
from __future__ import annotations

import asyncpg
from aiohttp import web
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
