"""Opt-in bearer-token authentication of OTLP ingest, as the OpenTelemetry Collector's `bearertokenauth`
extension does it on a receiver: with `otlp_bearer_tokens` set, an Export (OTLP/gRPC `TraceService` and
`LogsService` on 4317, OTLP/HTTP `POST /v1/traces` and `/v1/logs` on 4318) must carry
`authorization: Bearer <token>` — what every OTLP exporter sends when `OTEL_EXPORTER_OTLP_HEADERS` (or
`OTEL_EXPORTER_OTLP_TRACES_HEADERS`) is `authorization=Bearer%20<token>`. Several tokens are accepted at
once so one can be rotated out without downtime (deploy/README.md "OTLP ingest authentication").

- The token is compared with every configured one in constant time (`hmac.compare_digest`, no early
  exit), and never logged, echoed or put in a metric label.
- Refused before anything of the request is decoded or stored: gRPC answers UNAUTHENTICATED (16) from
  `TokenInterceptor`, ahead of the request's deserialisation; OTLP/HTTP answers 401 +
  `WWW-Authenticate: Bearer` (otlp_http.py).
- Each refusal is counted (`on_refused(transport, signal, reason)`: `agentfeedback.collector.ingest.
  unauthenticated`, reason `missing` | `invalid`) and logged as one incident (`OTLP_UNAUTHENTICATED`: the
  first refusal with the peer's address, then counts), not a line per Export.
"""
from __future__ import annotations

import hmac
import re
import time
from collections.abc import Callable, Iterable, Mapping

import grpc
from google.rpc import status_pb2
from grpc_status import rpc_status

from services.common.errors import Unauthenticated, to_status
from services.common.incidents import INCIDENTS

# Why an Export was refused (the metric's `reason` label: two values).
MISSING = "missing"  # no authorization, or not the Bearer scheme
INVALID = "invalid"  # a bearer token that is none of the configured ones
INCIDENT = "OTLP_UNAUTHENTICATED"
# RFC 6750 §2.1 b64token: what fits an authorization header as it is (and OTEL_EXPORTER_OTLP_HEADERS).
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
TOKEN_MIN_CHARS = 16
TOKEN_MAX_CHARS = 4096

MESSAGES = {
    MISSING: "this collector requires 'authorization: Bearer <token>' on OTLP exports "
             "(exporters: OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20<token>)",
    INVALID: "the bearer token is not one this collector accepts",
}

RefusalHook = Callable[[str, str, str], None]


def split_tokens(raw: str) -> tuple[str, ...]:
    """The comma-separated tokens of `raw` (blanks around them and empty entries dropped); ValueError
    naming a malformed one by its position, never by its value."""
    tokens = tuple(t.strip() for t in raw.split(",") if t.strip())
    for i, t in enumerate(tokens, 1):
        if not TOKEN_MIN_CHARS <= len(t) <= TOKEN_MAX_CHARS or not _TOKEN.fullmatch(t):
            raise ValueError(f"token {i} of {len(tokens)} must be {TOKEN_MIN_CHARS} to {TOKEN_MAX_CHARS} characters "
                             "of A-Z a-z 0-9 - . _ ~ + / (then optional '='), e.g. `openssl rand -hex 32`")
    return tokens


class IngestTokens:
    """The bearer tokens OTLP ingest accepts."""

    def __init__(self, tokens: Iterable[str]):
        self._tokens = tuple(t.encode() for t in tokens)
        if not self._tokens:
            raise ValueError("IngestTokens needs at least one token (none: leave ingest without it)")

    def refusal(self, authorization: str | None) -> str | None:
        """None when `authorization` (the header's value) is `Bearer <one of the tokens>`, else why not:
        MISSING or INVALID. Every token is compared, in constant time."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return MISSING
        given = token.strip().encode("utf-8", "replace")
        ok = False
        for t in self._tokens:
            ok |= hmac.compare_digest(t, given)
        return None if ok else INVALID


def report(on_refused: RefusalHook | None, transport: str, signal: str, reason: str, peer: str) -> None:
    """Count one refused Export and log it as part of the `OTLP_UNAUTHENTICATED` incident."""
    if on_refused is not None:
        on_refused(transport, signal, reason)
    INCIDENTS.failure(INCIDENT, f"OTLP/{transport} {signal} export refused: {reason} bearer token (peer {peer})")


def _authorization(metadata) -> str | None:
    for item in metadata or ():
        key, value = item[0], item[1]
        if key == "authorization":
            return value if isinstance(value, str) else None
    return None


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Gates the unary methods of `signals` (full-method prefix → signal name, e.g. traces): a call whose
    metadata carries no accepted bearer token is UNAUTHENTICATED, its request never deserialised and the
    service's handler never run. Other methods (health, reflection) pass untouched. Decides per method
    once (GrpcServer runs the chain at start) and per call inside the handler it returns. `record(method,
    code, duration_s)` (optional): the RPC metrics' recorder, told of each refusal."""

    def __init__(self, tokens: IngestTokens, signals: Mapping[str, str], on_refused: RefusalHook | None = None,
                 record: Callable[[str, int, float], None] | None = None):
        self._tokens = tokens
        self._signals = dict(signals)
        self._on_refused = on_refused
        self._record = record

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[override]
        """The handler of the later interceptors, behind the token check when its method is gated."""
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        signal = next((s for p, s in self._signals.items() if method.startswith(p)), None)
        if handler is None or signal is None or not handler.unary_unary:
            return handler
        return self._gate(method, signal, handler)

    def _gate(self, method: str, signal: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        inner, decode = handler.unary_unary, handler.request_deserializer
        denials = {reason: rpc_status.to_status(unauthenticated(reason)) for reason in MESSAGES}

        async def checked(raw: bytes, context: grpc.aio.ServicerContext):
            reason = self._tokens.refusal(_authorization(context.invocation_metadata()))
            if reason is None:
                return await inner(decode(raw) if decode is not None else raw, context)
            t0 = time.perf_counter()
            report(self._on_refused, "grpc", signal, reason, context.peer())
            if self._record is not None:
                self._record(method, grpc.StatusCode.UNAUTHENTICATED.value[0], time.perf_counter() - t0)
            await context.abort_with_status(denials[reason])

        # No request_deserializer here: the body reaches `checked` as bytes and is parsed only once the
        # token is accepted (with the service's own deserializer, as before).
        return grpc.unary_unary_rpc_method_handler(checked, response_serializer=handler.response_serializer)


def unauthenticated(reason: str) -> status_pb2.Status:
    """The google.rpc.Status (UNAUTHENTICATED, with ErrorInfo) a refusal for `reason` answers; no token in it."""
    return to_status(Unauthenticated(MESSAGES[reason]))
