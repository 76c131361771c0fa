"""The agent's prompt never carries feedback, checked on the wire: the agent runs with its optional
OpenAI-compatible backend pointed at a local HTTP server standing in for the external LLM API,
which records every request it gets."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as fpb
from aiohttp import web

from services.chat.agent.prompt import RECORD_FEEDBACK_PARAGRAPH
from tests.helpers.chat import by_name, new_instance
from tests.stack import start_stack

SECRET_WORDS = "PURPLE-ZEBRA-42: the agent was rude about my cat"


class StandInLLM:
    """POST /v1/chat/completions: first call of a turn asks for `list_subordinates`, then answers."""

    def __init__(self):
        self.requests: list[dict] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if body["messages"][-1]["role"] == "user":
            msg = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{len(self.requests)}",
                        "type": "function",
                        "function": {"name": "list_subordinates", "arguments": "{}"},
                    }
                ],
            }
        else:
            msg = {"role": "assistant", "content": f"answer {len(self.requests)}"}
        return web.json_response({"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]})


async def test_prompt_for_instance_with_feedback_contains_none_of_it(database_url: str, tmp_path: Path):
    llm = StandInLLM()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", llm.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001 - aiohttp exposes no public accessor
    stack = await start_stack(
        database_url,
        tmp_path,
        agent={"openai_base_url": f"http://127.0.0.1:{port}/v1", "openai_model": "stand-in-model"},
    )
    try:
        parent = await new_instance(stack)
        first = await stack.chat().SendMessage(
            chat_pb2.SendMessageRequest(instance=parent, content="hello"), metadata=stack.md()
        )
        assert first.reply.content == "answer 2" and first.reply.model == "stand-in-model"
        # The backend's tool call went through the registry: a tool.call span under agent.think.
        t = await stack.wait_trace(first.trace_id, min_spans=3)
        (tool,) = by_name(t, "tool.call")
        assert tool.attributes["gen_ai.tool.name"] == "list_subordinates"
        assert tool.attributes["gen_ai.tool.call.id"] == "call_1"
        for target in (
            fpb.Feedback(message=first.reply.name),
            fpb.Feedback(trace_id=first.trace_id, instance=parent),
        ):
            target.body = SECRET_WORDS
            await stack.feedback().CreateFeedback(
                fpb.CreateFeedbackRequest(feedback=target, request_id=str(uuid.uuid4())), metadata=stack.md()
            )
        seen = len(llm.requests)
        second = await stack.chat().SendMessage(
            chat_pb2.SendMessageRequest(instance=parent, content="and now?"), metadata=stack.md()
        )
        assert second.reply.content.startswith("answer")
        sent = llm.requests[seen:]
        assert sent, "the agent did not call the model"
        for body in sent:
            system = body["messages"][0]
            assert system["role"] == "system" and RECORD_FEEDBACK_PARAGRAPH in system["content"]
            assert "PURPLE-ZEBRA" not in json.dumps(body)
        # The history it did send is the conversation itself.
        assert [m["content"] for m in sent[0]["messages"][1:]] == ["hello", "answer 2", "and now?"]
    finally:
        await stack.stop()
        await runner.cleanup()
