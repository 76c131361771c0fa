"""The stored-report cap's fast path (services/feedback/report_cap.py): which creates skip the lock."""
from __future__ import annotations

import asyncio

from services.feedback import report_cap
from services.feedback.report_cap import ReportCap


def test_an_owner_counted_far_below_the_cap_skips_the_lock_for_a_minute_only(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(report_cap.time, "monotonic", lambda: now[0])
    cap = ReportCap(10_000, 240)
    assert cap.limit_for("a") == 10_000  # never counted: capped under the lock
    cap.counted("a", 10_000 - 3 * 240 - 1)
    assert cap.limit_for("a") is None
    now[0] += report_cap.TRUSTED_S
    assert cap.limit_for("a") == 10_000
    cap.counted("b", 10_000 - 3 * 240)  # within 3 × the write quota of the cap: always locked
    assert cap.limit_for("b") == 10_000


def test_without_a_write_quota_or_a_cap():
    unlimited = ReportCap(10_000, 0)
    unlimited.counted("a", 0)
    assert unlimited.limit_for("a") == 10_000  # nothing bounds concurrent creates: every one is locked
    assert ReportCap(0, 240).limit_for("a") is None


async def test_capped_creates_of_one_owner_queue_and_leave_nothing_behind():
    cap = ReportCap(3, 0)
    inside: list[str] = []
    most = 0

    async def create(owner: str) -> None:
        nonlocal most
        async with cap.queued(owner):
            inside.append(owner)
            most = max(most, inside.count("a"))
            await asyncio.sleep(0.01)
            inside.remove(owner)

    await asyncio.gather(*(create("a") for _ in range(5)), create("b"))
    assert most == 1 and len(cap._queues) == 0  # no entry left behind
