"""Helper of the CLI tests: run the `agentfeedback` command in-process against the test stack."""
from __future__ import annotations

import asyncio

from click.testing import CliRunner

from services.cli.main import cli


async def _cli(stack, *args: str, sub: str = "alice"):
    env = {
        "AGENTFEEDBACK_CLIENT_CHAT_TARGET": f"127.0.0.1:{stack.ports['chat']}",
        "AGENTFEEDBACK_CLIENT_FEEDBACK_TARGET": f"127.0.0.1:{stack.ports['feedback']}",
        "AGENTFEEDBACK_CLIENT_TRACES_TARGET": f"127.0.0.1:{stack.ports['query']}",
        "AGENTFEEDBACK_CLIENT_TOKEN": stack.token(sub),
    }
    # The CLI runs its own event loop: run it in a thread so the in-process stack keeps serving.
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args), env=env, catch_exceptions=False)
