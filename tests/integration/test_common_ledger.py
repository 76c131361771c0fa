"""The one request ledger (services/common/ledger.py) on real PostgreSQL: a record answers a retry for
its method only, expires after the retention (a lookup ignores it, a new record replaces it), and the
one prune pass deletes expired records of every method."""
from __future__ import annotations

import uuid

import asyncpg

from services.common import ledger
from services.common.db import migrate
from services.common.ledger import Ledger
from services.feedback.server import MIGRATIONS


async def test_records_are_per_method_expire_and_are_pruned(database_url):
    await migrate(database_url, "feedback", MIGRATIONS)
    conn = await asyncpg.connect(database_url, server_settings={"search_path": "feedback,public"})
    try:
        updates, deletes = Ledger("UpdateFeedback"), Ledger("DeleteFeedback")
        rid = uuid.uuid4()
        assert await updates.get(conn, "alice", rid) is None
        await updates.record(conn, "alice", rid, "f1", b"x" * 32)
        got = await updates.get(conn, "alice", rid)
        assert got is not None and got.resource == "f1" and bytes(got.fingerprint) == b"x" * 32
        assert await deletes.get(conn, "alice", rid) is None  # another method's record
        assert await updates.get(conn, "bob", rid) is None  # another owner's
        await updates.record(conn, "alice", rid, "f2", b"y" * 32)  # a live record is never replaced
        assert (await updates.get(conn, "alice", rid)).resource == "f1"

        # Age it past the retention: ignored, replaced by a new record, and pruned when not replaced.
        await conn.execute("UPDATE request_ledger SET create_time = now() - interval '25 hours'")
        assert await updates.get(conn, "alice", rid) is None
        await updates.record(conn, "alice", rid, "f3", None)
        assert (await updates.get(conn, "alice", rid)).resource == "f3"
        old = uuid.uuid4()
        await deletes.record(conn, "carol", old, "f9", None)
        await conn.execute("UPDATE request_ledger SET create_time = now() - interval '25 hours' WHERE owner = 'carol'")
        assert await ledger.prune(conn) == 1
        assert await conn.fetchval("SELECT count(*) FROM request_ledger") == 1
    finally:
        await conn.close()
