"""Helpers of the chat integration tests: an instance to talk to, a trace's spans and events by name."""
from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import AsyncIterator

import asyncpg
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.traces.v1 import traces_pb2

from services.chat import domain
from services.chat.repository import Repository
from services.chat.server import MIGRATIONS, SCHEMA
from services.common.db import close_pool, create_pool, migrate
from tests.stack import Stack

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_PARENT = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_PARENT}-01"


async def new_instance(stack: Stack, sub: str = "alice", agent: str = "reference") -> str:
    inst = await stack.chat().CreateInstance(
        chat_pb2.CreateInstanceRequest(instance=chat_pb2.Instance(display_name="My agent", agent=agent)),
        metadata=stack.md(sub),
    )
    return inst.name


@contextlib.asynccontextmanager
async def migrated_chat(database_url: str, owner: str = "alice"
                          ) -> AsyncIterator[tuple[Repository, asyncpg.Pool, domain.Instance]]:
    """The chat service's own Repository over its migrated schema, and a new instance of `owner`:
    (repository, its pool of 2-4 connections, the instance); the pool is closed on exit."""
    await migrate(database_url, SCHEMA, MIGRATIONS)
    pool = await create_pool(database_url, SCHEMA, 2, 4)
    repo = Repository(pool)
    try:
        inst = await repo.create_instance(owner, domain.NewInstance(
            id=uuid.uuid4().hex[:12], display_name="k", agent="", request_id=None), dt.datetime.now(dt.UTC))
        yield repo, pool, inst
    finally:
        await close_pool(pool)


def by_name(t: traces_pb2.Trace, name: str) -> list[traces_pb2.Span]:
    return [s for s in t.spans if s.name == name]


def events(t: traces_pb2.Trace, name: str) -> list[tuple[traces_pb2.Span, traces_pb2.SpanEvent]]:
    return [(s, e) for s in t.spans for e in s.events if e.name == name]
