"""Chat gateway domain: instances, messages, turns — plain data and pure rules (no grpc, no asyncpg).

Resource names (AIP-122): `instances/{instance}` and `instances/{instance}/messages/{message}`.
Rules that a client can notice live here, each with its source:
- text policy (case F12): the user's words with a NUL are rejected (`services.common.ids.check_text`);
  an agent reply with a NUL is stored with each NUL replaced by U+FFFD (the reply is not the owner's
  words; the turn must survive: both messages are kept) — see `sanitize_reply`;
- the agent's deadline (docs/architecture.md "The turn", step 3) — see `agent_timeout`;
- keyset paging on (create_time, id) (AIP-158) — see `MessagePage`.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import IntEnum

from services.chat.workspace import Op, State
from services.common import deadlines, pages
from services.common.errors import InvalidArgument
from services.common.ids import (
    check_label,
    check_text,
    parse_name,
    parse_request_id,
    parse_trace_id,
)

INSTANCE_PATTERN = "instances/{}"
MESSAGE_PATTERN = "instances/{}/messages/{}"
# Client-chosen instance ids and agent slugs (AIP-122 resource id shape).
SLUG = re.compile(r"^[a-z][a-z0-9-]{0,62}\Z")
DEFAULT_AGENT = "reference"
MAX_DISPLAY_NAME_CHARS = 200
# audio_key is a storage key, dictation a transcript: bounded like any user-supplied text.
MAX_AUDIO_KEY_CHARS = 1024
# The replacement for U+0000 in an agent reply (Unicode's REPLACEMENT CHARACTER).
NUL_REPLACEMENT = "\ufffd"


class Role(IntEnum):
    """Mirrors agentfeedback.chat.v1.Role."""

    UNSPECIFIED = 0
    USER = 1
    ASSISTANT = 2


class Channel(IntEnum):
    """Mirrors agentfeedback.chat.v1.Channel."""

    UNSPECIFIED = 0
    TEXT = 1
    VOICE = 2


@dataclass(frozen=True)
class Instance:
    owner: str
    id: str
    display_name: str
    agent: str
    create_time: datetime
    # Forks: `instances/{source}` and the last copied turn (ForkConversation); '' / 0 otherwise.
    fork_source: str = ""
    fork_turn_index: int = 0
    # The start of the latest turn (None before the first); the activity order's key (its latest turn,
    # else its create_time); turns whose messages it holds (ListInstances only).
    last_turn_time: datetime | None = None
    activity_time: datetime | None = None
    turn_count: int = 0

    @property
    def name(self) -> str:
        return f"instances/{self.id}"


@dataclass(frozen=True)
class Message:
    instance_id: str
    id: str
    role: Role
    content: str
    trace_id: str
    turn_index: int
    create_time: datetime
    channel: Channel = Channel.UNSPECIFIED
    audio_key: str = ""
    dictation: str = ""
    model: str = ""
    agent: str = ""
    # Fork copies: the message copied from and the trace id of the turn it was first spoken in.
    source_message: str = ""
    source_trace_id: str = ""

    @property
    def name(self) -> str:
        return f"instances/{self.instance_id}/messages/{self.id}"


@dataclass(frozen=True)
class HistoryMessage:
    """One earlier message of the conversation as the agent gets it (ThinkRequest.history)."""

    role: Role
    content: str
    name: str = ""
    turn_index: int = 0


@dataclass(frozen=True)
class NewInstance:
    id: str
    display_name: str
    agent: str
    request_id: uuid.UUID | None
    # services.common.ids.request_fingerprint of the request (stored with request_id, AIP-155).
    request_fingerprint: bytes | None = None


@dataclass(frozen=True)
class TurnInput:
    """A validated SendMessage/StreamMessage request."""

    instance_id: str
    content: str
    channel: Channel
    audio_key: str
    dictation: str
    request_id: uuid.UUID | None
    # services.common.ids.request_fingerprint of the request (stored with request_id, AIP-155).
    request_fingerprint: bytes | None = None


@dataclass(frozen=True)
class TurnRecord:
    """A stored turn (for request_id retries): its state and messages."""

    trace_id: str
    state: str  # RUNNING | DONE | FAILED
    user_message: Message
    reply: Message | None = None
    error_code: str | None = None
    error_message: str | None = None
    request_fingerprint: bytes | None = None  # None: the turn has no request id
    attempt_time: datetime | None = None  # when the current attempt started (RUNNING: staleness)
    owner_dead: bool = False  # RUNNING: the attempt's process no longer holds its liveness lock


@dataclass(frozen=True)
class AgentReply:
    """What the agent returned for a turn (already free of NUL characters)."""

    content: str
    model: str
    # Suspected-defect signals the agent reported (services.chat.defects.kinds_of builds them).
    defects: tuple[int, ...] = ()
    defect_tools: tuple[str, ...] = ()
    # The agent's proposed workspace changes, in order (validated and applied by services.chat.workspace).
    workspace_ops: tuple[Op, ...] = ()


def parse_instance_name(name: str, field_path: str = "name") -> str:
    """`instances/{instance}` → instance id; INVALID_ARGUMENT naming `field_path` otherwise."""
    return parse_name(name, INSTANCE_PATTERN, field_path)[0]


def parse_message_name(name: str, field_path: str = "name") -> tuple[str, str]:
    """`instances/{instance}/messages/{message}` → (instance id, message id)."""
    a, b = parse_name(name, MESSAGE_PATTERN, field_path)
    return a, b


def validate_new_instance(
    display_name: str,
    agent: str,
    instance_id: str,
    request_id: str,
    new_id: str,
    request_fingerprint: bytes | None = None,
) -> NewInstance:
    """CreateInstance input. INVALID_ARGUMENT for an empty, too long or unsafe (services.common.ids.check_label) `instance.display_name`,
    an `instance.agent` or `instance_id` that is not a slug `[a-z][a-z0-9-]{0,62}`, a bad `request_id`.
    Empty agent → `reference`; empty instance_id → `new_id`. `request_fingerprint` identifies the
    request a `request_id` belongs to (a reuse with another request is refused when stored).
    """
    check_label(display_name, "instance.display_name", MAX_DISPLAY_NAME_CHARS, required=True)
    agent = agent or DEFAULT_AGENT
    if not SLUG.match(agent):
        raise InvalidArgument("instance.agent", "must match [a-z][a-z0-9-]{0,62} (e.g. 'reference')")
    if instance_id and not SLUG.match(instance_id):
        raise InvalidArgument("instance_id", "must match [a-z][a-z0-9-]{0,62}")
    rid = parse_request_id(request_id)
    return NewInstance(
        id=instance_id or new_id, display_name=display_name, agent=agent, request_id=rid,
        request_fingerprint=request_fingerprint if rid is not None else None,
    )


def validate_turn(
    instance: str,
    content: str,
    channel: int,
    audio_key: str,
    dictation: str,
    request_id: str,
    max_content_chars: int,
    request_fingerprint: bytes | None = None,
) -> TurnInput:
    """SendMessage/StreamMessage input; INVALID_ARGUMENT naming the first bad field:
    `instance` (not `instances/{id}`), `content` (empty or whitespace only, over `max_content_chars`
    code points, or containing NUL), `channel` (unknown value), `audio_key` / `dictation` (NUL, too
    long), `request_id` (not a UUID). Nothing is written before this passes.
    """
    instance_id = parse_instance_name(instance, "instance")
    check_text(content, "content", max_content_chars, required=True)
    if channel not in Channel._value2member_map_:
        raise InvalidArgument("channel", f"unknown channel {channel}")
    check_text(audio_key, "audio_key", MAX_AUDIO_KEY_CHARS)
    check_text(dictation, "dictation", max_content_chars)
    rid = parse_request_id(request_id)
    ch = Channel(channel)
    if ch == Channel.UNSPECIFIED:
        ch = Channel.VOICE if (audio_key or dictation) else Channel.TEXT
    return TurnInput(
        instance_id, content, ch, audio_key, dictation, rid, request_fingerprint if rid is not None else None
    )


def agent_timeout(caller_remaining_s: float | None, cap_s: float) -> float:
    """Seconds the agent call may take: the caller's remaining time less the gateway's reserve
    (25 % of it, between 50 ms and 1 s: `services.common.deadlines.reserved`), at most `cap_s`.

    No caller deadline (None) → `cap_s` (docs/architecture.md "The turn" step 3: none forwarded from the
    caller, a configured cap applies). Never below 1 ms (an expired caller still gets a real
    DEADLINE_EXCEEDED from the agent call rather than a special case).
    """
    if caller_remaining_s is None:
        return cap_s
    return deadlines.reserved(cap_s, caller_remaining_s)


def sanitize_reply(text: str) -> tuple[str, int]:
    """Policy for an agent reply containing U+0000 (case F12): PostgreSQL `text` cannot hold it and
    the turn must not fail for it, so each NUL becomes U+FFFD; returns (text, number replaced).
    The user's own words are never rewritten: they are rejected instead (`validate_turn`).
    """
    n = text.count("\x00")
    return (text.replace("\x00", NUL_REPLACEMENT), n) if n else (text, 0)


def filter_trace_id(value: str) -> str | None:
    """ListMessages `trace_id` filter: empty → None; else a W3C trace id (INVALID_ARGUMENT `trace_id`)."""
    return parse_trace_id(value, "trace_id") if value else None


def parse_trace_ids(values: list[str], field_path: str, limit: int) -> list[str]:
    """1..`limit` W3C trace ids (INVALID_ARGUMENT naming `field_path`, or `field_path[i]` for a bad one)."""
    if not values or len(values) > limit:
        raise InvalidArgument(field_path, f"must hold 1 to {limit} trace ids")
    return [parse_trace_id(v, f"{field_path}[{i}]") for i, v in enumerate(values)]


@dataclass(frozen=True)
class MessagePage:
    """Keyset position after the last returned message: (create_time in µs since epoch, id).

    Messages sharing a create time are ordered by id, so a page boundary between them never
    skips or repeats one (AIP-158). The token also pins the filters it was issued for.
    """

    after_us: int
    after_id: str

    @staticmethod
    def key(m: Message) -> dict[str, int | str]:
        """The page-token position after `m`."""
        return {"t": to_us(m.create_time), "id": m.id}

    @staticmethod
    def of(pos: dict) -> MessagePage:
        """A page token's position, each value checked (INVALID_ARGUMENT naming `page_token`)."""
        return MessagePage(pages.page_token_us(pos.get("t")), pages.page_token_text(pos.get("id")))

    @property
    def after_time(self) -> datetime:
        return from_us(self.after_us)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def to_us(dt: datetime) -> int:
    """Exact integer microseconds since the epoch (float timestamps can lose one)."""
    return (dt - EPOCH) // _US


def from_us(us: int) -> datetime:
    return EPOCH + us * _US


# ListInstances in its default order and without a search binds its tokens to this constant (a token of
# another list is refused); a search or the activity order binds them to `InstanceQuery.filters()`.
INSTANCE_FILTERS = "instances"
INSTANCE_SEARCH_MAX_CHARS = 100
ORDER_BY_CREATE = ("", "create_time", "create_time asc")
ORDER_BY_ACTIVITY = "last_activity_time desc"


@dataclass(frozen=True, slots=True)
class InstanceQuery:
    """ListInstances' search (a case-insensitive substring of the display name; '' = all) and order."""

    search: str = ""
    by_activity: bool = False

    def filters(self) -> str | dict[str, str | bool]:
        return {"search": self.search, "by_activity": self.by_activity} if self.search or self.by_activity \
            else INSTANCE_FILTERS


def instance_query(search: str, order_by: str) -> InstanceQuery:
    """ListInstances' `search` (≤ 100 characters, no NUL; trimmed) and `order_by` (AIP-132: whitespace and
    case of the keywords do not matter); INVALID_ARGUMENT naming the field otherwise."""
    check_text(search, "search", INSTANCE_SEARCH_MAX_CHARS)
    order = " ".join(order_by.split()).lower()
    if order not in ORDER_BY_CREATE and order != ORDER_BY_ACTIVITY:
        raise InvalidArgument("order_by", f'must be "create_time" or "{ORDER_BY_ACTIVITY}"')
    return InstanceQuery(search.strip(), order == ORDER_BY_ACTIVITY)


def instance_key(i: Instance) -> dict[str, int | str]:
    """ListInstances keyset position: (create_time, id) of the last instance returned."""
    return {"t": to_us(i.create_time), "id": i.id}


def instance_activity_key(i: Instance) -> dict[str, int | str]:
    """ListInstances keyset position in the activity order: (activity_time, id) of the last one returned."""
    return {"t": to_us(i.activity_time or i.create_time), "id": i.id}


def instance_position(pos: dict) -> tuple[datetime, str]:
    return from_us(pages.page_token_us(pos.get("t"))), pages.page_token_text(pos.get("id"))


def time_from_ns(t_ns: int) -> datetime:
    """A UTC datetime from integer nanoseconds since the epoch (µs precision, as PostgreSQL stores)."""
    return EPOCH + (t_ns // 1000) * _US


@dataclass(frozen=True)
class ThinkInput:
    """What the gateway sends the agent for one turn (mirrors agentfeedback.agent.v1.ThinkRequest)."""

    instance: str
    agent: str
    history: list[HistoryMessage]
    content: str
    turn_index: int
    user_message: str
    # The workspace as the previous turn left it (the agent names artifacts and steps by it).
    workspace: State = State()


class AgentCallError(Exception):
    """The agent call failed. `kind`: DEADLINE_EXCEEDED | UNAVAILABLE | CANCELLED | FAILED."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class TurnRemoval:
    """One row of the turn removal outbox (chat migration 0030): turns deleted here that the feedback
    service must be told about (FeedbackService.NoteTurnsRemoved). DeleteTurn: `turn_indexes` and
    `trace_ids` of the turn; ClearMessages: every turn ≤ `through_turn_index`."""

    id: int
    owner: str
    instance_id: str
    turn_indexes: tuple[int, ...] = ()
    through_turn_index: int | None = None
    trace_ids: tuple[str, ...] = ()
    attempts: int = 0
