"""ChatService resources: instances, messages, paging, access, idempotency, bad input — through the
real gateway, real agent and real PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import grpc
import pytest
from agentfeedback.chat.v1 import chat_pb2

from services.chat.domain import Channel, TurnInput
from services.chat.repository import Repository
from services.common.auth import SCOPE_FEEDBACK_READ
from services.common.db import create_pool
from services.common.errors import error_info
from tests.helpers.chat import new_instance
from tests.stack import Stack


async def rpc_error(coro) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await coro
    return e.value


async def test_instances_owner_scoped_and_paged(stack: Stack):
    chat = stack.chat()
    names = []
    for i in range(3):
        inst = await chat.CreateInstance(
            chat_pb2.CreateInstanceRequest(instance=chat_pb2.Instance(display_name=f"agent {i}")),
            metadata=stack.md("alice"),
        )
        assert inst.owner == "alice" and inst.agent == "reference" and inst.name.startswith("instances/")
        names.append(inst.name)
    got, token = [], ""
    while True:
        page = await chat.ListInstances(
            chat_pb2.ListInstancesRequest(page_size=2, page_token=token), metadata=stack.md("alice")
        )
        got += [i.name for i in page.instances]
        token = page.next_page_token
        if not token:
            break
    assert got == names
    bob = await chat.ListInstances(chat_pb2.ListInstancesRequest(), metadata=stack.md("bob"))
    assert list(bob.instances) == []
    e = await rpc_error(
        chat.GetInstance(chat_pb2.GetInstanceRequest(name=names[0]), metadata=stack.md("bob"))
    )
    assert e.code() == grpc.StatusCode.NOT_FOUND


async def test_create_instance_ids_retry_and_conflict(stack: Stack):
    chat = stack.chat()
    rid = str(uuid.uuid4())
    req = chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="Home"), instance_id="home", request_id=rid
    )
    a = await chat.CreateInstance(req, metadata=stack.md())
    b = await chat.CreateInstance(req, metadata=stack.md())
    assert a == b and a.name == "instances/home"
    e = await rpc_error(
        chat.CreateInstance(
            chat_pb2.CreateInstanceRequest(
                instance=chat_pb2.Instance(display_name="Other"), instance_id="home"
            ),
            metadata=stack.md(),
        )
    )
    assert e.code() == grpc.StatusCode.ALREADY_EXISTS
    # Another owner may use the same id: names are resolved per owner.
    c = await chat.CreateInstance(
        chat_pb2.CreateInstanceRequest(instance=chat_pb2.Instance(display_name="Bob's"), instance_id="home"),
        metadata=stack.md("bob"),
    )
    assert c.owner == "bob"
    for field, inst, iid in [
        ("instance.display_name", chat_pb2.Instance(display_name=""), ""),
        ("instance.agent", chat_pb2.Instance(display_name="x", agent="Bad Slug"), ""),
        ("instance_id", chat_pb2.Instance(display_name="x"), "Has Spaces"),
    ]:
        e = await rpc_error(
            chat.CreateInstance(
                chat_pb2.CreateInstanceRequest(instance=inst, instance_id=iid), metadata=stack.md()
            )
        )
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and error_info(e).metadata["field"] == field


async def test_access_other_owner_not_found_no_token_unauthenticated_no_scope_denied(stack: Stack):
    chat = stack.chat()
    parent = await new_instance(stack, "alice")
    r = await chat.SendMessage(
        chat_pb2.SendMessageRequest(instance=parent, content="hello"), metadata=stack.md()
    )
    for call in [
        chat.SendMessage(
            chat_pb2.SendMessageRequest(instance=parent, content="hi"), metadata=stack.md("bob")
        ),
        chat.GetMessage(chat_pb2.GetMessageRequest(name=r.reply.name), metadata=stack.md("bob")),
        chat.ListMessages(chat_pb2.ListMessagesRequest(parent=parent), metadata=stack.md("bob")),
        chat.ClearMessages(chat_pb2.ClearMessagesRequest(parent=parent), metadata=stack.md("bob")),
        chat.DeleteTurn(
            chat_pb2.DeleteTurnRequest(parent=parent, trace_id=r.trace_id), metadata=stack.md("bob")
        ),
    ]:
        assert (await rpc_error(call)).code() == grpc.StatusCode.NOT_FOUND
    e = await rpc_error(chat.ListMessages(chat_pb2.ListMessagesRequest(parent=parent)))
    assert e.code() == grpc.StatusCode.UNAUTHENTICATED
    e = await rpc_error(
        chat.ListMessages(
            chat_pb2.ListMessagesRequest(parent=parent), metadata=stack.md("alice", (SCOPE_FEEDBACK_READ,))
        )
    )
    assert e.code() == grpc.StatusCode.PERMISSION_DENIED
    # Alice's turn is untouched by all of that.
    listed = await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=parent), metadata=stack.md())
    assert len(listed.messages) == 2


async def test_bad_turn_input_names_field_and_writes_nothing(stack: Stack):
    chat = stack.chat()
    parent = await new_instance(stack)
    cases = [
        ("content", chat_pb2.SendMessageRequest(instance=parent, content="")),
        ("content", chat_pb2.SendMessageRequest(instance=parent, content="   ")),
        (
            "content",
            chat_pb2.SendMessageRequest(instance=parent, content="x" * 32001),
        ),  # ChatSettings default 32000
        ("content", chat_pb2.SendMessageRequest(instance=parent, content="ok\x00bad")),
        ("request_id", chat_pb2.SendMessageRequest(instance=parent, content="hi", request_id="not-a-uuid")),
        ("instance", chat_pb2.SendMessageRequest(instance="agents/x", content="hi")),
        ("channel", chat_pb2.SendMessageRequest(instance=parent, content="hi", channel=9)),
    ]
    for field, req in cases:
        e = await rpc_error(chat.SendMessage(req, metadata=stack.md()))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert error_info(e).metadata["field"] == field
    e = await rpc_error(
        chat.SendMessage(
            chat_pb2.SendMessageRequest(instance="instances/nope", content="hi"), metadata=stack.md()
        )
    )
    assert e.code() == grpc.StatusCode.NOT_FOUND
    # The limit itself is accepted (code points, multi-byte included).
    ok = await chat.SendMessage(
        chat_pb2.SendMessageRequest(instance=parent, content="é" * 32000), metadata=stack.md()
    )
    listed = await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=parent), metadata=stack.md())
    assert [m.name for m in listed.messages] == [ok.user_message.name, ok.reply.name]
    assert listed.messages[0].content == "é" * 32000


async def test_request_id_retry_does_not_run_agent_twice(stack: Stack):
    chat = stack.chat()
    parent = await new_instance(stack)
    rid = str(uuid.uuid4())
    req = chat_pb2.SendMessageRequest(instance=parent, content="hello there", request_id=rid)
    first = await chat.SendMessage(req, metadata=stack.md())
    again = await chat.SendMessage(req, metadata=stack.md())
    assert again == first
    # Two retries in parallel of a new request: one turn.
    rid2 = str(uuid.uuid4())
    req2 = chat_pb2.SendMessageRequest(instance=parent, content="and again", request_id=rid2)
    a, b = await asyncio.gather(
        chat.SendMessage(req2, metadata=stack.md()), chat.SendMessage(req2, metadata=stack.md())
    )
    assert a == b
    streamed = [x async for x in chat.StreamMessage(req2, metadata=stack.md())]
    assert streamed[0].user_message == a.user_message and streamed[-1].reply == a.reply
    listed = await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=parent), metadata=stack.md())
    assert [m.trace_id for m in listed.messages] == [first.trace_id] * 2 + [a.trace_id] * 2
    assert [m.turn_index for m in listed.messages] == [0, 0, 1, 1]
    # Each agent run left one agent.think span; the retries left none.
    for t in (first.trace_id, a.trace_id):
        trace = await stack.wait_trace(t, min_spans=3)
        assert sum(s.name == "agent.think" for s in trace.spans) == 1


async def test_request_id_reused_with_a_different_request_is_refused_and_nothing_written(stack: Stack):
    """AIP-155: a request_id binds its request. The same request again is a retry (first result);
    other words under the same id are refused (INVALID_ARGUMENT naming request_id), never dropped
    behind the first answer."""
    chat = stack.chat()
    parent = await new_instance(stack)
    rid = str(uuid.uuid4())
    book = chat_pb2.SendMessageRequest(instance=parent, content="book a table", request_id=rid)
    first = await chat.SendMessage(book, metadata=stack.md())
    for other in (
        chat_pb2.SendMessageRequest(instance=parent, content="cancel it", request_id=rid),
        chat_pb2.SendMessageRequest(instance=parent, content="book a table", dictation="x", request_id=rid),
    ):
        e = await rpc_error(chat.SendMessage(other, metadata=stack.md()))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
        info = error_info(e)
        assert info.metadata["field"] == "request_id" and info.reason == "REQUEST_ID_REUSED"
        assert "already used for a different request" in e.details()
        e = await rpc_error(_drain(chat.StreamMessage(other, metadata=stack.md())))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    again = await chat.SendMessage(chat_pb2.SendMessageRequest.FromString(book.SerializeToString()),
                                   metadata=stack.md())
    assert again == first
    listed = await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=parent), metadata=stack.md())
    assert [m.content for m in listed.messages][:1] == ["book a table"] and len(listed.messages) == 2

    irid = str(uuid.uuid4())
    made = await chat.CreateInstance(
        chat_pb2.CreateInstanceRequest(instance=chat_pb2.Instance(display_name="Kitchen"), request_id=irid),
        metadata=stack.md(),
    )
    before = await chat.ListInstances(chat_pb2.ListInstancesRequest(), metadata=stack.md())
    e = await rpc_error(
        chat.CreateInstance(
            chat_pb2.CreateInstanceRequest(
                instance=chat_pb2.Instance(display_name="Garage"), request_id=irid
            ),
            metadata=stack.md(),
        )
    )
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and error_info(e).metadata["field"] == "request_id"
    assert await chat.ListInstances(chat_pb2.ListInstancesRequest(), metadata=stack.md()) == before
    retried = await chat.CreateInstance(
        chat_pb2.CreateInstanceRequest(instance=chat_pb2.Instance(display_name="Kitchen"), request_id=irid),
        metadata=stack.md(),
    )
    assert retried == made

    # Two different requests racing with one request_id: one is stored, the other is refused.
    race = str(uuid.uuid4())
    results = await asyncio.gather(
        *(chat.SendMessage(chat_pb2.SendMessageRequest(instance=parent, content=w, request_id=race),
                           metadata=stack.md()) for w in ("left", "right")),
        return_exceptions=True,
    )
    won = [r for r in results if isinstance(r, chat_pb2.SendMessageResponse)]
    lost = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(won) == 1 and len(lost) == 1, results
    assert lost[0].code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(lost[0]).metadata["field"] == "request_id"
    listed = await chat.ListMessages(
        chat_pb2.ListMessagesRequest(parent=parent, trace_id=won[0].trace_id), metadata=stack.md()
    )
    assert [m.content for m in listed.messages][0] == won[0].user_message.content
    all_messages = await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=parent), metadata=stack.md())
    assert len(all_messages.messages) == 4  # the first turn and the winner's: nothing of the loser


async def _drain(call) -> list:
    return [x async for x in call]

async def test_voice_turn_fields_stored_and_returned(stack: Stack):
    chat = stack.chat()
    parent = await new_instance(stack)
    content = "…how many agents do you have in total? Give me their names."
    dictation = "…how many ages does Kevin total give me the next"
    r = await chat.SendMessage(
        chat_pb2.SendMessageRequest(
            instance=parent,
            content=content,
            channel=chat_pb2.CHANNEL_VOICE,
            audio_key="audio/2026/turn-1.opus",
            dictation=dictation,
        ),
        metadata=stack.md(),
    )
    got = await chat.GetMessage(chat_pb2.GetMessageRequest(name=r.user_message.name), metadata=stack.md())
    assert (got.content, got.channel, got.audio_key, got.dictation) == (
        content,
        chat_pb2.CHANNEL_VOICE,
        "audio/2026/turn-1.opus",
        dictation,
    )
    assert got.agent == "reference" and r.reply.model == "replay:sharegpt"


async def test_delete_turn_and_filters(stack: Stack):
    chat = stack.chat()
    parent = await new_instance(stack)
    turns = [
        await chat.SendMessage(
            chat_pb2.SendMessageRequest(instance=parent, content=f"turn {i}"), metadata=stack.md()
        )
        for i in range(3)
    ]
    by_index = await chat.ListMessages(
        chat_pb2.ListMessagesRequest(parent=parent, turn_index=1), metadata=stack.md()
    )
    assert {m.trace_id for m in by_index.messages} == {turns[1].trace_id} and len(by_index.messages) == 2
    await chat.DeleteTurn(
        chat_pb2.DeleteTurnRequest(parent=parent, trace_id=turns[1].trace_id), metadata=stack.md()
    )
    e = await rpc_error(
        chat.DeleteTurn(
            chat_pb2.DeleteTurnRequest(parent=parent, trace_id=turns[1].trace_id), metadata=stack.md()
        )
    )
    assert e.code() == grpc.StatusCode.NOT_FOUND
    left = await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=parent), metadata=stack.md())
    assert [m.turn_index for m in left.messages] == [0, 0, 2, 2]
    e = await rpc_error(
        chat.ListMessages(chat_pb2.ListMessagesRequest(parent=parent, trace_id="xyz"), metadata=stack.md())
    )
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and error_info(e).metadata["field"] == "trace_id"


async def test_list_messages_pages_stable_with_equal_create_times(stack: Stack, database_url: str):
    """Messages sharing one create time (written here through the repository, as concurrent turns
    can) are neither skipped nor repeated across page boundaries."""
    parent = await new_instance(stack)
    instance_id = parent.split("/")[1]
    pool = await create_pool(database_url, "chat", 1, 2)
    try:
        repo = Repository(pool)
        t0 = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
        for i in range(7):
            turn = TurnInput(instance_id, f"m{i}", Channel.TEXT, "", "", None)
            await repo.begin_turn("alice", turn, uuid.uuid4().hex, uuid.uuid4().hex, t0, 0)
    finally:
        await pool.close()
    chat = stack.chat()
    expected = sorted(
        (
            await chat.ListMessages(
                chat_pb2.ListMessagesRequest(parent=parent, page_size=100), metadata=stack.md()
            )
        ).messages,
        key=lambda m: m.name,
    )
    assert len(expected) == 7 and len({m.create_time.ToNanoseconds() for m in expected}) == 1
    for size in (1, 2, 3):
        got, token = [], ""
        while True:
            page = await chat.ListMessages(
                chat_pb2.ListMessagesRequest(parent=parent, page_size=size, page_token=token),
                metadata=stack.md(),
            )
            got += list(page.messages)
            token = page.next_page_token
            if not token:
                break
        assert [m.name for m in got] == [m.name for m in expected]
    # A token is bound to its parent and filters.
    page = await chat.ListMessages(
        chat_pb2.ListMessagesRequest(parent=parent, page_size=1), metadata=stack.md()
    )
    e = await rpc_error(
        chat.ListMessages(
            chat_pb2.ListMessagesRequest(
                parent=parent, page_size=1, page_token=page.next_page_token, turn_index=0
            ),
            metadata=stack.md(),
        )
    )
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and error_info(e).metadata["field"] == "page_token"


async def test_list_messages_of_the_turn_of_one_message(stack: Stack):
    """`turn_of_message`: a message and the rest of its turn in one call (the feedback snapshot's read)."""
    chat = stack.chat()
    parent = await new_instance(stack)
    turns = [await chat.SendMessage(chat_pb2.SendMessageRequest(instance=parent, content=f"turn {i}"),
                                    metadata=stack.md()) for i in range(3)]
    got = await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=parent, turn_of_message=turns[1].reply.name),
                                  metadata=stack.md())
    assert [m.name for m in got.messages] == [turns[1].user_message.name, turns[1].reply.name]
    unknown = f"{parent}/messages/{'0' * 32}"
    empty = await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=parent, turn_of_message=unknown),
                                    metadata=stack.md())
    assert list(empty.messages) == []
    other = await new_instance(stack)
    e = await rpc_error(chat.ListMessages(chat_pb2.ListMessagesRequest(
        parent=other, turn_of_message=turns[1].reply.name), metadata=stack.md()))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "turn_of_message" in e.details()
    e = await rpc_error(chat.ListMessages(chat_pb2.ListMessagesRequest(parent=parent, turn_of_message=turns[1].reply.name),
                                          metadata=stack.md("mallory")))
    assert e.code() == grpc.StatusCode.NOT_FOUND  # another owner's instance: nothing about it is told


async def test_list_messages_with_a_negative_turn_index_is_invalid_argument_naming_it(stack: Stack):
    chat = stack.chat()
    parent = await new_instance(stack)
    await chat.SendMessage(chat_pb2.SendMessageRequest(instance=parent, content="hello"), metadata=stack.md())
    e = await rpc_error(chat.ListMessages(chat_pb2.ListMessagesRequest(parent=parent, turn_index=-1),
                                          metadata=stack.md()))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and error_info(e).metadata["field"] == "turn_index"
    got = await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=parent, turn_index=0), metadata=stack.md())
    assert len(got.messages) == 2  # turn 0 still lists
