"""Helpers of the feedback unit tests: a chat message view and a collected span, as the services see them."""
from __future__ import annotations

import datetime as dt


from services.feedback import evidence
from services.feedback import domain as d

T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def msg(role: str, content: str, **kw) -> d.MessageView:
    base = dict(name=f"instances/i/messages/{role}", role=role, content=content, trace_id="ab" * 16, turn_index=1,
                create_time=T0)
    return d.MessageView(**{**base, **kw})


def span(span_id: str, parent: str = "", name: str = "x", start_ms: int = 0, dur_ms: int = 1, **kw) -> evidence.SpanView:
    return evidence.SpanView(span_id=span_id, parent_span_id=parent, name=name, service_name=kw.pop("service", "chat"),
                      status=kw.pop("status", "OK"), start_unix_nano=start_ms * 1_000_000,
                      end_unix_nano=(start_ms + dur_ms) * 1_000_000, **kw)
