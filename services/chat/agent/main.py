"""`agentfeedback-agent`: the reference agent process (settings from `AGENTFEEDBACK_AGENT_*` / `OTEL_*`)."""

from __future__ import annotations

import logging

from services.chat.agent.server import create_server
from services.chat.agent.settings import AgentSettings
from services.common.lifecycle import freeze_startup_objects, run_service, serve_until_signal
from services.common.telemetry import setup_logging
from services.common.settings import load_settings

log = logging.getLogger(__name__)


async def _run(settings: AgentSettings) -> None:
    server = await create_server(settings)
    freeze_startup_objects()
    log.info("AgentService listening on port %d (feedback at %s)", server.port, settings.feedback_target)
    await serve_until_signal(server.stop)


def main() -> None:
    settings = load_settings(AgentSettings)
    setup_logging(settings.log_level, settings.log_format)
    run_service(lambda: _run(settings))


if __name__ == "__main__":
    main()
