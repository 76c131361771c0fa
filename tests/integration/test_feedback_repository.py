"""Every SQL constant of services/feedback/repository.py prepares against the migrated schema (real
PostgreSQL), so a typo or an ambiguous parameter type fails here, not in the middle of an RPC."""
from __future__ import annotations

import asyncpg

from services.common.db import migrate
from services.feedback import repository
from services.feedback.server import MIGRATIONS


async def test_every_statement_prepares(database_url):
    await migrate(database_url, "feedback", MIGRATIONS)
    conn = await asyncpg.connect(database_url, server_settings={"search_path": "feedback,public"})
    try:
        names = [n for n in dir(repository) if n.isupper() and isinstance(getattr(repository, n), str)
                 and getattr(repository, n).lstrip().split(None, 1)[0].upper() in ("SELECT", "INSERT", "UPDATE",
                                                                                  "DELETE", "WITH")]
        assert len(names) >= 20
        for n in names:
            try:
                await conn.prepare(getattr(repository, n))
            except asyncpg.PostgresError as e:
                raise AssertionError(f"{n}: {e}") from None
    finally:
        await conn.close()


async def test_spans_frozen_into_an_unverified_client_row_before_the_fix_are_dropped_and_reverified(
        database_url, tmp_path):
    """A row captured by the old worker from a CLIENT snapshot (never verified) loses its frozen copy
    and goes back to the verification queue; a verified (chat service) row keeps its copy."""
    old = tmp_path / "migrations"
    old.mkdir()
    for f in sorted(MIGRATIONS.glob("*.sql"))[:2]:
        (old / f.name).write_text(f.read_text())
    await migrate(database_url, "feedback", old)
    conn = await asyncpg.connect(database_url, server_settings={"search_path": "feedback,public"})
    try:
        for fid, source in (("leaked", 2), ("verified", 1)):
            await conn.execute(
                """INSERT INTO feedback (id, owner, request_id, target_kind, message, author, body, snapshot,
                       snapshot_source, trace_id, trace_state, trace_snapshot, capture_time, create_time, update_time)
                   VALUES ($1, 'mallory', gen_random_uuid(), 'message', 'instances/a/messages/m', 1, 'words', '{}',
                       $2, $3, 2, '{"tool_calls": [{"name": "owner_secret_tool"}]}', now(), now(), now())""",
                fid, source, "ab" * 16)
        await migrate(database_url, "feedback", MIGRATIONS)
        rows = {r["id"]: r for r in await conn.fetch(
            "SELECT id, trace_state, trace_snapshot::text AS ts, refresh_at, body FROM feedback")}
        assert rows["leaked"]["trace_state"] == 1 and "owner_secret_tool" not in rows["leaked"]["ts"]
        assert rows["leaked"]["refresh_at"] is not None and rows["leaked"]["body"] == "words"
        assert rows["verified"]["trace_state"] == 2 and "owner_secret_tool" in rows["verified"]["ts"]
    finally:
        await conn.close()
