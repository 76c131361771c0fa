"""All SQL of the feedback service (schema `feedback`): one store per use case, each over the pool,
returning the model's dataclasses (`services/feedback/model/`), never records.

`reports.ReportStore` (reports and their request ledgers), `ratings.RatingStore` (ratings),
`statistics.StatisticsStore` (the statistics, the operator feed, the per-turn view), `audit.AuditStore`
(the audit trail), `capture.CaptureStore` (the capture worker's queues, the ledgers' prune); `rows` maps
rows and `jsonb` columns to the model, `text_search` runs the bounded text searches. No rule is
decided here: the use cases decide, the stores store.
"""
from __future__ import annotations

import json

import asyncpg

from services.common.db import COMMAND_TIMEOUT_S, skip_reset
from services.common.db import create_pool as common_create_pool


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(url: str, min_size: int, max_size: int,
                      command_timeout_s: float = COMMAND_TIMEOUT_S) -> asyncpg.Pool:
    """The service's pool (schema `feedback`, UTC) with jsonb ↔ Python codecs on every connection.
    This service keeps no session state (no SET, LISTEN, session advisory lock or cursor outside a
    transaction), so connections go back to the pool without asyncpg's RESET round trip."""
    return await common_create_pool(url, "feedback", min_size=min_size, max_size=max_size, init=_init_connection,
                                    reset=skip_reset, command_timeout_s=command_timeout_s)
