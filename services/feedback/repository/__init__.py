"""All SQL of the feedback service (schema `feedback`) and the one `Repository` that runs it over an
asyncpg pool, returning the model's dataclasses (`services/feedback/model.py`), never records.

One package, one module per table family: `reports` (reports and their request ledgers), `capture`
(the capture worker's queues), `ratings` (ratings, statistics, the operator feed), `statistics` (the
funnel and per-dimension series), `audit` (the audit trail, the per-turn view); `rows` maps rows
and `jsonb` columns to the model. No rule is decided here: the use cases decide, this stores.
"""
from __future__ import annotations

import json

import asyncpg

from services.common.db import create_pool as common_create_pool
from services.common.db import COMMAND_TIMEOUT_S, skip_reset
from services.feedback.repository.capture import *  # noqa: F403 - the SQL constants, one namespace
from services.feedback.repository.capture import CaptureStore
from services.feedback.repository.ratings import *  # noqa: F403
from services.feedback.repository.ratings import RatingStore
from services.feedback.repository.reports import *  # noqa: F403
from services.feedback.repository.reports import ReportStore, like_pattern
from services.feedback.repository.statistics import StatisticsStore
from services.feedback.repository.audit import AuditStore

__all__ = ["Repository", "create_pool", "like_pattern"]


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(url: str, min_size: int, max_size: int,
                      command_timeout_s: float = COMMAND_TIMEOUT_S) -> asyncpg.Pool:
    """The service's pool (schema `feedback`, UTC) with jsonb ↔ Python codecs on every connection.
    This service keeps no session state (no SET, LISTEN, session advisory lock or cursor outside a
    transaction), so connections go back to the pool without asyncpg's RESET round trip."""
    return await common_create_pool(url, "feedback", min_size=min_size, max_size=max_size, init=_init_connection,
                                    reset=skip_reset, command_timeout_s=command_timeout_s)


class Repository(ReportStore, CaptureStore, RatingStore, StatisticsStore, AuditStore):
    """The feedback schema's reads and writes over one pool."""

    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool
