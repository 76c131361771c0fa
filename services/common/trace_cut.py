"""The one wording of "the collector cut this trace", shared by every reader that shows a GetTrace
answer or a report's evidence frozen from one: the CLI's waterfall and `feedback show` (plain and
Markdown), the MCP `agent_trace` tool, and the ticket FileFeedback files (the console has the same
words in console/src/pages/trace.ts `cutNotice`).

GetTrace keeps its answer within a budget by cutting the largest attribute values and counting them
(traces.v1 `Trace.truncated_value_count`); a report frozen from such an answer keeps the count
(feedback.v1 `TraceSnapshot.truncated_value_count`). Each cut value ends with
`services.common.clip.MARKER` (`…(+N chars)`)."""
from __future__ import annotations

from services.common.clip import MARKER


def cut_notice(truncated_value_count: int) -> str:
    """The one line saying a GetTrace answer had `truncated_value_count` attribute values cut by the
    collector's answer budget, e.g. "360 attribute values were cut to fit the answer (GetTrace answer
    budget); each cut value ends with …(+N chars)"; "" when nothing was cut (count ≤ 0)."""
    if truncated_value_count <= 0:
        return ""
    what = "1 attribute value was" if truncated_value_count == 1 else f"{truncated_value_count} attribute values were"
    return f"{what} cut to fit the answer (GetTrace answer budget); each cut value ends with {MARKER.format('N')}"


def frozen_cut_notice(truncated_value_count: int) -> str:
    """The one line saying a report's frozen evidence came from a cut GetTrace answer
    (`TraceSnapshot.truncated_value_count` values cut): "frozen from a cut answer: " + `cut_notice`;
    "" when the copy was frozen from a whole answer (count ≤ 0)."""
    notice = cut_notice(truncated_value_count)
    return f"frozen from a cut answer: {notice}" if notice else ""
