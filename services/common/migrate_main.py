"""`agentfeedback-migrate`: apply every service's SQL migrations once, ahead of a rollout.

What the Kubernetes migration Job and the compose `migrate` service run. Each service also applies
its own migrations at start-up (same runner, same advisory lock), so this is a fail-fast step before
new pods start, not a second source of truth: both go through `services.common.db.migrate`.

Usage:
    agentfeedback-migrate                      # all services: chat, feedback, traces
    agentfeedback-migrate --service feedback   # one (repeatable)

Database: `AGENTFEEDBACK_DATABASE_URL` (CommonSettings). Exit codes: 0 applied (or nothing pending),
1 a migration failed (`MigrationError`: changed checksum, duplicate number; or a SQL error), 2 bad usage.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from services.common.db import migrate, resolve_database_url
from services.common.migrate import MigrationError
from services.common.settings import CommonSettings
from services.common.telemetry import setup_logging

log = logging.getLogger(__name__)

_SERVICES_DIR = Path(__file__).resolve().parents[1]

# Schema (docs/architecture.md "Storage and retention": one schema per service) → that service's migrations folder.
MIGRATIONS: dict[str, Path] = {
    "chat": _SERVICES_DIR / "chat" / "migrations",
    "feedback": _SERVICES_DIR / "feedback" / "migrations",
    "traces": _SERVICES_DIR / "tracecollector" / "migrations",
}


async def migrate_all(url: str, schemas: list[str]) -> dict[str, list[int]]:
    """Apply pending migrations of `schemas` (keys of MIGRATIONS) in order; returns versions applied now."""
    applied: dict[str, list[int]] = {}
    for schema in schemas:
        applied[schema] = await migrate(url, schema, MIGRATIONS[schema])
    return applied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentfeedback-migrate", description=__doc__.splitlines()[0])
    parser.add_argument("--service", dest="schemas", action="append", choices=sorted(MIGRATIONS),
                        help="schema to migrate (repeatable); default: all")
    args = parser.parse_args(argv)
    settings = CommonSettings()
    setup_logging(settings.log_level, settings.log_format)
    schemas = args.schemas or list(MIGRATIONS)
    try:
        applied = asyncio.run(migrate_all(resolve_database_url(settings), schemas))
    except (MigrationError, OSError) as e:
        log.error("migration failed: %s", e)
        return 1
    except Exception:  # noqa: BLE001 - asyncpg.PostgresError and friends: report, exit non-zero
        log.exception("migration failed")
        return 1
    for schema, versions in applied.items():
        log.info("schema %s: applied %s", schema, versions or "nothing (up to date)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
