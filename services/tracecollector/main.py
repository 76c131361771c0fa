"""Entry point `agentfeedback-tracecollector`: settings from the environment (`AGENTFEEDBACK_COLLECTOR_*`,
`AGENTFEEDBACK_*`, `OTEL_*`), then serve until SIGTERM/SIGINT (graceful: drain, flush, close)."""
from __future__ import annotations

import asyncio

from services.common.db import resolve_database_url
from services.common.lifecycle import serve_until_signal
from services.common.telemetry import setup_logging, setup_tracing
from services.tracecollector.server import create_server
from services.tracecollector.settings import CollectorSettings
from services.common.settings import load_settings


async def _serve(settings: CollectorSettings) -> None:
    url = resolve_database_url(settings)
    provider = setup_tracing("agentfeedback-tracecollector")
    server = await create_server(settings, database_url=url, tracer_provider=provider)

    async def stop() -> None:
        await server.stop()
        provider.shutdown()

    await serve_until_signal(stop)


def main() -> None:
    settings = load_settings(CollectorSettings)
    setup_logging(settings.log_level, settings.log_format)
    asyncio.run(_serve(settings))


if __name__ == "__main__":
    main()
