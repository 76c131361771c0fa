"""`agentfeedback-chat`: the chat gateway process (settings from `AGENTFEEDBACK_CHAT_*` / `OTEL_*`)."""

from __future__ import annotations

import logging

from services.chat.server import create_server
from services.chat.settings import ChatSettings
from services.common.db import resolve_database_url
from services.common.lifecycle import freeze_startup_objects, run_service, serve_until_signal
from services.common.telemetry import setup_logging
from services.common.settings import load_settings

log = logging.getLogger(__name__)


async def _run(settings: ChatSettings) -> None:
    server = await create_server(settings, database_url=resolve_database_url(settings))
    freeze_startup_objects()
    log.info("ChatService listening on port %d (agent at %s)", server.port, settings.agent_target)
    await serve_until_signal(server.stop)


def main() -> None:
    settings = load_settings(ChatSettings)
    setup_logging(settings.log_level, settings.log_format)
    run_service(lambda: _run(settings))


if __name__ == "__main__":
    main()
