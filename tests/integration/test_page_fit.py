"""Responses fit (issue 16): a List page that would pass the response size bound ends early with a
next-page token, so the advertised maximum page size works; the CLI pages under the hood."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from tests.stack import start_stack

ROOT = Path(__file__).resolve().parents[2]
REPORTS = 300
BODY = "\U0001F600" * 4000  # the body limit (4000 code points), 16 KB in UTF-8: 300 of them pass 4 MiB


async def test_list_feedback_at_its_maximum_page_size_pages_instead_of_failing(database_url, tmp_path):
    s = await start_stack(database_url, tmp_path, feedback={"write_quota_per_minute": 0})
    try:
        chat = s.chat()
        inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name="p", agent="reference")), metadata=s.md())
        turn = await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content="hello",
                                                                  request_id=str(uuid.uuid4())), metadata=s.md())
        fb = s.feedback()

        async def create(_: int) -> None:
            await fb.CreateFeedback(pb.CreateFeedbackRequest(
                feedback=pb.Feedback(message=turn.reply.name, body=BODY), request_id=str(uuid.uuid4())),
                metadata=s.md())

        for start in range(0, REPORTS, 20):
            await asyncio.gather(*(create(i) for i in range(start, start + 20)))
        # Was RESOURCE_EXHAUSTED ("received message larger than max") once the page passed 4 MiB.
        first = await fb.ListFeedback(pb.ListFeedbackRequest(page_size=1000), metadata=s.md())
        assert 0 < len(first.feedback) < REPORTS and first.next_page_token
        assert first.ByteSize() <= 4 * 1024 * 1024
        names = [f.name for f in first.feedback]
        token = first.next_page_token
        while token:
            page = await fb.ListFeedback(pb.ListFeedbackRequest(page_size=1000, page_token=token), metadata=s.md())
            names += [f.name for f in page.feedback]
            token = page.next_page_token
        assert len(names) == len(set(names)) == REPORTS

        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "gen")])}
        out = await asyncio.to_thread(subprocess.run, [
            sys.executable, "-m", "services.cli.main", "--feedback", f"127.0.0.1:{s.ports['feedback']}",
            "--token", s.token(), "feedback", "list", "--limit", "1000", "--json"],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
        assert len(rows) == REPORTS and "next page" not in out.stderr
    finally:
        await s.stop()
