"""The co-construction workspace over real gRPC and PostgreSQL (issue 23): what the reference agent's turns
build (objective, plan, preferences, two artifacts in one turn), the snapshot of every turn with the
server's `changed` flags, artifacts per turn and per version, the trace of what a turn did, forks,
Clear chat and DeleteTurn, and a bad operation from an OpenAI-compatible model losing nothing."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import grpc
import pytest
from agentfeedback.chat.v1 import chat_pb2
from aiohttp import web

from tests.helpers.chat import by_name, events, new_instance
from tests.stack import Stack, start_stack


async def say(stack: Stack, instance: str, content: str, sub: str = "alice") -> chat_pb2.SendMessageResponse:
    return await stack.chat().SendMessage(chat_pb2.SendMessageRequest(
        instance=instance, content=content, request_id=str(uuid.uuid4())), metadata=stack.md(sub))


async def workspace(stack: Stack, instance: str, turn: int | None = None, sub: str = "alice") -> chat_pb2.Workspace:
    req = chat_pb2.GetWorkspaceRequest(name=f"{instance}/workspace")
    if turn is not None:
        req.turn_index = turn
    return await stack.chat().GetWorkspace(req, metadata=stack.md(sub))


def changed(w: chat_pb2.Workspace) -> set[str]:
    return {c for c, on in (("objective", w.objective.changed), ("plan", w.plan.changed),
                            ("artifacts", w.artifacts_changed), ("preferences", w.preferences.changed)) if on}


async def artifacts(stack: Stack, instance: str, turn: int | None = None) -> list[chat_pb2.Artifact]:
    req = chat_pb2.ListArtifactsRequest(parent=instance)
    if turn is not None:
        req.turn_index = turn
    return list((await stack.chat().ListArtifacts(req, metadata=stack.md())).artifacts)


WRITE_TWO = "Write a README and a changelog for the parser. Always use British spelling. Keep it under a page."
PLAN = "First outline the tests, then fix the tokenizer, and finally update the docs."


async def test_the_reference_agents_turns_build_the_workspace_and_each_turn_has_its_snapshot(stack: Stack):
    inst = await new_instance(stack)
    t0 = await say(stack, inst, WRITE_TWO)
    t1 = await say(stack, inst, PLAN)
    t2 = await say(stack, inst, "next")
    t3 = await say(stack, inst, "Please revise the README to mention the licence.")
    t4 = await say(stack, inst, "Actually, let's focus on the benchmark report instead.")

    w0 = await workspace(stack, inst, 0)
    assert w0.snapshot_turn_index == 0 and w0.trace_id == t0.trace_id
    assert w0.objective.text == "Write a README and a changelog for the parser." and w0.objective.set_turn_index == 0
    assert [(a.artifact_id, a.title, a.version) for a in w0.artifacts] == [(1, "README", 1), (2, "changelog for the parser", 1)]
    assert all(a.changed and a.content.startswith("# ") for a in w0.artifacts)
    assert [(p.text, p.source) for p in w0.preferences.items] == [
        ("Always use British spelling.", chat_pb2.PREFERENCE_SOURCE_OWNER),
        ("Keep it under a page.", chat_pb2.PREFERENCE_SOURCE_OWNER)]
    assert changed(w0) == {"objective", "artifacts", "preferences"}  # no plan asked for yet

    w1 = await workspace(stack, inst, 1)
    assert [(s.text, s.state) for s in w1.plan.steps] == [
        ("outline the tests", chat_pb2.PLAN_STEP_STATE_DOING), ("fix the tokenizer", chat_pb2.PLAN_STEP_STATE_PENDING),
        ("update the docs", chat_pb2.PLAN_STEP_STATE_PENDING)]
    assert changed(w1) == {"plan"} and w1.objective.text == w0.objective.text  # the objective is kept
    assert [a.version for a in w1.artifacts] == [1, 1] and not any(a.changed for a in w1.artifacts)

    w2 = await workspace(stack, inst, 2)
    assert [s.state for s in w2.plan.steps] == [chat_pb2.PLAN_STEP_STATE_DONE, chat_pb2.PLAN_STEP_STATE_DOING,
                                                chat_pb2.PLAN_STEP_STATE_PENDING]
    assert changed(w2) == {"plan"}

    w3 = await workspace(stack, inst, 3)
    assert changed(w3) == {"artifacts"}
    assert [(a.artifact_id, a.version, a.changed) for a in w3.artifacts] == [(1, 2, True), (2, 1, False)]
    readme_v1 = await stack.chat().GetArtifact(chat_pb2.GetArtifactRequest(name=f"{inst}/artifacts/1", version=1),
                                               metadata=stack.md())
    assert readme_v1.content == w0.artifacts[0].content and readme_v1.turn_index == 0
    latest = await stack.chat().GetArtifact(chat_pb2.GetArtifactRequest(name=f"{inst}/artifacts/1"), metadata=stack.md())
    assert latest.version == 2 and latest.turn_index == 3 and latest.content != readme_v1.content

    w4 = await workspace(stack, inst)  # no turn: the latest
    assert w4.turn_index == w4.snapshot_turn_index == 4 and changed(w4) == {"objective"}
    assert w4.objective.text.startswith("Actually, let's focus on the benchmark report") and w4.objective.set_turn_index == 4

    # Artifacts "produced or changed in turn N", and all of them at their latest version.
    assert [(a.artifact_id, a.version) for a in await artifacts(stack, inst, 0)] == [(1, 1), (2, 1)]
    assert await artifacts(stack, inst, 1) == []
    assert [(a.artifact_id, a.version) for a in await artifacts(stack, inst, 3)] == [(1, 2)]
    assert [(a.artifact_id, a.version) for a in await artifacts(stack, inst)] == [(1, 2), (2, 1)]
    page = await stack.chat().ListArtifacts(chat_pb2.ListArtifactsRequest(parent=inst, page_size=1), metadata=stack.md())
    rest = await stack.chat().ListArtifacts(chat_pb2.ListArtifactsRequest(
        parent=inst, page_size=1, page_token=page.next_page_token), metadata=stack.md())
    assert [a.artifact_id for a in (*page.artifacts, *rest.artifacts)] == [1, 2] and not rest.next_page_token

    # The trace shows what the turn did to the workspace: one workspace.update child span per change.
    t = await stack.wait_trace(t0.trace_id, min_spans=7)
    (root,) = by_name(t, "chat.turn")
    updates = by_name(t, "workspace.update")
    assert all(u.parent_span_id == root.span_id for u in updates)
    assert sorted((u.attributes["workspace.component"], int(dict(u.attributes).get("workspace.artifact_id", 0)))
                  for u in updates) == [("artifact", 1), ("artifact", 2), ("objective", 0), ("preferences", 0),
                                        ("preferences", 0)]
    assert not events(t, "workspace.operation_dropped")
    for later in (t1, t2, t3, t4):
        assert later.reply.content  # every turn answered


async def test_a_turn_without_a_snapshot_and_turns_not_reached(stack: Stack):
    inst = await new_instance(stack)
    empty = await workspace(stack, inst)
    assert empty.snapshot_turn_index == -1 and not empty.objective.text and not changed(empty)
    await say(stack, inst, WRITE_TWO)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await workspace(stack, inst, 1)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    for req, field in ((chat_pb2.GetWorkspaceRequest(name=inst), "name"),
                       (chat_pb2.GetWorkspaceRequest(name=f"{inst}/workspace", turn_index=-1), "turn_index")):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stack.chat().GetWorkspace(req, metadata=stack.md())
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in e.value.details()
    # Artifact 1 exists; `01` is not another name for it (AIP-122: one name per resource).
    assert (await stack.chat().GetArtifact(chat_pb2.GetArtifactRequest(name=f"{inst}/artifacts/1"),
                                           metadata=stack.md())).name == f"{inst}/artifacts/1"
    for name in (f"{inst}/artifacts/0", f"{inst}/artifacts/x", f"{inst}/artifacts/01", f"{inst}/artifacts/0001"):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stack.chat().GetArtifact(chat_pb2.GetArtifactRequest(name=name), metadata=stack.md())
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "leading zero" in e.value.details()
    for req in (chat_pb2.GetArtifactRequest(name=f"{inst}/artifacts/3"),
                chat_pb2.GetArtifactRequest(name=f"{inst}/artifacts/1", version=2)):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stack.chat().GetArtifact(req, metadata=stack.md())
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    # Another owner sees nothing of it.
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await workspace(stack, inst, sub="mallory")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stack.chat().GetArtifact(chat_pb2.GetArtifactRequest(name=f"{inst}/artifacts/1"), metadata=stack.md("mallory"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_fork_carries_the_prefix_workspace_and_diverges_independently(stack: Stack):
    parent = await new_instance(stack)
    await say(stack, parent, WRITE_TWO)
    await say(stack, parent, PLAN)
    await say(stack, parent, "Please revise the changelog for the parser with the new flags.")
    fork = (await stack.chat().ForkConversation(chat_pb2.ForkConversationRequest(
        parent=parent, turn_index=1, request_id=str(uuid.uuid4())), metadata=stack.md())).instance
    for turn in (0, 1):
        a, b = await workspace(stack, parent, turn), await workspace(stack, fork.name, turn)
        assert (a.objective, a.plan, a.preferences, a.artifacts_changed) == (b.objective, b.plan, b.preferences,
                                                                             b.artifacts_changed)
        assert [(x.artifact_id, x.version, x.content, x.changed) for x in a.artifacts] == [
            (x.artifact_id, x.version, x.content, x.changed) for x in b.artifacts]
        assert all(x.name.startswith(fork.name + "/artifacts/") for x in b.artifacts)
    # The parent's turn 2 is not the fork's.
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stack.chat().GetArtifact(chat_pb2.GetArtifactRequest(name=f"{fork.name}/artifacts/2", version=2),
                                       metadata=stack.md())
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    # The fork goes its own way: a new artifact there takes an id the parent never gave out, and the parent
    # does not see it; the parent's later writes do not reach the fork.
    await say(stack, fork.name, "Write a migration guide.")
    await say(stack, parent, "Write a release note.")
    wf, wp = await workspace(stack, fork.name), await workspace(stack, parent)
    assert [(a.artifact_id, a.title, a.version) for a in wf.artifacts] == [
        (1, "README", 1), (2, "changelog for the parser", 1), (3, "migration guide", 1)]
    assert [(a.artifact_id, a.title, a.version) for a in wp.artifacts] == [
        (1, "README", 1), (2, "changelog for the parser", 2), (3, "release note", 1)]
    assert wf.snapshot_turn_index == 2 and wp.snapshot_turn_index == 3


async def test_clear_chat_and_delete_turn_treat_the_workspace_like_messages(stack: Stack):
    inst = await new_instance(stack)
    t0 = await say(stack, inst, WRITE_TWO)
    t1 = await say(stack, inst, "Write a glossary.")
    await say(stack, inst, "Please revise the glossary with more terms.")
    # DeleteTurn(1): its snapshot goes; glossary v1 (written in turn 1) is no longer shown by any snapshot
    # (turn 2 shows v2), so it goes too; turn 2's view is its own record and stays as stored.
    await stack.chat().DeleteTurn(chat_pb2.DeleteTurnRequest(parent=inst, trace_id=t1.trace_id), metadata=stack.md())
    w1 = await workspace(stack, inst, 1)
    assert w1.snapshot_turn_index == 0 and not changed(w1)  # served by turn 0's snapshot, nothing changed in 1
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stack.chat().GetArtifact(chat_pb2.GetArtifactRequest(name=f"{inst}/artifacts/3", version=1),
                                       metadata=stack.md())
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    w2 = await workspace(stack, inst, 2)
    assert [(a.artifact_id, a.version) for a in w2.artifacts] == [(1, 1), (2, 1), (3, 2)] and changed(w2) == {"artifacts"}
    # DeleteTurn(0): its artifacts are still shown by turn 2, so their versions stay.
    await stack.chat().DeleteTurn(chat_pb2.DeleteTurnRequest(parent=inst, trace_id=t0.trace_id), metadata=stack.md())
    assert (await workspace(stack, inst, 0)).snapshot_turn_index == -1
    assert [a.content for a in (await workspace(stack, inst, 2)).artifacts] == [a.content for a in w2.artifacts]
    # Clear chat: no snapshot and no artifact left; ids are never handed out again.
    await stack.chat().ClearMessages(chat_pb2.ClearMessagesRequest(parent=inst), metadata=stack.md())
    assert (await workspace(stack, inst)).snapshot_turn_index == -1 and await artifacts(stack, inst) == []
    await say(stack, inst, "Write a summary.")
    assert [(a.artifact_id, a.title) for a in (await workspace(stack, inst)).artifacts] == [(4, "summary")]


class WorkspaceLLM:
    """Stands in for an OpenAI-compatible model: its first answer of a turn calls workspace tools, good and bad
    mixed; its second answers in text."""

    CALLS = [
        ("set_objective", {"text": "Ship the parser"}),
        ("write_artifact", {"artifact_id": 0, "title": "Notes", "media_type": "text/markdown", "content": "# Notes\n"}),
        ("write_artifact", {"artifact_id": 77, "content": "an id the conversation does not have"}),
        ("set_plan", {"steps": [{"text": "x" * 600}]}),  # a step over 500 characters: the whole plan dropped
        ("set_plan_step_state", {"step_index": 3, "state": "done"}),  # no plan: no step 3
        ("write_artifact", {"artifact_id": 0, "title": "Huge", "content": "y" * 40000}),  # over 32768 bytes
        ("add_preference", {"text": "no jargon", "source": "agent"}),
        ("add_preference", {"text": "no jargon"}),  # a duplicate
    ]

    def __init__(self):
        self.tools_offered: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.tools_offered = [t["function"]["name"] for t in body["tools"]]
        if body["messages"][-1]["role"] == "user":
            msg = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for i, (n, a) in enumerate(self.CALLS)]}
        else:
            msg = {"role": "assistant", "content": "done"}
        return web.json_response({"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]})


async def test_bad_operations_from_a_model_are_dropped_whole_and_the_turn_loses_nothing(database_url: str, tmp_path: Path):
    llm = WorkspaceLLM()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", llm.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001 - aiohttp exposes no public accessor
    stack = await start_stack(database_url, tmp_path, agent={
        "openai_base_url": f"http://127.0.0.1:{port}/v1", "openai_model": "stand-in-model"})
    try:
        inst = await new_instance(stack)
        res = await say(stack, inst, "hello")
        assert {"set_objective", "set_plan", "set_plan_step_state", "write_artifact", "add_preference",
                "remove_preference"} <= set(llm.tools_offered)
        assert res.reply.content == "done"  # the turn succeeded, reply stored
        msgs = (await stack.chat().ListMessages(chat_pb2.ListMessagesRequest(parent=inst), metadata=stack.md())).messages
        assert [m.content for m in msgs] == ["hello", "done"]
        w = await workspace(stack, inst, 0)
        assert w.objective.text == "Ship the parser" and not w.plan.steps
        assert [(a.artifact_id, a.title, a.content) for a in w.artifacts] == [(1, "Notes", "# Notes\n")]
        assert [(p.text, p.source) for p in w.preferences.items] == [("no jargon", chat_pb2.PREFERENCE_SOURCE_AGENT)]
        assert changed(w) == {"objective", "artifacts", "preferences"}
        t = await stack.wait_trace(res.trace_id, min_spans=5)
        dropped = sorted((int(e.attributes["workspace.operation_index"]), e.attributes["workspace.operation"])
                         for _, e in events(t, "workspace.operation_dropped"))
        assert dropped == [(2, "put_artifact"), (3, "set_plan"), (4, "set_plan_step_state"), (5, "put_artifact"),
                           (7, "add_preference")]
        reasons = [e.attributes["workspace.drop_reason"] for _, e in events(t, "workspace.operation_dropped")]
        assert all(len(r) < 100 and "yyyy" not in r and "xxxx" not in r for r in reasons)  # never the client's values
        assert len(by_name(t, "workspace.update")) == 3
    finally:
        await stack.stop()
        await runner.cleanup()
