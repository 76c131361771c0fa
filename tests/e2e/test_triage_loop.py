"""The reason we exist, end to end: a reply is flagged through the gRPC-web gateway as the console
does; then, over MCP (the real `agentfeedback-mcp` server on stdio), a triager lists it with its trace
id, pulls exactly that turn's tool calls, and resolves it FILED with an issue URL; a token without
`feedback:triage` is refused.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid

import httpx
from mcp import Client, StdioServerParameters

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2
from services.common.auth import ALL_SCOPES
from services.common.settings import PROJECT_ROOT
from tests.helpers.grpcweb import CHAT, FEEDBACK, gateway
from tests.helpers import grpcweb as web
from tests.helpers.procs import reported_port


def _mcp_params(stack, token: str) -> StdioServerParameters:
    env = {
        **os.environ,
        "AGENTFEEDBACK_CLIENT_CHAT_TARGET": f"127.0.0.1:{stack.ports['chat']}",
        "AGENTFEEDBACK_CLIENT_FEEDBACK_TARGET": f"127.0.0.1:{stack.ports['feedback']}",
        "AGENTFEEDBACK_CLIENT_TRACES_TARGET": f"127.0.0.1:{stack.ports['query']}",
        "AGENTFEEDBACK_CLIENT_TOKEN": token,
        "PYTHONPATH": os.pathsep.join([str(PROJECT_ROOT / "gen"), str(PROJECT_ROOT)]),
    }
    return StdioServerParameters(command=sys.executable, args=["-m", "services.cli.mcp_server"], env=env,
                                 cwd=str(PROJECT_ROOT))


def _payload(result) -> dict:
    assert not result.is_error, result.content
    if result.structured_content:
        return result.structured_content.get("result", result.structured_content)
    return json.loads(result.content[0].text)


async def test_flag_via_grpcweb_then_triage_over_mcp(stack, tmp_path):
    token = stack.token("alice")
    async with gateway(stack, tmp_path / "envoy") as envoy, httpx.AsyncClient(timeout=30) as http:
        base = envoy.url
        r = await web.call(http, base, CHAT + "CreateInstance", chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name="Ops agent", agent="reference")), token=token)
        assert r.grpc_status == 0, r.grpc_message
        inst = chat_pb2.Instance.FromString(r.messages[0])
        turns = []
        for text in ("how many agents do you have? list them", "list my subordinates please"):
            r = await web.call(http, base, CHAT + "SendMessage", chat_pb2.SendMessageRequest(
                instance=inst.name, content=text, request_id=str(uuid.uuid4())), token=token)
            assert r.grpc_status == 0, r.grpc_message
            turns.append(chat_pb2.SendMessageResponse.FromString(r.messages[0]))
        flagged = turns[1]
        r = await web.call(http, base, FEEDBACK + "CreateFeedback", feedback_pb2.CreateFeedbackRequest(
            feedback=feedback_pb2.Feedback(message=flagged.reply.name, body="It cut the list off and made up a name.",
                                           sentiment=feedback_pb2.SENTIMENT_BAD),
            request_id=str(uuid.uuid4())), token=token)
        assert r.grpc_status == 0, r.grpc_message
        created = feedback_pb2.Feedback.FromString(r.messages[0])

    await stack.wait_trace(flagged.trace_id, min_spans=3)
    await stack.wait_trace(turns[0].trace_id, min_spans=3)

    async with Client(_mcp_params(stack, token)) as mcp:
        rows = _payload(await mcp.call_tool("list_feedback", {"status": "open"}))["feedback"]
        assert [row["name"] for row in rows] == [created.name]
        assert rows[0]["trace_id"] == flagged.trace_id and rows[0]["message"] == flagged.reply.name

        trace = _payload(await mcp.call_tool("agent_trace", {"trace_id": rows[0]["trace_id"]}))
        assert trace["tool_calls"], "the flagged turn's tool calls"
        assert {s["trace_id"] for s in trace["spans"]} == {flagged.trace_id}
        span_ids = {s["span_id"] for s in trace["spans"]}
        assert all(tc["span_id"] in span_ids for tc in trace["tool_calls"])
        other = _payload(await mcp.call_tool("agent_trace", {"trace_id": turns[0].trace_id}))
        assert not {tc["span_id"] for tc in other["tool_calls"]} & {tc["span_id"] for tc in trace["tool_calls"]}

        around = _payload(await mcp.call_tool("instance_messages", {"instance": inst.name,
                                                                     "around_trace_id": flagged.trace_id, "window": 0}))
        assert [m["trace_id"] for m in around["messages"]] == [flagged.trace_id, flagged.trace_id]

        for limit in (0, 10**12):  # a clear status, not "Error executing tool" with a server traceback
            bad = await mcp.call_tool("list_feedback", {"limit": limit})
            assert bad.is_error and "INVALID_ARGUMENT: limit" in bad.content[0].text, bad.content[0].text

    limited = stack.token("alice", tuple(s for s in ALL_SCOPES if s != "feedback:triage"))
    async with Client(_mcp_params(stack, limited)) as mcp:
        refused = await mcp.call_tool("resolve_feedback", {"feedback_id": created.name, "status": "filed",
                                                           "issue_url": "https://tracker.example/1"})
        assert refused.is_error and "PERMISSION_DENIED" in refused.content[0].text

    async with Client(_mcp_params(stack, token)) as mcp:
        done = _payload(await mcp.call_tool("resolve_feedback", {"feedback_id": created.name, "status": "filed",
                                                                 "issue_url": "https://tracker.example/1"}))
        assert done["status"] == "STATUS_FILED" and done["issue_url"] == "https://tracker.example/1"

    got = await stack.feedback().GetFeedback(feedback_pb2.GetFeedbackRequest(name=created.name), metadata=stack.md("alice"))
    assert got.status == feedback_pb2.STATUS_FILED and got.issue_url == "https://tracker.example/1"


async def test_mcp_over_streamable_http_is_owner_scoped(stack, tmp_path):
    """The same MCP server over streamable HTTP (its other transport): each owner sees only their rows."""
    chat = stack.chat()
    inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="a", agent="reference")), metadata=stack.md("alice"))
    turn = await chat.SendMessage(chat_pb2.SendMessageRequest(instance=inst.name, content="hi",
                                                              request_id=str(uuid.uuid4())), metadata=stack.md("alice"))
    fb = await stack.feedback().CreateFeedback(feedback_pb2.CreateFeedbackRequest(
        feedback=feedback_pb2.Feedback(message=turn.reply.name, body="wrong greeting"),
        request_id=str(uuid.uuid4())), metadata=stack.md("alice"))

    async def rows_seen_by(sub: str) -> list[str]:
        params = _mcp_params(stack, stack.token(sub))
        log = tmp_path / f"mcp-{sub}.log"
        with log.open("wb") as out:  # port 0: uvicorn binds any free port and logs the one it got
            proc = subprocess.Popen([sys.executable, "-m", "services.cli.mcp_server", "--transport", "streamable-http",
                                     "--port", "0"], env=params.env, cwd=params.cwd, stdout=out, stderr=subprocess.STDOUT)
        try:
            port = await reported_port(log, proc, r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
            for _ in range(100):
                try:
                    async with httpx.AsyncClient() as h:
                        await h.get(f"http://127.0.0.1:{port}/mcp")
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            async with Client(f"http://127.0.0.1:{port}/mcp") as mcp:
                return [r["name"] for r in _payload(await mcp.call_tool("list_feedback", {}))["feedback"]]
        finally:
            proc.terminate()
            proc.wait(10)

    assert await rows_seen_by("alice") == [fb.name]
    assert await rows_seen_by("mallory") == []
