"""The agent refuses a ThinkRequest the gateway would never send (issue 25: a 1 MB `instance`, `agent`
or `user_message`, the instance `../../etc` or a 3,000-message history all got OK): INVALID_ARGUMENT
naming the field, the value never echoed unbounded, and a well-formed turn still answers."""
from __future__ import annotations

import grpc
import pytest

from agentfeedback.agent.v1 import agent_pb2, agent_pb2_grpc
from services.common.errors import error_info

MB = 1_000_000
INSTANCE = "instances/inst-1"
OTHER_MESSAGE = "instances/inst-2/messages/m1"


def _think(**fields) -> agent_pb2.ThinkRequest:
    base = {"instance": INSTANCE, "agent": "reference", "content": "hello", "turn_index": 0,
            "user_message": f"{INSTANCE}/messages/u1"}
    return agent_pb2.ThinkRequest(**{**base, **fields})


def _history(n: int, **fields) -> list[agent_pb2.ConversationMessage]:
    return [agent_pb2.ConversationMessage(**{"role": agent_pb2.ROLE_USER, "content": "earlier", **fields})
            for _ in range(n)]


CASES = [
    ("instance", _think(instance="instances/" + "i" * MB)),
    ("instance", _think(instance="../../etc")),
    ("instance", _think(instance="")),
    ("agent", _think(agent="a" * MB)),
    ("agent", _think(agent="../x")),
    ("content", _think(content="x" * 40_000)),
    ("content", _think(content="a\x00b")),
    ("turn_index", _think(turn_index=-1)),
    ("user_message", _think(user_message="u" * MB)),
    ("user_message", _think(user_message=OTHER_MESSAGE)),
    ("history", _think(history=_history(3000))),
    ("history[0].role", _think(history=_history(1, role=7))),
    ("history[0].content", _think(history=_history(1, content="a\x00b"))),
    ("history[0].name", _think(history=_history(1, name=OTHER_MESSAGE))),
    ("history[0].turn_index", _think(history=_history(1, turn_index=-3))),
]


@pytest.mark.parametrize(("field", "request_"), CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CASES)])
async def test_a_malformed_think_request_is_invalid_argument_naming_the_field(stack, field, request_):
    agent = agent_pb2_grpc.AgentServiceStub(stack.channel("agent"))
    for call in (agent.Think, agent.StreamThink):
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            got = call(request_, metadata=stack.md())
            if call is agent.StreamThink:
                async for _ in got:
                    pass
            else:
                await got
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_info(ei.value).metadata["field"] == field
        assert len(ei.value.details()) < 500


async def test_a_well_formed_turn_with_history_still_answers(stack):
    agent = agent_pb2_grpc.AgentServiceStub(stack.channel("agent"))
    history = [agent_pb2.ConversationMessage(role=agent_pb2.ROLE_USER, content="hi", name=f"{INSTANCE}/messages/u0"),
               agent_pb2.ConversationMessage(role=agent_pb2.ROLE_ASSISTANT, content="hello",
                                             name=f"{INSTANCE}/messages/a0", turn_index=0)]
    got = await agent.Think(_think(history=history, turn_index=1), metadata=stack.md())
    assert got.content
