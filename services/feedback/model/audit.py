"""The audit trail (ListAuditRecords): an entry to write and a stored record."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from services.feedback.model.enums import AuditAction


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audit record to write (issue 13): who did what to which report; `changes`: (field, old, new)
    of status / issue_url only, never the body. `method`: the full gRPC method name."""

    actor: str
    action: AuditAction
    feedback_id: str
    owner: str
    changes: tuple[tuple[str, str, str], ...] = ()
    method: str = ""


@dataclass(frozen=True, slots=True)
class AuditRecord:
    id: str
    time: dt.datetime
    entry: AuditEntry
