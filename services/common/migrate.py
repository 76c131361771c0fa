"""Forward-only numbered SQL migrations, one folder per service, applied at start-up.

Files: `NNNN_description.sql` (NNNN = 4 digits). Each service owns one schema; its applied
migrations are recorded in `<schema>.schema_migrations(version, name, checksum, applied_at)`.
Rules: runs under `pg_advisory_xact_lock` keyed on the schema (so N replicas starting together
apply each file once); every file applied in its own transaction; an applied file whose SHA-256
changed → `MigrationError` (never edit an applied migration, add a new one); two files with one
number → `MigrationError`.

Why not a migration library: the ones that exist (yoyo, alembic) are synchronous or ORM-bound;
this is the ~80 lines docs/architecture.md "Storage and retention" describes (asyncpg, advisory lock, checksums, schema per service).
"""
from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import asyncpg

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class MigrationError(RuntimeError):
    pass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(directory: Path) -> list[Migration]:
    """Migrations in `directory`, ordered; MigrationError on a bad name or a duplicate number."""
    seen: dict[int, str] = {}
    out: list[Migration] = []
    for p in sorted(directory.glob("*.sql")):
        m = _NAME.match(p.name)
        if not m:
            raise MigrationError(f"{p}: migration files are named NNNN_description.sql")
        v = int(m.group(1))
        if v in seen:
            raise MigrationError(f"{p}: migration number {v} already used by {seen[v]}")
        seen[v] = p.name
        out.append(Migration(v, p.stem, p.read_text()))
    return out


def _lock_key(schema: str) -> int:
    return zlib.crc32(f"agentfeedback.migrate.{schema}".encode())


async def apply_migrations(conn: asyncpg.Connection, schema: str, directory: Path) -> list[int]:
    """Apply pending migrations of `directory` into `schema`; returns the versions applied now."""
    migrations = load_migrations(directory)
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _lock_key(schema))
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        await conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{schema}".schema_migrations ('
            " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        rows = await conn.fetch(f'SELECT version, checksum FROM "{schema}".schema_migrations')
        done = {r["version"]: r["checksum"] for r in rows}
        for m in migrations:
            if m.version in done:
                if done[m.version] != m.checksum:
                    raise MigrationError(
                        f"{schema} migration {m.name} changed after it was applied; add a new migration instead"
                    )
                continue
            await conn.execute(f'SET LOCAL search_path TO "{schema}", public')
            await conn.execute(m.sql)
            await conn.execute(
                f'INSERT INTO "{schema}".schema_migrations(version, name, checksum) VALUES ($1, $2, $3)',
                m.version, m.name, m.checksum,
            )
            applied_now.append(m.version)
    return applied_now
