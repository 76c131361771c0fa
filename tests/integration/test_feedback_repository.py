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
