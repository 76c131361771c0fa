"""The migration runner against a real PostgreSQL, and every service's migration folder."""
from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from services.common.migrate import MigrationError, apply_migrations, load_migrations

ROOT = Path(__file__).resolve().parents[2]
SERVICE_MIGRATIONS = sorted(ROOT.glob("services/*/migrations"))


@pytest.mark.parametrize("folder", SERVICE_MIGRATIONS, ids=lambda p: p.parent.name)
def test_service_migrations_have_unique_numbers(folder: Path):
    load_migrations(folder)  # raises on a duplicate number or a bad name


def test_duplicate_numbers_fail(tmp_path: Path):
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    (tmp_path / "0001_b.sql").write_text("SELECT 2;")
    with pytest.raises(MigrationError, match="already used"):
        load_migrations(tmp_path)


async def test_apply_is_idempotent_concurrent_and_checks_checksums(database_url: str, tmp_path: Path):
    (tmp_path / "0001_t.sql").write_text("CREATE TABLE t (id int PRIMARY KEY);")
    (tmp_path / "0002_u.sql").write_text("INSERT INTO t VALUES (1);")
    conns = [await asyncpg.connect(database_url) for _ in range(3)]
    try:
        results = await asyncio.gather(*(apply_migrations(c, "demo", tmp_path) for c in conns))
        assert sorted(len(r) for r in results) == [0, 0, 2]  # applied once, under the advisory lock
        assert await conns[0].fetchval("SELECT count(*) FROM demo.t") == 1
        (tmp_path / "0002_u.sql").write_text("INSERT INTO t VALUES (2);")
        with pytest.raises(MigrationError, match="changed after it was applied"):
            await apply_migrations(conns[0], "demo", tmp_path)
        assert await conns[0].fetchval("SELECT count(*) FROM demo.t") == 1
    finally:
        for c in conns:
            await c.close()
