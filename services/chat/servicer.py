"""`agentfeedback.chat.v1.ChatService`: thin translation between protos and the chat domain.

Every method needs scope `chat` (METHOD_SCOPES); the owner is the token's `sub`. Errors are
raised as DomainError and mapped once by `services.common.server.ServiceInterceptor`.
SendMessage and StreamMessage are `UNTRACED_METHODS`: the interceptor opens no server span for
them, because the turn's own root span (`chat.turn`, a new trace) is the turn's trace.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import grpc
from agentfeedback.chat.v1 import chat_pb2, chat_pb2_grpc
from google.protobuf import empty_pb2
from opentelemetry import trace

from services.chat import defects, domain
from services.chat.defects import SuspectedDefect
from services.chat.fork import Forker, validate_fork
from services.chat.domain import Instance, Message, MessagePage
from services.chat.removal import TurnRemover
from services.chat.repository import InstanceExists, Repository
from services.chat.turn import StreamStart, TurnCall, TurnRunner
from services.chat.workspace_api import WorkspaceReads
from services.chat.workspace_store import WorkspaceStore
from services.common.auth import SCOPE_CHAT, SCOPE_FEEDBACK_ADMIN, SCOPE_FEEDBACK_EVALUATIONS, current_principal
from services.common.deadlines import caller_remaining
from services.common.errors import AlreadyExists, InvalidArgument, NotFound
from services.common import pages
from services.common.ids import new_id, request_fingerprint, timestamp_into
from services.common.server import extract_context

SERVICE = "agentfeedback.chat.v1.ChatService"
METHOD_SCOPES: dict[str, str | None] = {
    f"/{SERVICE}/{m}": SCOPE_CHAT
    for m in (
        "CreateInstance",
        "GetInstance",
        "ListInstances",
        "SendMessage",
        "StreamMessage",
        "GetMessage",
        "ListMessages",
        "ClearMessages",
        "DeleteTurn",
        "ForkConversation",
        "GetWorkspace",
        "ListArtifacts",
        "GetArtifact",
    )
}
# Authenticated, scope checked by the handler: `chat` for the owner's own, `feedback:admin` across owners.
METHOD_SCOPES |= {f"/{SERVICE}/{m}": None for m in ("ListSuspectedDefects", "GetSuspectedDefect")}
# The collector's credential only (issue 24, chat.proto LookupTurns).
METHOD_SCOPES[f"/{SERVICE}/LookupTurns"] = SCOPE_FEEDBACK_EVALUATIONS
UNTRACED_METHODS = (f"/{SERVICE}/SendMessage", f"/{SERVICE}/StreamMessage")


def _ts(dt: datetime):
    from google.protobuf.timestamp_pb2 import Timestamp  # noqa: PLC0415

    t = Timestamp()
    timestamp_into(t, dt)
    return t


def instance_pb(i: Instance) -> chat_pb2.Instance:
    return chat_pb2.Instance(
        name=i.name, display_name=i.display_name, agent=i.agent, owner=i.owner,
        create_time=_ts(i.create_time), fork_source=i.fork_source, fork_turn_index=i.fork_turn_index,
        last_turn_time=_ts(i.last_turn_time) if i.last_turn_time else None, turn_count=i.turn_count,
    )


def defect_pb(d: SuspectedDefect) -> chat_pb2.SuspectedDefect:
    text, clipped = d.clipped_text
    return chat_pb2.SuspectedDefect(
        name=d.name, owner=d.owner, trace_id=d.trace_id, turn_index=d.turn_index, time=_ts(d.time),
        kinds=list(d.kinds), event=d.event,
        user_message=f"instances/{d.instance_id}/messages/{d.user_message_id}", user_text=text,
        user_text_clipped=clipped, tools=list(d.tools),
    )


def message_pb(m: Message) -> chat_pb2.Message:
    return chat_pb2.Message(
        name=m.name,
        role=int(m.role),
        content=m.content,
        trace_id=m.trace_id,
        turn_index=m.turn_index,
        create_time=_ts(m.create_time),
        channel=int(m.channel),
        audio_key=m.audio_key,
        dictation=m.dictation,
        model=m.model,
        agent=m.agent,
        source_message=m.source_message,
        source_trace_id=m.source_trace_id,
    )


def request_checks(max_content_chars: int) -> dict[str, Callable[[object, object], object]]:
    """Write method (short name) → `(request, context)`: its handler's own checks of the request alone
    (domain / fork validation; no I/O). The write quota runs them before taking a token
    (services/common/quota.py `valid`), so a request that is INVALID_ARGUMENT on its face spends none."""
    def turn(r, c):
        domain.validate_turn(r.instance, r.content, r.channel, r.audio_key, r.dictation, r.request_id,
                             max_content_chars)
    return {"CreateInstance": lambda r, c: domain.validate_new_instance(
                r.instance.display_name, r.instance.agent, r.instance_id, r.request_id, ""),
            "SendMessage": turn, "StreamMessage": turn,
            "ForkConversation": lambda r, c: validate_fork(r.parent, r.turn_index, r.instance_id, r.display_name,
                                                           r.request_id)}


class ChatServicer(chat_pb2_grpc.ChatServiceServicer):
    def __init__(self, repo: Repository, turns: TurnRunner, max_content_chars: int, forker: Forker,
                 workspace: WorkspaceStore, remover: TurnRemover):
        self._workspace = WorkspaceReads(workspace)
        self._remover = remover
        self._repo = repo
        self._turns = turns
        self._max_chars = max_content_chars
        self._forker = forker

    async def CreateInstance(self, request, context):  # noqa: N802
        """AIP-133; ALREADY_EXISTS when the owner already has `instance_id` (and it is not a retry).
        AIP-155: the same `request_id` with the same request returns the first instance; with a
        different request INVALID_ARGUMENT naming `request_id` (reason REQUEST_ID_REUSED)."""
        owner = current_principal().sub
        new = domain.validate_new_instance(
            request.instance.display_name,
            request.instance.agent,
            request.instance_id,
            request.request_id,
            new_id(),
            request_fingerprint(request) if request.request_id else None,
        )
        try:
            inst = await self._repo.create_instance(owner, new, datetime.now(UTC))
        except InstanceExists:
            raise AlreadyExists(f"instances/{new.id}") from None
        return instance_pb(inst)

    async def GetInstance(self, request, context):  # noqa: N802
        inst = await self._instance(request.name, "name")
        return instance_pb(inst)

    async def ListInstances(self, request, context):  # noqa: N802
        """The caller's instances, oldest first or latest activity first, optionally searched by name
        (domain.instance_query has the errors); a page token keeps its search and order."""
        owner = current_principal().sub
        size = pages.page_size(request.page_size, default=100)
        query = domain.instance_query(request.search, request.order_by)
        got = await pages.page(request.page_token, size, query.filters(), domain.instance_position,
                               lambda after, n: self._repo.list_instances(owner, query, after, n + 1), instance_pb,
                               domain.instance_activity_key if query.by_activity else domain.instance_key)
        return chat_pb2.ListInstancesResponse(instances=got.items, next_page_token=got.next_page_token)

    async def SendMessage(self, request, context):  # noqa: N802
        """One turn (TurnRunner.send has the errors). A `request_id` retry of the same request returns
        the first turn; with a different request INVALID_ARGUMENT naming `request_id`, nothing written."""
        res = await self._turns.send(self._call(request, context))
        return chat_pb2.SendMessageResponse(
            user_message=message_pb(res.user_message), reply=message_pb(res.reply), trace_id=res.trace_id
        )

    async def StreamMessage(self, request, context):  # noqa: N802
        async for ev in self._turns.stream(self._call(request, context)):
            if isinstance(ev, StreamStart):
                yield chat_pb2.StreamMessageResponse(
                    user_message=message_pb(ev.user_message), trace_id=ev.trace_id
                )
            elif isinstance(ev, Message):
                yield chat_pb2.StreamMessageResponse(reply=message_pb(ev), trace_id=ev.trace_id)
            else:
                yield chat_pb2.StreamMessageResponse(reply_delta=ev)

    async def GetMessage(self, request, context):  # noqa: N802
        owner = current_principal().sub
        instance_id, message_id = domain.parse_message_name(request.name)
        m = await self._repo.get_message(owner, instance_id, message_id)
        if m is None:
            raise NotFound(request.name)
        return message_pb(m)

    async def ListMessages(self, request, context):  # noqa: N802
        """Oldest first; keyset on (create_time, id); filters `trace_id`, `turn_index` (INVALID_ARGUMENT
        when negative), `turn_of_message` (INVALID_ARGUMENT when it is not a message name of `parent`)."""
        owner = current_principal().sub
        instance_id = domain.parse_instance_name(request.parent, "parent")
        size = pages.page_size(request.page_size, default=100)
        trace_id = domain.filter_trace_id(request.trace_id)
        turn_index = request.turn_index if request.HasField("turn_index") else None
        if turn_index is not None and turn_index < 0:
            raise InvalidArgument("turn_index", "must be 0 or more (turns count from 0)")
        turn_of = None
        if request.turn_of_message:
            of_instance, turn_of = domain.parse_message_name(request.turn_of_message, "turn_of_message")
            if of_instance != instance_id:
                raise InvalidArgument("turn_of_message", "must be a message of `parent`")
        filters = f"{instance_id}|{trace_id or ''}|{'' if turn_index is None else turn_index}|{turn_of or ''}"

        async def fetch(after: MessagePage | None, n: int) -> list[Message]:
            # The instance check rides in the same statement (one round trip).
            rows = await self._repo.list_messages(owner, instance_id, after, n + 1, trace_id, turn_index, turn_of)
            if rows is None:
                raise NotFound(request.parent)
            return rows

        got = await pages.page(request.page_token, size, filters, MessagePage.of, fetch, message_pb, MessagePage.key)
        return chat_pb2.ListMessagesResponse(messages=got.items, next_page_token=got.next_page_token)

    async def ClearMessages(self, request, context):  # noqa: N802
        """services.chat.removal (the delete and its outbox row, then the feedback service told)."""
        inst = await self._instance(request.parent, "parent")
        n = await self._remover.clear(current_principal(), inst.id, inst.name, caller_remaining(context))
        return chat_pb2.ClearMessagesResponse(deleted_count=n)

    async def DeleteTurn(self, request, context):  # noqa: N802
        """services.chat.removal (the delete and its outbox row, then the feedback service told)."""
        inst = await self._instance(request.parent, "parent")
        trace_id = domain.filter_trace_id(request.trace_id)
        if trace_id is None:
            raise InvalidArgument("trace_id", "is required (32 hexadecimal characters)")
        await self._remover.delete_turn(current_principal(), inst.id, inst.name, trace_id, caller_remaining(context))
        return empty_pb2.Empty()

    async def ForkConversation(self, request, context):  # noqa: N802
        """services.chat.fork (chat.proto ForkConversation has the errors)."""
        res = await self._forker.fork(
            current_principal(), request.parent, request.turn_index, request.instance_id,
            request.display_name, request.request_id, request_fingerprint(request), caller_remaining(context),
        )
        return chat_pb2.ForkConversationResponse(
            instance=instance_pb(res.instance), copied_message_count=res.copied_messages,
            copied_rating_count=res.copied_ratings,
        )

    async def ListSuspectedDefects(self, request, context):  # noqa: N802
        """Newest first; `instances/-` across owners needs `feedback:admin` (services.chat.defects)."""
        instance_id = defects.parse_parent(request.parent)
        owner = _defect_reader(instance_id is None)
        size = pages.page_size(request.page_size, default=50)

        async def fetch(after: tuple[datetime, str] | None, n: int) -> list:
            if instance_id is not None and await self._repo.get_instance(owner, instance_id) is None:
                raise NotFound(request.parent)
            return await self._repo.list_defects(owner, instance_id, after, n + 1)

        got = await pages.page(request.page_token, size, request.parent, defects.page_position, fetch, defect_pb,
                               defects.page_key)
        return chat_pb2.ListSuspectedDefectsResponse(suspected_defects=got.items, next_page_token=got.next_page_token)

    async def GetSuspectedDefect(self, request, context):  # noqa: N802
        instance_id, trace_id = defects.parse_defect_name(request.name)
        admin = SCOPE_FEEDBACK_ADMIN in current_principal().scopes
        d = await self._repo.get_defect(_defect_reader(admin), instance_id, trace_id)
        if d is None:
            raise NotFound(request.name)
        return defect_pb(d)

    async def GetWorkspace(self, request, context):  # noqa: N802
        """The workspace as of a turn, with per-component `changed` (services.chat.workspace_api)."""
        return await self._workspace.get_workspace(current_principal().sub, request)

    async def ListArtifacts(self, request, context):  # noqa: N802
        return await self._workspace.list_artifacts(current_principal().sub, request)

    async def GetArtifact(self, request, context):  # noqa: N802
        return await self._workspace.get_artifact(current_principal().sub, request)

    async def LookupTurns(self, request, context):  # noqa: N802
        """Turns by trace id across owners, for evaluations received over OTLP (chat.proto LookupTurns)."""
        trace_ids = domain.parse_trace_ids(list(request.trace_ids), "trace_ids", 100)
        rows = await self._repo.lookup_turns(trace_ids)
        return chat_pb2.LookupTurnsResponse(turns=[chat_pb2.TurnRef(
            trace_id=r["trace_id"], conversation=f"instances/{r['instance_id']}", turn_index=r["turn_index"],
            owner=r["owner"], reply=f"instances/{r['instance_id']}/messages/{r['reply']}" if r["reply"] else "",
        ) for r in rows])

    # -- helpers -------------------------------------------------------------------------------

    async def _instance(self, name: str, field_path: str) -> Instance:
        """The caller's instance by name; NOT_FOUND when unknown or another owner's."""
        owner = current_principal().sub
        inst = await self._repo.get_instance(owner, domain.parse_instance_name(name, field_path))
        if inst is None:
            raise NotFound(name)
        return inst

    def _call(self, request, context) -> TurnCall:
        """The validated turn (INVALID_ARGUMENT before anything is written) and who asks for it."""
        p = current_principal()
        turn = domain.validate_turn(
            request.instance,
            request.content,
            request.channel,
            request.audio_key,
            request.dictation,
            request.request_id,
            self._max_chars,
            request_fingerprint(request) if request.request_id else None,
        )
        return TurnCall(p.sub, p.token, turn, _caller(context), caller_remaining(context))


def _defect_reader(any_owner: bool) -> str | None:
    """Whose suspected defects the caller reads: every owner's (None) with `feedback:admin`, else their
    own (`sub`) with `chat`. PERMISSION_DENIED naming the missing scope otherwise."""
    p = current_principal()
    if any_owner:
        p.require(SCOPE_FEEDBACK_ADMIN)
        return None
    p.require(SCOPE_CHAT)
    return p.sub


def _caller(context: grpc.aio.ServicerContext) -> trace.SpanContext | None:
    """The caller's span context from `traceparent` (kept as a link on the turn, never its parent)."""
    sc = trace.get_current_span(extract_context(context)).get_span_context()
    return sc if sc.is_valid else None
