"""ReportSuspectedDefect (issue 13): one call turns a suspected defect the chat service lists (a turn
where the platform caught its own agent: `chat.truncated`, `chat.invented_result`, a tool or turn
ERROR) into a report anchored to that turn — target its trace id, author PLATFORM, sentiment BAD, a
category from the defect's first kind and a body the server writes (no client text). The defect is
read from the chat service with the caller's token, so only its owner can report it. Everything else
(the snapshot, the frozen evidence) is CreateFeedback's (`Reports.create`).

One defect, at most one report (issue 25: reporting it again with a new request id made a second
platform report): the create is keyed on the defect itself — its request id is `defect_request_id`
(a UUID5 of the defect's name; request ids are the owner's) and its fingerprint the name's — so any
later ReportSuspectedDefect of that defect, whatever its `request_id`, answers with the report the
first one stored (AIP-155's answer of a retry). The client's `request_id` is still checked (a UUID).
Deleted: within the request retention (24 h) reporting it again is NOT_FOUND (FEEDBACK_DELETED), as
a retried create of a deleted report; later it makes a new report.
"""
from __future__ import annotations

import hashlib
import uuid

from services.common.auth import Principal
from services.feedback.chat_client import ChatClient, ChatUnreachable
from services.feedback.domain import DefectView
from services.feedback.model.enums import Author, Category, Sentiment, Surface
from services.feedback.model.report import Anchor, Report, ReportDraft
from services.feedback.reports import Reports

# The report's category by the defect's first kind (chat.proto DefectKind names).
_CATEGORIES = {
    "DEFECT_KIND_TRUNCATED": Category.TOOL_FAILURE, "DEFECT_KIND_TOOL_ERROR": Category.TOOL_FAILURE,
    "DEFECT_KIND_INVENTED_RESULT": Category.BROKEN_RESPONSE, "DEFECT_KIND_TURN_ERROR": Category.BROKEN_RESPONSE,
}


# The namespace of the request ids defects' reports are stored under.
_DEFECT_REQUESTS = uuid.UUID("5b2f1f4e-8c47-4f0e-9a51-2d3c1e0f7a25")


def defect_request_id(name: str) -> uuid.UUID:
    """The request id the report of the suspected defect `name` is stored under (one per defect)."""
    return uuid.uuid5(_DEFECT_REQUESTS, name)


def body_of(d: DefectView) -> str:
    """The server's sentence: the event, the turn, the tools involved (names the agent reported)."""
    tools = f" (tools: {', '.join(d.tools)})" if d.tools else ""
    return (f"Suspected defect caught by the platform: {d.event} in turn {d.turn_index}{tools}. "
            "Reported from the suspected-defects list; these are not the owner's words.")


class DefectReports:
    def __init__(self, chat: ChatClient, reports: Reports):
        self._chat = chat
        self._reports = reports

    async def report(self, p: Principal, name: str, anchor: Anchor, request_id: uuid.UUID,
                     fingerprint: bytes) -> Report:
        """The report of the caller's suspected defect `name` (its turn: `anchor`, from the codec): the
        first call stores it, every later one (any `request_id`) returns it. NOT_FOUND when the chat
        service has no such defect for the caller; UNAVAILABLE when it cannot be reached."""
        try:
            d = await self._chat.get_defect(name, p.metadata)
        except ChatUnreachable as e:
            raise e.unavailable("to read the suspected defect") from None
        category = _CATEGORIES.get(d.kinds[0], Category.OTHER) if d.kinds else Category.OTHER
        canonical = f"{anchor.instance}/suspectedDefects/{anchor.trace_id}"  # the trace id as parsed
        draft = ReportDraft(defect_request_id(canonical), hashlib.sha256(canonical.encode()).digest(), anchor, Surface.CHAT, Author.PLATFORM, body_of(d)[:4000],
                            Sentiment.BAD, category)
        return await self._reports.create(p, draft)
