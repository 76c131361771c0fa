"""ReportSuspectedDefect (issue 13): one call turns a suspected defect the chat service lists (a turn
where the platform caught its own agent: `chat.truncated`, `chat.invented_result`, a tool or turn
ERROR) into a report anchored to that turn — target its trace id, author PLATFORM, sentiment BAD, a
category from the defect's first kind and a body the server writes (no client text). The defect is
read from the chat service with the caller's token, so only its owner can report it. Everything else
(idempotency by request id, the snapshot, the frozen evidence) is CreateFeedback's (`Reports.create`).
"""
from __future__ import annotations

import uuid

from agentfeedback.chat.v1 import chat_pb2
from services.common.auth import Principal
from services.common.errors import Unavailable
from services.feedback.chat_client import ChatClient, ChatUnreachable
from services.feedback.model.enums import Author, Category, Sentiment, Surface
from services.feedback.model.report import Anchor, Report, ReportDraft
from services.feedback.reports import Reports

_CATEGORIES = {
    chat_pb2.DEFECT_KIND_TRUNCATED: Category.TOOL_FAILURE, chat_pb2.DEFECT_KIND_TOOL_ERROR: Category.TOOL_FAILURE,
    chat_pb2.DEFECT_KIND_INVENTED_RESULT: Category.BROKEN_RESPONSE,
    chat_pb2.DEFECT_KIND_TURN_ERROR: Category.BROKEN_RESPONSE,
}


def body_of(d: chat_pb2.SuspectedDefect) -> str:
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
        """The report of the caller's suspected defect `name` (its turn: `anchor`, from the codec); a
        retry with `request_id` returns the first. NOT_FOUND when the chat service has no such defect for
        the caller; UNAVAILABLE when it cannot be reached."""
        try:
            d = await self._chat.get_defect(name, p.metadata)
        except ChatUnreachable:
            raise Unavailable("the chat service cannot be reached to read the suspected defect",
                              retry_after_s=1.0, reason="CHAT_UNAVAILABLE") from None
        category = _CATEGORIES.get(d.kinds[0], Category.OTHER) if d.kinds else Category.OTHER
        draft = ReportDraft(request_id, fingerprint, anchor, Surface.CHAT, Author.PLATFORM, body_of(d)[:4000],
                            Sentiment.BAD, category)
        return await self._reports.create(p, draft)
