"""`agentfeedback-migrate` (what the Kubernetes migration Job and the compose `migrate` service run),
as a real process through its entry point against a fresh database."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import asyncpg

from services.common.migrate_main import MIGRATIONS

EXE = Path(sys.executable).parent / "agentfeedback-migrate"


def _run(database_url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGENTFEEDBACK_DATABASE_URL": database_url, "AGENTFEEDBACK_DATA_DIR": str(tmp_path)}
    return subprocess.run([str(EXE), *args], env=env, capture_output=True, text=True, timeout=120, check=False)


async def _applied(database_url: str) -> dict[str, set[int]]:
    conn = await asyncpg.connect(database_url)
    try:
        out = {}
        for schema in MIGRATIONS:
            exists = await conn.fetchval("SELECT to_regclass($1)", f"{schema}.schema_migrations")
            out[schema] = ({r["version"] for r in await conn.fetch(f'SELECT version FROM "{schema}".schema_migrations')}
                           if exists else set())
        return out
    finally:
        await conn.close()


def _versions(directory: Path) -> set[int]:
    return {int(p.name[:4]) for p in directory.glob("*.sql")}


async def test_migrate_applies_every_service_schema_once_and_is_idempotent(database_url, tmp_path):
    assert EXE.exists(), "entry point agentfeedback-migrate not installed (pip install -e .)"
    first = _run(database_url, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    applied = await _applied(database_url)
    assert applied == {schema: _versions(d) for schema, d in MIGRATIONS.items()}
    assert all(applied.values())
    again = _run(database_url, tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert await _applied(database_url) == applied


async def test_migrate_one_service_leaves_the_others_alone(database_url, tmp_path):
    r = _run(database_url, tmp_path, "--service", "feedback")
    assert r.returncode == 0, r.stdout + r.stderr
    applied = await _applied(database_url)
    assert applied["feedback"] == _versions(MIGRATIONS["feedback"])
    assert applied["chat"] == set() and applied["traces"] == set()


async def test_migrate_fails_loudly_when_an_applied_migration_changed(database_url, tmp_path):
    assert _run(database_url, tmp_path, "--service", "chat").returncode == 0
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("UPDATE chat.schema_migrations SET checksum = 'edited-after-apply' WHERE version = 1")
    finally:
        await conn.close()
    r = _run(database_url, tmp_path, "--service", "chat")
    assert r.returncode == 1
    assert "changed after it was applied" in r.stdout + r.stderr


async def test_migrate_exits_non_zero_when_the_database_is_unreachable(tmp_path):
    r = _run("postgresql://nobody@127.0.0.1:1/none", tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "migration failed" in r.stdout + r.stderr
