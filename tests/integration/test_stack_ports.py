"""The in-process test stack (tests/stack.py) binds every listener to port 0 and reports the port it got
(issue 12: no port picked free, released, and bound later by someone else): two stacks side by side each
serve on the ports they report, and feedback reaches chat through the channel connected after chat bound."""
from __future__ import annotations

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from tests.helpers.feedback import flag, new_instance, send
from tests.stack import LateChannel, start_stack

GRPC = ("otlp_grpc", "query", "agent", "chat", "feedback")
HTTP_METRICS = ("metrics_collector", "metrics_agent", "metrics_chat", "metrics_feedback")


async def _serving(port: int) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        got = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return got.status


async def test_two_stacks_each_serve_on_the_ports_they_report(stack, database_url, tmp_path):
    other = await start_stack(database_url, tmp_path / "other")
    try:
        for s in (stack, other):
            assert set(s.ports) == {*GRPC, "otlp_http", *HTTP_METRICS}
            assert all(p > 0 for p in s.ports.values()), s.ports
            assert len(set(s.ports.values())) == len(s.ports), s.ports
            for name in GRPC:
                assert await _serving(s.ports[name]) == health_pb2.HealthCheckResponse.SERVING, name
            async with httpx.AsyncClient() as http:
                for name in HTTP_METRICS:
                    r = await http.get(f"http://127.0.0.1:{s.ports[name]}/metrics", timeout=5)
                    assert r.status_code == 200, name
                # OTLP/HTTP answers on its reported port (an empty export is accepted).
                r = await http.post(f"http://127.0.0.1:{s.ports['otlp_http']}/v1/traces", content=b"",
                                    headers={"content-type": "application/x-protobuf"}, timeout=5)
                assert r.status_code == 200, r.text
        assert not set(stack.ports.values()) & set(other.ports.values())
    finally:
        await other.stop()


async def test_feedback_reaches_chat_over_the_late_connected_channel(stack):
    """CreateFeedback checks the message with the chat service: it works only if feedback's channel to
    chat found chat's port, learnt after feedback itself was bound."""
    inst = await new_instance(stack)
    turn = await send(stack, inst, "how many agents do you have?")
    fb = await flag(stack, turn.reply.name, "wrong count")
    assert fb.snapshot.target_text == turn.reply.content


async def test_late_channel_is_unavailable_until_connected(stack):
    late = LateChannel()
    stub = chat_pb2_grpc.ChatServiceStub(late)
    try:
        try:
            await stub.ListInstances(chat_pb2.ListInstancesRequest(), metadata=stack.md())
            raise AssertionError("a call before connect() succeeded")
        except grpc.aio.AioRpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE
        late.connect(f"127.0.0.1:{stack.ports['chat']}")
        got = await stub.ListInstances(chat_pb2.ListInstancesRequest(), metadata=stack.md())
        assert list(got.instances) == []
    finally:
        await late.close()


async def test_a_service_process_whose_port_was_taken_meanwhile_moves_and_the_impostor_is_not_trusted(
        database_url, tmp_path):
    """Pick-then-bind: the agent's port, picked free, is taken by another gRPC server that answers health
    SERVING (here: one in this process) before the agent starts. The agent cannot bind (no SO_REUSEPORT),
    the impostor's SERVING is not taken for the agent's: it is moved to a new port it listens on itself,
    and chat, started earlier pointing at the old port, is restarted pointing at the new one."""
    from grpc_health.v1 import health  # noqa: PLC0415

    from tests.helpers.process_stack import make_procs  # noqa: PLC0415 - a support module, not a test module
    from tests.helpers.ports import listens  # noqa: PLC0415

    impostor = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, impostor)
    procs = make_procs(database_url, tmp_path)
    taken = procs.ports["agent"]
    impostor.add_insecure_port(f"127.0.0.1:{taken}")
    await impostor.start()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    try:
        chat_before = await procs.start("chat", OTEL_TRACES_EXPORTER="none")
        agent = await procs.start("agent", OTEL_TRACES_EXPORTER="none")
        assert procs.ports["agent"] != taken and listens(agent.pid, procs.ports["agent"])
        assert procs.env["AGENTFEEDBACK_CHAT_AGENT_TARGET"] == f"127.0.0.1:{procs.ports['agent']}"
        assert procs.running["chat"] is not chat_before and chat_before.poll() is not None
        assert await _serving(procs.ports["agent"]) == health_pb2.HealthCheckResponse.SERVING
    finally:
        procs.stop_all()
        await impostor.stop(0)
