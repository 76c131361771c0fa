"""Bearer JWT authentication (PyJWT) and scopes.

Token: `authorization: Bearer <jwt>` gRPC metadata. Claims: `sub` = user id (owner of rows; ≤ 256
characters, no control or bidi formatting characters),
`scope` = space-separated scopes (RFC 8693 / OAuth 2.0 `scope` claim form), `exp` required.
Embedded default: HS256 with a secret generated once into `<data_dir>/jwt-secret`; production:
RS256 with a PEM public key or a JWKS URL (`AGENTFEEDBACK_JWT_PUBLIC_KEY_FILE` / `_JWKS_URL`).
Services call each other with the caller's token (on behalf of), so ownership is checked where the
data lives.
"""
from __future__ import annotations

import contextvars
import hashlib
import logging
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import jwt

from services.common.clip import clip
from services.common.errors import PermissionDenied, Unauthenticated
from services.common.ids import UNSAFE_IN_LABEL
from services.common.settings import CommonSettings

log = logging.getLogger(__name__)

# Scopes (docs/architecture.md "Contracts that matter").
SCOPE_CHAT = "chat"
SCOPE_FEEDBACK_WRITE = "feedback:write"
SCOPE_FEEDBACK_READ = "feedback:read"
SCOPE_FEEDBACK_TRIAGE = "feedback:triage"
SCOPE_FEEDBACK_ADMIN = "feedback:admin"
SCOPE_TRACES_READ = "traces:read"
# The reference agent's own service credential (metadata `x-agentfeedback-actor`): lets a CreateFeedback
# made on a user's behalf carry author AGENT. Never in user / dev tokens (not in ALL_SCOPES).
SCOPE_FEEDBACK_AGENT = "feedback:agent"
# The MCP server's own service credential (same metadata key): its `resolve_feedback` tool is recorded
# in the audit trail as RESOLVE_FEEDBACK only with it (a header alone proves nothing). Not in ALL_SCOPES.
SCOPE_FEEDBACK_TOOL = "feedback:tool"
# The trace collector's own service credential: hands evaluations that arrived over OTLP to the
# feedback service (FeedbackService.AcceptEvaluations) and finds their turns across owners
# (ChatService.LookupTurns). Not in ALL_SCOPES: no owner or dev token may write another system's ratings.
SCOPE_FEEDBACK_EVALUATIONS = "feedback:evaluations"
# The chat gateway's own service credential: tells the feedback service which turns DeleteTurn / Clear
# chat removed (FeedbackService.NoteTurnsRemoved, naming the owner). Not in ALL_SCOPES: an owner's token
# could otherwise mark any turn removed and delete its ratings.
SCOPE_FEEDBACK_TURN_REMOVAL = "feedback:turn-removal"
# gRPC metadata key of such a credential (`Bearer <jwt>`), sent next to the user's `authorization`.
ACTOR_METADATA = "x-agentfeedback-actor"
# Metadata naming the MCP tool that made a call (a claim; the credential above proves it).
TOOL_METADATA = "x-agentfeedback-tool"
ALL_SCOPES = (
    SCOPE_CHAT,
    SCOPE_FEEDBACK_WRITE,
    SCOPE_FEEDBACK_READ,
    SCOPE_FEEDBACK_TRIAGE,
    SCOPE_FEEDBACK_ADMIN,
    SCOPE_TRACES_READ,
)
# What the dev token printed by `make run` carries: everything an owner + operator needs.
DEV_SCOPES = ALL_SCOPES


@dataclass(frozen=True)
class Principal:
    """The authenticated caller. `token` is the raw JWT, forwarded on calls made on its behalf."""

    sub: str
    scopes: frozenset[str]
    token: str

    def require(self, scope: str) -> None:
        """Raises PermissionDenied (PERMISSION_DENIED) when the token lacks `scope`."""
        if scope not in self.scopes:
            raise PermissionDenied(scope)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """gRPC metadata to call another service on this principal's behalf."""
        return (("authorization", f"Bearer {self.token}"),)


_current: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("principal", default=None)


def current_principal() -> Principal:
    """The principal of the RPC being handled (set by the auth interceptor)."""
    p = _current.get()
    if p is None:
        raise Unauthenticated()
    return p


def current_principal_or_none() -> Principal | None:
    """The principal of the RPC being handled, None outside one."""
    return _current.get()


def set_current_principal(p: Principal | None) -> contextvars.Token:
    """Set the principal of the RPC being handled; the token undoes it (`reset_current_principal`)."""
    return _current.set(p)


def reset_current_principal(token: contextvars.Token) -> None:
    """Back to the principal before `set_current_principal` returned `token` (the RPC ended)."""
    _current.reset(token)


def dev_secret(settings: CommonSettings) -> str:
    """The HS256 secret: the configured one, else `<data_dir>/jwt-secret` (created 0600 on first use)."""
    if settings.jwt_secret.get_secret_value():
        return settings.jwt_secret.get_secret_value()
    path = Path(settings.data_dir) / "jwt-secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(secrets.token_urlsafe(48))
        tmp.chmod(0o600)
        try:
            tmp.rename(path) if not path.exists() else tmp.unlink()
        except FileNotFoundError:
            pass
    return path.read_text().strip()


def page_token_key(settings: CommonSettings) -> bytes:
    """The page-token HMAC key (services.common.pages, 32 bytes): `AGENTFEEDBACK_PAGE_TOKEN_KEY` when set (needed
    when replicas verify RS256/JWKS tokens and so share no HS256 secret), else derived from the HS256
    secret (`dev_secret`), which every replica of an HS256 deployment already shares; with RS256 and no
    key, a random key of this process (logged as a warning)."""
    configured = settings.page_token_key.get_secret_value()
    if configured:
        return hashlib.sha256(b"agentfeedback page-token key\0" + configured.encode()).digest()
    if not settings.jwt_secret.get_secret_value() and (settings.jwt_jwks_url or settings.jwt_public_key_file):
        # RS256 and no key: no shared secret to derive from, and the data dir may be read-only (a
        # container). A key of this process: its tokens page on with this replica only.
        log.warning("AGENTFEEDBACK_PAGE_TOKEN_KEY is not set: page tokens are "
                                            "valid on this process only (set it on every replica)")
        return secrets.token_bytes(32)
    return hashlib.sha256(b"agentfeedback page-token key from jwt secret\0" + dev_secret(settings).encode()).digest()


def mint_token(secret: str, sub: str, scopes: tuple[str, ...] | list[str] = DEV_SCOPES, ttl_s: int = 86400) -> str:
    """An HS256 dev token for `sub` with `scopes`, valid `ttl_s` seconds."""
    now = int(time.time())
    return jwt.encode({"sub": sub, "scope": " ".join(scopes), "iat": now, "exp": now + ttl_s}, secret, "HS256")


# Verified tokens kept per process (a verification costs ~0.1 ms of CPU and every RPC has one).
# Entries live until the token's `exp` (+ leeway, as PyJWT would accept it); the cache is bounded.
TOKEN_CACHE_MAX = 4096
# A token's `sub` is the owner of the rows its calls write: bounded as every owner field is
# (NoteTurnsRemoved.owner, WatchFeedback's owner filter: 256 characters), so any sub a call was
# served with can also be named in every later call about its rows.
MAX_SUB_CHARS = 256


# The answer to a token PyJWT refuses, by the kind of refusal (first match); anything else is
# NOT_A_JWT. Fixed sentences: the library's text (decoding details) never reaches a client.
NOT_A_JWT = "the bearer token is not a valid JWT"
_REFUSALS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "the bearer token has expired"),
    (jwt.ImmatureSignatureError, "the bearer token is not valid yet"),
    (jwt.MissingRequiredClaimError, "the bearer token lacks a required claim (sub, exp)"),
    (jwt.InvalidAudienceError, "the bearer token is for another audience"),
    (jwt.InvalidIssuerError, "the bearer token is from another issuer"),
    (jwt.InvalidSignatureError, "the bearer token's signature does not verify"),
    (jwt.InvalidAlgorithmError, "the bearer token's algorithm is not accepted here"),
    (jwt.PyJWKClientError, "the bearer token's signing key is not in the configured JWKS"),
)


def _refusal(e: jwt.PyJWTError) -> str:
    return next((answer for kind, answer in _REFUSALS if isinstance(e, kind)), NOT_A_JWT)


class Authenticator:
    """Verifies bearer tokens. One per process, built from settings at start-up."""

    def __init__(self, settings: CommonSettings):
        self._settings = settings
        self._verified: dict[str, tuple[Principal, float]] = {}
        self._jwks: jwt.PyJWKClient | None = None
        self._key: object
        if settings.jwt_jwks_url:
            self._jwks = jwt.PyJWKClient(settings.jwt_jwks_url, cache_keys=True)
            self._algs = ["RS256"]
        elif settings.jwt_public_key_file:
            self._key = Path(settings.jwt_public_key_file).read_text()
            self._algs = ["RS256"]
        else:
            self._key = dev_secret(settings)
            self._algs = ["HS256"]
        # The key this deployment's page tokens are signed with (`server.ServiceInterceptor` hands it to
        # services.common.pages when the server is built: auth itself never imports pages).
        self.page_token_key = page_token_key(settings)

    def authenticate(self, authorization: str | None) -> Principal:
        """Principal for an `authorization` header value; Unauthenticated when absent or invalid."""
        if not authorization:
            raise Unauthenticated("missing authorization metadata (expected 'Bearer <jwt>')")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("authorization must be 'Bearer <jwt>'")
        token = token.strip()
        hit = self._verified.get(token)
        if hit is not None and time.time() < hit[1]:
            return hit[0]
        try:
            key = self._jwks.get_signing_key_from_jwt(token).key if self._jwks else self._key
            claims = jwt.decode(
                token,
                key,  # type: ignore[arg-type]
                algorithms=self._algs,
                audience=self._settings.jwt_audience or None,
                issuer=self._settings.jwt_issuer or None,
                leeway=self._settings.jwt_leeway_s,
                options={"require": ["sub", "exp"], "verify_aud": bool(self._settings.jwt_audience)},
            )
        except jwt.PyJWTError as e:
            # The library's reason is for whoever runs the service, at DEBUG (never the token); the
            # client gets a fixed sentence per kind of failure.
            log.debug("bearer token refused: %s: %s", type(e).__name__, clip(str(e)))
            raise Unauthenticated(_refusal(e)) from None
        sub = str(claims.get("sub", ""))
        if not sub:
            raise Unauthenticated("token has an empty sub")
        if len(sub) > MAX_SUB_CHARS or UNSAFE_IN_LABEL.search(sub):
            # The sub is every row's owner: a NUL, a bidi override or a key too long for the owner
            # indexes would fail later, mid-write, as INTERNAL (or, past NoteTurnsRemoved's bound,
            # leave a turn's removal undeliverable).
            raise Unauthenticated(f"token's sub must be at most {MAX_SUB_CHARS} characters, with no control or "
                                  "bidi formatting characters")
        scope = claims.get("scope", "")
        scopes = frozenset(scope.split() if isinstance(scope, str) else scope)
        principal = Principal(sub=sub, scopes=scopes, token=token)
        if len(self._verified) >= TOKEN_CACHE_MAX:
            self._verified.clear()
        self._verified[token] = (principal, float(claims["exp"]) + self._settings.jwt_leeway_s)
        return principal


class ServiceToken:
    """A service's own bearer token for calls to another service: `static` when configured, else an
    HS256 token for `sub` with `scopes` minted from the dev secret and re-minted a minute before its
    hour runs out; '' under RS256/JWKS without a configured token (nothing can be minted)."""

    def __init__(self, settings: CommonSettings, static: str, sub: str, scopes: tuple[str, ...]):
        self._static = static
        self._secret = None if (settings.jwt_jwks_url or settings.jwt_public_key_file) else dev_secret(settings)
        self._sub, self._scopes = sub, scopes
        self._token, self._exp = "", 0.0

    def __call__(self) -> str:
        if self._static or self._secret is None:
            return self._static
        if time.time() > self._exp - 60:
            self._token, self._exp = mint_token(self._secret, self._sub, self._scopes, 3600), time.time() + 3600
        return self._token
