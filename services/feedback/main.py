"""Entry point `agentfeedback-feedback`: settings from the environment, logging, database, serve until
SIGTERM/SIGINT (graceful: drain, then close)."""
from __future__ import annotations

import logging

from services.common.db import resolve_database_url
from services.common.lifecycle import freeze_startup_objects, run_service, serve_until_signal
from services.common.telemetry import setup_logging
from services.feedback.server import create_server
from services.feedback.settings import FeedbackSettings
from services.common.settings import load_settings

log = logging.getLogger(__name__)


async def _serve(settings: FeedbackSettings) -> None:
    server = await create_server(settings, database_url=resolve_database_url(settings))
    freeze_startup_objects()
    log.info("FeedbackService listening on port %d", server.port)
    await serve_until_signal(server.stop)


def main() -> None:
    settings = load_settings(FeedbackSettings)
    setup_logging(settings.log_level, settings.log_format)
    run_service(lambda: _serve(settings))


if __name__ == "__main__":
    main()
