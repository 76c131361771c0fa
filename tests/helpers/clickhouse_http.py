"""A STAND-IN for a ClickHouse server's HTTP interface (no ClickHouse server package exists here): an
aiohttp server on loopback that takes what `clickhouse-connect` sends (the statement in the body or in
`query=`, `param_<name>` values, an insert's data in any input format (Arrow included), lz4/zstd/gzip
request bodies) and runs it on the session's in-process ClickHouse engine (chdb), answering in the FORMAT the statement asks
for (clickhouse-connect reads `Native`). So `HttpTransport` — the production client path — is exercised
against the real engine; only the HTTP server in front of it is ours."""
from __future__ import annotations

import asyncio
import gzip
import re
from contextlib import asynccontextmanager

import lz4.frame
from aiohttp import web

from services.tracecollector.clickhouse_transport import ChdbTransport

_FORMAT = re.compile(r"\s+FORMAT\s+(\w+)\s*$", re.IGNORECASE)


def _decode(body: bytes, encoding: str | None) -> bytes:
    if encoding == "lz4":
        return lz4.frame.decompress(body)
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "zstd":
        from backports import zstd  # noqa: PLC0415 (clickhouse-connect's own dependency)

        return zstd.decompress(body)
    return body


@asynccontextmanager
async def clickhouse_http(engine: ChdbTransport):
    """Yields `http://127.0.0.1:PORT` serving `engine`; stopped on exit."""

    def run(sql: str, data: bytes, params: dict[str, str]) -> bytes:
        m = _FORMAT.search(sql)
        if m and data and sql.lstrip().upper().startswith("INSERT"):
            engine.raw_insert(sql[: m.start()], m.group(1), data)  # the body in its format, binary included
            return b""
        if m and not sql.lstrip().upper().startswith("INSERT"):
            sql, fmt = sql[: m.start()], m.group(1)
        else:
            fmt = "TabSeparated"
        return engine.raw(sql + ("\n" + data.decode() if data else ""), fmt, params)

    async def handle(req: web.Request) -> web.Response:
        args = dict(req.query)
        body = _decode(await req.read(), req.headers.get("Content-Encoding"))
        sql = args.pop("query", None)
        if sql is None:
            # An insert's statement comes first in the body, its data (maybe binary) after the newline.
            head, _, rest = body.partition(b"\n")
            insert = head.lstrip()[:6].upper() == b"INSERT" and _FORMAT.search(head.decode(errors="replace"))
            sql, data = (head.decode(), rest) if insert else (body.decode(), b"")
        else:
            data = body
        params = {k.removeprefix("param_"): v for k, v in args.items() if k.startswith("param_")}
        try:
            out = await asyncio.to_thread(run, sql, data, params)
        except Exception as e:  # noqa: BLE001 - a server answers an error with its text and HTTP 500
            return web.Response(status=500, text=f"Code: 1. DB::Exception: {e}")
        return web.Response(body=out, headers={"X-ClickHouse-Summary": '{"read_rows":"0","written_rows":"0"}'})

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://default@127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    finally:
        await runner.cleanup()
