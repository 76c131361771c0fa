"""A turn's own spans (`chat.turn` and its `workspace.update` children in the gateway, `agent.think` and
`tool.call` in the agent) made as `span_pipe.PipeSpan`s (the gateway's and the agent's providers pipe
their spans through the export child alone) or by the SDK reach the collector as the same OTLP: a chat
gateway and an agent as deployed (their real export children and exporters) send them to the real
collector, which forwards what it received to a receiver here. Per turn, the same spans compare equal
field by field but their ids and times and the per-conversation ids in their values (instance, message,
tool call, request ids), with the same parents, one trace id (the turn's, returned to the caller), and
each child inside its parent's times."""
from __future__ import annotations

import asyncio
import re
import time
import uuid

import grpc
from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from google.protobuf import text_format
from opentelemetry.proto.trace.v1 import trace_pb2

from services.chat.agent.server import create_server as create_agent
from services.chat.agent.settings import AgentSettings
from services.chat.server import create_server as create_chat
from services.chat.settings import ChatSettings
from services.common import span_pipe
from services.common.telemetry import setup_tracing
from tests.helpers.chat import CALLER_PARENT, CALLER_TRACE, TRACEPARENT
from tests.helpers.otlp import bare_span, start_downstream
from tests.stack import TEST_JWT_SECRET, start_stack

TURN_SPANS = {"chat.turn", "workspace.update", "agent.think", "tool.call"}
# Each says what it exercises: workspace operations (workspace.update spans), a cut tool result
# (chat.truncated), a claimed result no tool gave (chat.invented_result), write_memory, a replayed answer.
CONTENTS = [
    "Write a README and a changelog. Always keep it short.",
    "…how many agents do you have in total? Give me their names.",
    "Please send the weekly report to my team.",
    "Remember that my sister is called Ana.",
    "hello there",
]
# The values two conversations differ in whatever path made their spans: 32-hex ids (instances,
# messages, traces) and tool call ids; request ids (UUIDs).
_IDS = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|call_[0-9a-f]{24}|[0-9a-f]{32}")


def _bare(span: trace_pb2.Span) -> str:
    """`span` less its ids and times, its ids in values replaced, as text (the caller's link kept)."""
    text = text_format.MessageToString(bare_span(span), as_one_line=True)
    caller = text_format.MessageToString(trace_pb2.Span.Link(trace_id=bytes.fromhex(CALLER_TRACE)), as_one_line=True)
    return _IDS.sub("ID", text) if caller not in text else _IDS.sub("ID", text.replace(caller, "CALLER"))


async def _turn(chat, md, instance: str, content: str, streamed: bool) -> str:
    """One turn (StreamMessage with a request id when `streamed`, else SendMessage); its trace id."""
    req = chat_pb2.SendMessageRequest(instance=instance, content=content)
    if not streamed:
        r = await chat.SendMessage(req, metadata=md)
        assert r.trace_id == r.user_message.trace_id == r.reply.trace_id
        return r.trace_id
    req.request_id = str(uuid.uuid4())
    events = [ev async for ev in chat.StreamMessage(req, metadata=md)]
    assert events[0].trace_id == events[-1].trace_id == events[-1].reply.trace_id  # the deltas carry none
    return events[0].trace_id


async def test_a_turns_spans_reach_the_collector_the_same_as_pipe_spans_or_by_the_sdk(database_url, tmp_path,
                                                                                       monkeypatch):
    down, receiver, port = await start_downstream()
    stack = await start_stack(database_url, tmp_path, collector={"forward_endpoint": f"127.0.0.1:{port}"})
    # A gateway and an agent as deployed: their spans leave through their export children, to the collector.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{stack.ports['otlp_grpc']}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    monkeypatch.setenv("AGENTFEEDBACK_DATA_DIR", str(tmp_path))  # the export children's spools
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED", "AGENTFEEDBACK_SPAN_EXPORT"):
        monkeypatch.delenv(name, raising=False)
    providers = {name: setup_tracing(name) for name in ("agent", "chat")}
    common = {"database_url": database_url, "jwt_secret": TEST_JWT_SECRET, "shutdown_grace_s": 0.5,
              "shutdown_drain_s": 0.0, "metrics_listen": "127.0.0.1:0", "listen": "127.0.0.1:0"}
    agent = await create_agent(AgentSettings(feedback_target=f"127.0.0.1:{stack.ports['feedback']}",
                                             data_dir=tmp_path / "agent", **common), tracer_provider=providers["agent"])
    gateway = await create_chat(ChatSettings(agent_target=f"127.0.0.1:{agent.port}",
                                             feedback_target=f"127.0.0.1:{stack.ports['feedback']}",
                                             data_dir=tmp_path / "chat", **common),
                                database_url=database_url, tracer_provider=providers["chat"])
    for name, tracer in (("agent", "services.chat.agent"), ("chat", "services.chat")):
        assert span_pipe._direct_processor(providers[name].get_tracer(tracer)) is not None
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}")
    chat = chat_pb2_grpc.ChatServiceStub(channel)
    md = (*stack.md(), ("traceparent", TRACEPARENT))
    turns: list[tuple[str, str]] = []  # (direct's trace id, the SDK's) per content
    try:
        instances = {}
        for direct in (True, False):
            inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
                instance=chat_pb2.Instance(display_name="Agent", agent="reference")), metadata=stack.md())
            instances[direct] = inst.name
        for i, content in enumerate(CONTENTS * 2):  # the second round streamed, with request ids
            ids = {}
            for direct in (True, False) if i % 2 == 0 else (False, True):
                monkeypatch.setattr(span_pipe, "DIRECT_SPANS", direct)
                ids[direct] = await _turn(chat, md, instances[direct], content, streamed=i >= len(CONTENTS))
            turns.append((ids[True], ids[False]))
        wanted = {bytes.fromhex(t) for pair in turns for t in pair}
        deadline = time.monotonic() + 30
        while len({s.trace_id for s in down.spans if s.name == "chat.turn"} & wanted) < len(wanted):
            assert time.monotonic() < deadline, [s.name for s in down.spans]
            await asyncio.sleep(0.2)
        await asyncio.sleep(0.5)  # the agent's spans of the last turns may come in a later batch than chat.turn
    finally:
        await channel.close()
        await gateway.stop(0.5)
        await agent.stop(0.5)
        for tp in providers.values():
            await asyncio.to_thread(tp.shutdown)
        await stack.stop()
        await receiver.stop(0)

    def turn_spans(trace_id: str) -> list[tuple]:
        """(service, scope, parent's name, span as text) of the turn's own spans, sorted; checks the parents,
        the one trace id and the times on the way."""
        got = [(r, sc, s) for r, sc, s in down.received if s.trace_id.hex() == trace_id and s.name in TURN_SPANS]
        by_id = {s.span_id: s for _r, _sc, s in got}
        assert len(by_id) == len(got), "a span arrived twice"
        out = []
        for r, sc, s in got:
            parent = by_id.get(s.parent_span_id)
            assert (parent is None) == (s.name == "chat.turn"), (s.name, trace_id)
            want_parent = {"chat.turn": "", "workspace.update": "chat.turn", "agent.think": "chat.turn",
                           "tool.call": "agent.think"}[s.name]
            assert (parent.name if parent else "") == want_parent
            if parent is not None:
                assert parent.start_time_unix_nano <= s.start_time_unix_nano <= s.end_time_unix_nano
                assert s.end_time_unix_nano <= parent.end_time_unix_nano
            else:
                assert s.parent_span_id == b"" and [(ln.trace_id.hex(), ln.span_id.hex()) for ln in s.links] == [
                    (CALLER_TRACE, CALLER_PARENT)]
            out.append((text_format.MessageToString(r, as_one_line=True), text_format.MessageToString(sc, as_one_line=True),
                        want_parent, _bare(s)))
        return sorted(out)

    for i, (direct, sdk) in enumerate(turns):
        ours, theirs = turn_spans(direct), turn_spans(sdk)
        names = sorted(x[3].split('"')[1] for x in ours)
        assert {"chat.turn", "agent.think", "tool.call"} <= set(names), (CONTENTS * 2)[i]
        assert ours == theirs, (CONTENTS * 2)[i]
    # What the contents were chosen for did happen (on both paths: they compared equal).
    every = "".join(x[3] for pair in turns for x in turn_spans(pair[0]))
    for what in ('name: "workspace.update"', '"chat.truncated"', '"chat.invented_result"', '"write_memory"',
                 '"chat.in"', '"chat.out"', '"chat.request_id"'):
        assert what in every, what
