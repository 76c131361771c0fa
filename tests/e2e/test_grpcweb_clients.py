"""Real gRPC-web clients against the gateway (Envoy in front of the real stack), ListFeedback with a token:
`buf curl --protocol grpcweb` (npm @bufbuild/buf) and the official `grpc-web` runtime in Node, text mode
(console/scripts/grpcweb-text-client.mjs). Both need `make console` (node_modules + generated code).
"""
from __future__ import annotations

import asyncio
import json

from agentfeedback.feedback.v1 import feedback_pb2
from tests.helpers.grpcweb import CONSOLE_DIR, gateway
from tests.helpers.console import create_feedback_request, make_turn

BUF = CONSOLE_DIR / "node_modules" / ".bin" / "buf"
SCHEMA = CONSOLE_DIR / ".proto-build"
TEXT_CLIENT = CONSOLE_DIR / "scripts" / "grpcweb-text-client.mjs"


async def run(*argv: str, cwd=CONSOLE_DIR) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def two_rows(stack) -> list[str]:
    _, turn = await make_turn(stack)
    names = []
    for body in ("The agent count is wrong.", "Names are made up — ünïcode kept"):
        fb = await stack.feedback().CreateFeedback(create_feedback_request(turn.reply.name, body), metadata=stack.md())
        names.append(fb.name)
    return names


async def test_buf_curl_grpcweb_list_feedback(stack, tmp_path):
    assert BUF.exists() and SCHEMA.is_dir(), "run `make console` first (npm ci + proto staging)"
    names = await two_rows(stack)
    async with gateway(stack, tmp_path / "envoy") as envoy:
        url = f"{envoy.url}/agentfeedback.feedback.v1.FeedbackService/ListFeedback"
        rc, out, err = await run(str(BUF), "curl", "--protocol", "grpcweb", "--schema", str(SCHEMA),
                                 "-H", f"authorization: Bearer {stack.token()}", "-d", '{"page_size": 10}', url)
        assert rc == 0, err
        got = json.loads(out)
        assert {f["name"]: f["body"] for f in got["feedback"]} == {
            names[0]: "The agent count is wrong.", names[1]: "Names are made up — ünïcode kept"}
        # Another user sees none of alice's rows; no token is UNAUTHENTICATED.
        rc, out, err = await run(str(BUF), "curl", "--protocol", "grpcweb", "--schema", str(SCHEMA),
                                 "-H", f"authorization: Bearer {stack.token('bob')}", "-d", "{}", url)
        assert rc == 0, err
        assert json.loads(out).get("feedback", []) == []
        rc, out, err = await run(str(BUF), "curl", "--protocol", "grpcweb", "--schema", str(SCHEMA), "-d", "{}", url)
        assert rc != 0
        assert "unauthenticated" in (out + err).lower()


async def test_node_grpc_web_text_client_list_feedback(stack, tmp_path):
    assert (CONSOLE_DIR / ".gen-node").is_dir(), "run `make console` first (generates .gen-node)"
    names = await two_rows(stack)
    async with gateway(stack, tmp_path / "envoy") as envoy:
        rc, out, err = await run("node", str(TEXT_CLIENT), envoy.url, stack.token())
        assert rc == 0, err
        got = json.loads(out)
        assert got["ok"], got
        # Newest first (AIP-132 order of ListFeedback), words exactly as given, status OPEN.
        assert [(f["name"], f["body"], f["status"]) for f in got["feedback"]] == [
            (names[1], "Names are made up — ünïcode kept", "OPEN"), (names[0], "The agent count is wrong.", "OPEN")]
        rc, out, err = await run("node", str(TEXT_CLIENT), envoy.url, "-")
        assert rc == 0, err
        denied = json.loads(out)
        assert denied == {"ok": False, "code": 16, "message": denied["message"]}  # 16 = UNAUTHENTICATED
    rows = await stack.feedback().ListFeedback(feedback_pb2.ListFeedbackRequest(), metadata=stack.md())
    assert len(rows.feedback) == 2  # reading changed nothing
