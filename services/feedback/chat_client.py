"""Thin client of `agentfeedback.chat.v1.ChatService`, called with the caller's token (on behalf of),
so the chat service checks ownership where the data lives. Each call waits at most `timeout_s`, less
when the RPC being handled has a nearer deadline, keeping time to answer (`deadlines.reserved`): a chat
service that does not answer is UNAVAILABLE to our caller, not their DEADLINE_EXCEEDED.

Errors: the chat service's NOT_FOUND → `NotFound` (unknown or another owner's), PERMISSION_DENIED →
`PermissionDenied('chat')`, INVALID_ARGUMENT → `InvalidArgument` on our request field; no answer
(`services.common.depfail.no_answer`: UNAVAILABLE, DEADLINE_EXCEEDED after `timeout_s`, or a stream
broken mid-call while a chat replica stopped) → `ChatUnreachable` (the caller decides on a fallback; its
`unavailable()` names the real dependency, and after a whole timeout waited out tells clients'
gRPC retry policies not to retry at once (`Unavailable.waited`): chat's own UNAVAILABLE DATABASE_UNAVAILABLE — chat is up, its
database is not — stays DATABASE_UNAVAILABLE, anything else is CHAT_UNAVAILABLE); every
other status by what it means (`services.common.upstream.from_upstream`): chat answering INTERNAL is
INTERNAL `CHAT_FAILED`, not "chat unreachable".
"""
from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable

import grpc

from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from services.common import deadlines
from services.common.depfail import RETRY_AFTER_S, no_answer
from services.common.errors import InvalidArgument, NotFound, PermissionDenied, Unavailable, error_info
from services.common.upstream import from_upstream, upstream_detail
from services.feedback.domain import DefectView, MessageView
from services.feedback.model.evaluation import TurnAnchor

Metadata = tuple[tuple[str, str], ...]


class ChatUnreachable(Exception):
    """The chat service did not answer in time (UNAVAILABLE or DEADLINE_EXCEEDED); `database_down`: it
    answered UNAVAILABLE DATABASE_UNAVAILABLE (it runs, its PostgreSQL does not answer)."""

    def __init__(self, message: str, database_down: bool = False, timed_out: bool = False):
        super().__init__(message)
        self.database_down = database_down
        self.timed_out = timed_out  # our whole chat timeout was waited out (chat frozen, or too slow)

    def unavailable(self, doing: str) -> Unavailable:
        """The UNAVAILABLE (RetryInfo) answering a call that needed chat for `doing` ("to check the
        rated conversation"), naming the dependency that is down."""
        if self.database_down:
            return Unavailable(f"the database (PostgreSQL) the chat service needs {doing} cannot be reached; "
                               "retry later", retry_after_s=RETRY_AFTER_S, reason="DATABASE_UNAVAILABLE",
                               dependency="postgresql", via="chat")
        return Unavailable(f"the chat service cannot be reached {doing}", retry_after_s=RETRY_AFTER_S,
                           reason="CHAT_UNAVAILABLE", waited=self.timed_out, dependency="chat")


def to_view(m: chat_pb2.Message) -> MessageView:
    return MessageView(
        name=m.name,
        role=chat_pb2.Role.Name(m.role),
        content=m.content,
        trace_id=m.trace_id,
        turn_index=m.turn_index,
        create_time=m.create_time.ToDatetime(tzinfo=dt.UTC) if m.HasField("create_time") else None,
        channel=chat_pb2.Channel.Name(m.channel) if m.channel else "",
        audio_key=m.audio_key,
        dictation=m.dictation,
        model=m.model,
        agent=m.agent,
    )


def to_defect_view(d: chat_pb2.SuspectedDefect) -> DefectView:
    return DefectView(event=d.event, turn_index=d.turn_index, tools=tuple(d.tools),
                      kinds=tuple(chat_pb2.DefectKind.Name(k) for k in d.kinds))


class ChatClient:
    """One per process; `channel` is created once at start-up. Every call takes at most `timeout_s`,
    less when the caller's remaining deadline is shorter (`services.common.deadlines`)."""

    def __init__(self, channel: grpc.aio.Channel, timeout_s: float):
        self._stub = chat_pb2_grpc.ChatServiceStub(channel)
        self._timeout_s = timeout_s

    def _map(self, e: grpc.aio.AioRpcError, resource: str, field_path: str) -> Exception:
        code = e.code()
        if no_answer(e):
            info = error_info(e)
            down = code == grpc.StatusCode.UNAVAILABLE and info is not None and info.reason == "DATABASE_UNAVAILABLE"
            return ChatUnreachable(f"chat service: {upstream_detail(e)}", database_down=down,
                                   timed_out=code == grpc.StatusCode.DEADLINE_EXCEEDED)
        if code == grpc.StatusCode.NOT_FOUND:
            return NotFound(resource)
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return PermissionDenied("chat")
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return InvalidArgument(field_path, e.details() or "rejected by the chat service")
        return from_upstream(e, "chat")

    async def _pages(self, rpc: Callable, req, md: Metadata, resource: str, field_path: str) -> AsyncIterator:
        """Every page of the List call `rpc(req)` in turn (`req.page_token` moved along; errors as `_map`)."""
        while True:
            try:
                resp = await rpc(req, metadata=md, timeout=deadlines.reserved(self._timeout_s))
            except grpc.aio.AioRpcError as e:
                raise self._map(e, resource, field_path) from None
            yield resp
            if not resp.next_page_token:
                return
            req.page_token = resp.next_page_token

    async def get_message(self, name: str, md: Metadata, field_path: str = "feedback.message") -> MessageView:
        """GetMessage(name) → MessageView. NotFound when unknown or not the caller's."""
        try:
            m = await self._stub.GetMessage(chat_pb2.GetMessageRequest(name=name), metadata=md, timeout=deadlines.reserved(self._timeout_s))
        except grpc.aio.AioRpcError as e:
            raise self._map(e, name, field_path) from None
        return to_view(m)

    async def list_turn(self, parent: str, md: Metadata, *, trace_id: str = "", turn_index: int | None = None,
                        turn_of_message: str = "", field_path: str = "feedback.instance") -> list[MessageView]:
        """Messages of one turn of `parent` (by trace id, turn index, or the turn of message name
        `turn_of_message`: empty when that message is unknown), oldest first (a turn has 2; every page
        is read: the chat service may end a page early at its response size bound)."""
        req = chat_pb2.ListMessagesRequest(parent=parent, trace_id=trace_id, page_size=100,
                                           turn_of_message=turn_of_message)
        if turn_index is not None:
            req.turn_index = turn_index
        return [to_view(m) async for resp in self._pages(self._stub.ListMessages, req, md, turn_of_message or parent,
                                                         field_path) for m in resp.messages]

    async def messages_through(self, parent: str, md: Metadata, through_turn_index: int,
                               field_path: str = "conversation") -> list[MessageView]:
        """`parent`'s messages of turns ≤ `through_turn_index`, oldest first (pages of 1000; stops past
        it). NotFound when `parent` is unknown or not the caller's."""
        out: list[MessageView] = []
        req = chat_pb2.ListMessagesRequest(parent=parent, page_size=1000)
        async for resp in self._pages(self._stub.ListMessages, req, md, parent, field_path):
            for m in resp.messages:
                if m.turn_index > through_turn_index:
                    return out
                out.append(to_view(m))
        return out

    async def replies_through(self, parent: str, md: Metadata, through_turn_index: int,
                              field_path: str) -> dict[int, str]:
        """turn index → name of the stored non-empty assistant message, for `parent`'s turns ≤
        `through_turn_index` (pages of 1000, oldest first; stops past the last wanted turn).
        NotFound when `parent` is unknown or not the caller's."""
        return {m.turn_index: m.name for m in await self.messages_through(parent, md, through_turn_index, field_path)
                if m.role == "ROLE_ASSISTANT" and m.content.strip()}

    async def lookup_turns(self, trace_ids: list[str], md: Metadata) -> dict[str, TurnAnchor]:
        """LookupTurns (the collector's credential in `md`): the turn of each known trace id, by trace id."""
        try:
            got = await self._stub.LookupTurns(chat_pb2.LookupTurnsRequest(trace_ids=trace_ids), metadata=md,
                                               timeout=deadlines.reserved(self._timeout_s))
        except grpc.aio.AioRpcError as e:
            raise self._map(e, "turns", "evaluations") from None
        return {t.trace_id: TurnAnchor(t.conversation, t.turn_index, t.owner, t.reply) for t in got.turns}

    async def get_defect(self, name: str, md: Metadata, field_path: str = "suspected_defect") -> DefectView:
        """GetSuspectedDefect(name) → DefectView. NotFound when unknown, clean, or not the caller's."""
        try:
            d = await self._stub.GetSuspectedDefect(chat_pb2.GetSuspectedDefectRequest(name=name), metadata=md,
                                                    timeout=deadlines.reserved(self._timeout_s))
        except grpc.aio.AioRpcError as e:
            raise self._map(e, name, field_path) from None
        return to_defect_view(d)

    async def has_artifact(self, conversation: str, artifact_id: int, md: Metadata, field_path: str) -> bool:
        """GetArtifact(`conversation`/artifacts/`artifact_id`): whether the conversation has that artifact
        (any version). NotFound when the conversation is unknown or not the caller's (checked first)."""
        await self.check_instance(conversation, md, field_path)
        name = f"{conversation}/artifacts/{artifact_id}"
        try:
            await self._stub.GetArtifact(chat_pb2.GetArtifactRequest(name=name), metadata=md,
                                         timeout=deadlines.reserved(self._timeout_s))
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return False
            raise self._map(e, name, field_path) from None
        return True

    async def get_workspace(self, conversation: str, turn_index: int, md: Metadata,
                            field_path: str) -> chat_pb2.Workspace:
        """GetWorkspace as of `turn_index`: NotFound when the conversation is unknown, another owner's, or the
        turn not reached."""
        req = chat_pb2.GetWorkspaceRequest(name=f"{conversation}/workspace", turn_index=turn_index)
        try:
            return await self._stub.GetWorkspace(req, metadata=md, timeout=deadlines.reserved(self._timeout_s))
        except grpc.aio.AioRpcError as e:
            raise self._map(e, f"{conversation} turn {turn_index}", field_path) from None

    async def forks(self, md: Metadata) -> list[tuple[str, str, int]]:
        """The caller's forked instances: (fork, its source, the last turn it copied), pages of 1000."""
        req = chat_pb2.ListInstancesRequest(page_size=1000)
        return [(i.name, i.fork_source, i.fork_turn_index)
                async for resp in self._pages(self._stub.ListInstances, req, md, "instances", "instances")
                for i in resp.instances if i.fork_source]

    async def check_instance(self, name: str, md: Metadata, field_path: str) -> None:
        """GetInstance(name): NotFound when unknown or not the caller's."""
        try:
            await self._stub.GetInstance(chat_pb2.GetInstanceRequest(name=name), metadata=md, timeout=deadlines.reserved(self._timeout_s))
        except grpc.aio.AioRpcError as e:
            raise self._map(e, name, field_path) from None
