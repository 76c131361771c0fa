"""Feedback reports over real gRPC and a real PostgreSQL, with the real chat gateway, agent and trace
collector of the `stack` fixture (tests/stack.py). Access: another owner, no token, and the MCP triage server's input checks.
Tests named after field cases carry the case id.
"""
from __future__ import annotations


import grpc
import pytest
from google.protobuf import field_mask_pb2

from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.common.auth import (
    SCOPE_FEEDBACK_READ,
    SCOPE_FEEDBACK_WRITE,
)


from tests.helpers.feedback import (
    expect_error,
    flag,
    get,
    list_all,
    new_instance,
    rid,
    send,
)

PENDING, CAPTURED, EXPIRED = pb.TRACE_SNAPSHOT_STATE_PENDING, pb.TRACE_SNAPSHOT_STATE_CAPTURED, pb.TRACE_SNAPSHOT_STATE_EXPIRED

PENDING, CAPTURED, EXPIRED = pb.TRACE_SNAPSHOT_STATE_PENDING, pb.TRACE_SNAPSHOT_STATE_CAPTURED, pb.TRACE_SNAPSHOT_STATE_EXPIRED


async def test_F22_another_user_cannot_read_create_update_or_delete_and_no_token_is_unauthenticated(stack):
    inst = await new_instance(stack, "alice")
    turn = await send(stack, inst, "mine", sub="alice")
    fb = await flag(stack, turn.reply.name, "alice's words", sub="alice")
    fbs = stack.feedback()
    await expect_error(flag(stack, turn.reply.name, "bob's words", sub="bob"), grpc.StatusCode.NOT_FOUND)
    await expect_error(fbs.CreateFeedback(pb.CreateFeedbackRequest(
        feedback=pb.Feedback(trace_id=turn.trace_id, instance=inst, body="bob via trace"), request_id=rid()),
        metadata=stack.md("bob")), grpc.StatusCode.NOT_FOUND)
    assert await list_all(stack, "bob") == []
    await expect_error(get(stack, fb.name, "bob"), grpc.StatusCode.NOT_FOUND)
    await expect_error(fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_DISMISSED), update_mask=field_mask_pb2.FieldMask(
            paths=["status"])), metadata=stack.md("bob")), grpc.StatusCode.NOT_FOUND)
    await expect_error(fbs.DeleteFeedback(pb.DeleteFeedbackRequest(name=fb.name), metadata=stack.md("bob")),
                       grpc.StatusCode.NOT_FOUND)
    await expect_error(fbs.FileFeedback(pb.FileFeedbackRequest(name=fb.name), metadata=stack.md("bob")),
                       grpc.StatusCode.NOT_FOUND)
    after = await get(stack, fb.name)
    assert after.etag == fb.etag and after.status == pb.STATUS_OPEN and after.body == fb.body
    assert [f.name for f in await list_all(stack, "alice")] == [fb.name]
    await expect_error(fbs.GetFeedback(pb.GetFeedbackRequest(name=fb.name)), grpc.StatusCode.UNAUTHENTICATED)
    # Scopes: the agent-facing token can write but not read; triage needs feedback:triage.
    writer = stack.md("alice", (SCOPE_FEEDBACK_WRITE, "chat"))
    await expect_error(fbs.GetFeedback(pb.GetFeedbackRequest(name=fb.name), metadata=writer),
                       grpc.StatusCode.PERMISSION_DENIED)
    reader = stack.md("alice", (SCOPE_FEEDBACK_READ,))
    await expect_error(fbs.UpdateFeedback(pb.UpdateFeedbackRequest(
        feedback=pb.Feedback(name=fb.name, status=pb.STATUS_TRIAGED),
        update_mask=field_mask_pb2.FieldMask(paths=["status"])), metadata=reader), grpc.StatusCode.PERMISSION_DENIED)
    await expect_error(fbs.GetFeedbackStats(pb.GetFeedbackStatsRequest(), metadata=reader),
                       grpc.StatusCode.PERMISSION_DENIED)


async def test_mcp_instance_messages_rejects_a_malformed_trace_id_and_a_negative_window(stack):
    from mcp.server.mcpserver.exceptions import ToolError  # noqa: PLC0415

    from services.cli.client import Clients, ClientSettings  # noqa: PLC0415
    from services.cli.mcp_server import build_server  # noqa: PLC0415

    inst = await new_instance(stack)
    turn = await send(stack, inst, "hi")
    clients = Clients(settings=ClientSettings(chat_target=f"127.0.0.1:{stack.ports['chat']}",
                                              feedback_target=f"127.0.0.1:{stack.ports['feedback']}",
                                              traces_target=f"127.0.0.1:{stack.ports['query']}"),
                      token=stack.token())
    mcp = build_server(clients)
    try:
        for args, field_path in (({"around_trace_id": "nothex"}, "around_trace_id"), ({"window": -1}, "window")):
            with pytest.raises(ToolError) as e:
                await mcp.call_tool("instance_messages", {"instance": inst, **args})
            assert f"INVALID_ARGUMENT: {field_path}:" in str(e.value)
        with pytest.raises(ToolError) as e:
            await mcp.call_tool("instance_messages", {"instance": inst, "around_trace_id": "ab" * 16})
        assert "NOT_FOUND:" in str(e.value)
        got = await mcp.call_tool("instance_messages", {"instance": inst, "around_trace_id": turn.trace_id.upper(),
                                                         "window": 0})
        assert turn.reply.name in str(got)
    finally:
        for ch in clients.channels:
            await ch.close()
