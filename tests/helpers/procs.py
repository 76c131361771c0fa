"""Helpers of the tests that run a service as its own OS process: the port it bound (it was given port 0
and logged the port it got: no port picked free, released and bound later by someone else)."""
from __future__ import annotations

import asyncio
import re
import subprocess
import time
from pathlib import Path


async def reported_port(log: Path, proc: subprocess.Popen, pattern: str, timeout_s: float = 30.0) -> int:
    """The port a child logged in `log` (`pattern`: a regex whose group 1 is the port, e.g. the service
    mains' "FeedbackService listening on port (\\d+)"). AssertionError, with the log's tail, when the child
    exits or `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        if m := re.search(pattern, text):
            return int(m.group(1))
        if proc.poll() is not None or time.monotonic() > deadline:
            why = f"exited {proc.returncode}" if proc.returncode is not None else f"silent for {timeout_s} s"
            raise AssertionError(f"no port logged ({why}): {text[-2000:]}")
        await asyncio.sleep(0.05)
