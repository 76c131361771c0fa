"""gRPC server wiring shared by every service: auth + error interceptor, health, reflection, lifecycle.

`GrpcServer` is built by each service's `create_server(...)`; tests bind port 0 and read `.port`.
Lifecycle on stop: health NOT_SERVING → `server.stop(grace)` (in-flight RPCs finish) → the
service's own `on_stop` callbacks (pool close, telemetry flush), in that order.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from google.protobuf.message import DecodeError
from grpc_status import rpc_status
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from services.common import deadlines, pages, span_pipe
from services.common.auth import Authenticator, reset_current_principal, set_current_principal
from services.common.missing_request import MissingRequestInterceptor
from services.common.depfail import conflict_error, dependency_error
from services.common.errors import (
    DomainError,
    InvalidArgument,
    Unimplemented,
    internal_status,
    pushback_trailers,
    to_status,
)
from services.common.health import DependencyWatch, postgres_probe
from services.common.incidents import INCIDENTS
from services.common.metrics import RpcMetrics, status_code_of
from services.common.reconnect import RECONNECT_OPTIONS, SERVER_KEEPALIVE_OPTIONS
from services.common.retry_policy import service_config
from services.common.telemetry import REQUEST_TRACE_ID, record_exception, w3c_context

log = logging.getLogger(__name__)

# Methods that need no token: health, reflection, and whatever a service adds (e.g. OTLP Export).
ALWAYS_PUBLIC_PREFIXES = ("/grpc.health.", "/grpc.reflection.")

# 4 MiB, gRPC's default, stated explicitly (docs/architecture.md "Spans": the 4 MiB gRPC limit).
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024

# Every channel one service opens to another balances `round_robin` over every address the target
# resolves to (a headless Kubernetes Service resolves to every ready pod), so the calls spread over the
# replicas instead of gRPC's default `pick_first` sending all of them to the first address; and retries
# the calls safe to repeat (services/common/retry_policy.py). Format: gRPC service config
# (https://github.com/grpc/grpc/blob/master/doc/service_config.md).

# Servers close a connection after this long (GOAWAY; RPCs in flight finish, `grace` below), so clients
# reconnect and re-resolve DNS: replicas added by an autoscaler start getting calls within this time.
# gRPC proposal A9 (server-side connection management) names this as the remedy for DNS-based balancing.
MAX_CONNECTION_AGE_MS = 5 * 60 * 1000
# The health service name Kubernetes liveness probes ask for: SERVING while the process serves, whatever
# its dependencies (readiness asks for "", which follows the database): no restarts during a DB failover.
LIVENESS_SERVICE = "agentfeedback.liveness"
MAX_CONNECTION_AGE_GRACE_MS = 60 * 1000


def client_channel(target: str) -> grpc.aio.Channel:
    """The channel a service opens to another service (`host:port`, `dns:///host:port`, or any gRPC
    target; plaintext: in-cluster traffic), balancing calls round-robin over the target's addresses,
    retrying the calls safe to repeat on UNAVAILABLE (`services.common.retry_policy`) and reconnecting
    within 1 s of the target's return (`RECONNECT_OPTIONS`)."""
    return grpc.aio.insecure_channel(target, options=[("grpc.service_config", service_config(round_robin=True)),
                                                      *RECONNECT_OPTIONS])


class _MetadataGetter:
    @staticmethod
    def get(carrier: dict[str, str], key: str) -> list[str] | None:
        v = carrier.get(key)
        return [v] if v is not None else None

    @staticmethod
    def keys(carrier: dict[str, str]) -> list[str]:
        return list(carrier)


def metadata_dict(context: grpc.aio.ServicerContext) -> dict[str, str]:
    """Invocation metadata as a dict (text values only; last value wins)."""
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def extract_context(context: grpc.aio.ServicerContext) -> otel_context.Context:
    """The caller's W3C trace context from gRPC metadata (empty context when none)."""
    return _extract(metadata_dict(context))


# (the global propagator, the headers it reads): its `fields` builds a new set on every read (1.4 µs a call).
_textmap_fields: tuple[object, frozenset[str]] = (None, frozenset())


def _extract(md: dict[str, str]) -> otel_context.Context:
    """`propagate.extract` of `md`; without any header the propagators read (`traceparent`, …) that is
    the empty Context, returned without running them (most internal calls carry none)."""
    global _textmap_fields
    textmap = propagate.get_global_textmap()
    if _textmap_fields[0] is not textmap:  # the first call, or set_global_textmap since
        _textmap_fields = (textmap, frozenset(textmap.fields))
    if _textmap_fields[1].isdisjoint(md):
        return otel_context.Context()
    fast = w3c_context(md)
    if fast is not None:
        return fast
    return textmap.extract(md, getter=_MetadataGetter())  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Undecodable:
    """Stands in for a request whose bytes did not parse; the wrapped handler answers INVALID_ARGUMENT
    (without this, gRPC Python answers UNKNOWN "Unexpected DecodeError")."""

    type_name: str
    error: str


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None
    type_name = getattr(getattr(deserializer, "__self__", None), "__name__", "request")

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except DecodeError as e:
            return _Undecodable(type_name, str(e)[:200])

    return deserialize


class ServiceInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates, checks the method's scope, opens a SERVER span, and maps errors — in one place.

    `method_scopes`: full method name (`/pkg.Service/Method`) → required scope, or None for
    "authenticated, any scope". Methods under `public_prefixes` need no token. Methods in
    `untraced` get no server span (the chat turn starts its own trace; the collector never traces
    its own Export). `metrics` (optional) records every call's duration and status code.
    A dependency failure (`services.common.depfail`) is UNAVAILABLE + RetryInfo + ErrorInfo naming
    the dependency, logged once per incident; any other unexpected error is INTERNAL with the trace id.
    """

    def __init__(
        self,
        authenticator: Authenticator | None,
        method_scopes: dict[str, str | None],
        tracer: trace.Tracer,
        public_prefixes: Iterable[str] = (),
        untraced: Iterable[str] = (),
        metrics: RpcMetrics | None = None,
    ):
        self._metrics = metrics
        self._auth = authenticator
        if authenticator is not None:  # every server is built with one: the place page tokens get their key
            pages.set_key(authenticator.page_token_key)
        self._scopes = method_scopes
        self._tracer = tracer
        self._public = tuple(ALWAYS_PUBLIC_PREFIXES) + tuple(public_prefixes)
        self._untraced = frozenset(untraced)
        # method → (the service's handler, our wrapped handler): built once per method, not per call.
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[override]
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None:
            return handler
        if method.startswith(ALWAYS_PUBLIC_PREFIXES) and not handler.unary_unary:
            # Health Watch / reflection stream with context.write: leave them exactly as grpcio serves them.
            return handler
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = handler
        deserializer = _tolerant(handler.request_deserializer)
        if handler.unary_unary:
            wrapped = grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(method, handler.unary_unary),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        elif handler.unary_stream:
            wrapped = grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(method, handler.unary_stream),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _plan(self, method: str) -> _MethodPlan:
        """What every call of `method` needs decided (once per method: `_wrap_unary`, `_wrap_stream`)."""
        span_name, attributes = _span_naming(method)
        return _MethodPlan(method=method, authenticate=self._auth is not None and not method.startswith(self._public),
                           mapped=method in self._scopes, scope=self._scopes.get(method),
                           traced=not (method in self._untraced or method.startswith(ALWAYS_PUBLIC_PREFIXES)),
                           span_name=span_name, attributes=attributes)

    def _authenticate(self, plan: _MethodPlan, md: dict[str, str], request: Any) -> None:
        """Token + scope (not for public methods), then the request must have decoded."""
        if plan.authenticate:
            self._check_token(plan, md)
        if isinstance(request, _Undecodable):
            raise InvalidArgument("request", f"is not a valid {request.type_name} protobuf message ({request.error})",
                                  reason="UNDECODABLE_REQUEST")

    def _check_token(self, plan: _MethodPlan, md: dict[str, str]) -> None:
        principal = self._auth.authenticate(md.get("authorization"))
        if not plan.mapped:
            # Fail closed: a method nobody mapped is not callable.
            raise Unimplemented(f"{plan.method} is not enabled", reason="UNMAPPED_METHOD")
        if plan.scope is not None:
            principal.require(plan.scope)
        set_current_principal(principal)

    def _start_span(self, plan: _MethodPlan, md: dict[str, str]):
        if not plan.traced:  # untraced methods and probes
            return None
        # The span pipe's own span when it alone exports them (span_pipe.start_span; else the SDK's).
        return span_pipe.start_span(self._tracer, plan.span_name, context=_extract(md), kind=SpanKind.SERVER,
                                    attributes=plan.attributes)

    def _status(self, err: BaseException, method: str, span):
        """The google.rpc.Status an exception answers (see the class docstring), with its logging."""
        trace_id = format(span.get_span_context().trace_id, "032x") if span is not None else "-"
        expected = isinstance(err, DomainError)  # a bad request, NOT_FOUND, …: logged below, one line
        if not expected and (mapped := dependency_error(err)) is not None:
            own = span
            if span is None and not method.startswith(self._public):
                # An untraced method (the chat turn mints its own trace) failed before it made one:
                # a SERVER span of its own, so the UNAVAILABLE still names a trace id.
                own = self._tracer.start_span(method.lstrip("/"), kind=SpanKind.SERVER)
                own.set_status(Status(StatusCode.ERROR, mapped.reason))
                own.end()
            if own is not None:
                trace_id = format(own.get_span_context().trace_id, "032x")
                REQUEST_TRACE_ID.set(trace_id)
                mapped = dependency_error(err, trace_id=trace_id)
            if mapped is not None:
                INCIDENTS.failure(mapped.reason, f"{method}: {type(err).__name__} (trace_id {trace_id})", err)
                err = mapped
        if not isinstance(err, DomainError) and (conflict := conflict_error(err)) is not None:
            log.warning("%s: %s rolled back (trace_id %s)", method, type(err).__name__, trace_id)
            err = conflict
        elif expected and err.code == grpc.StatusCode.UNAVAILABLE:  # type: ignore[attr-defined]
            # A refusal while something is down or full (the collector's write queue, a dependency a
            # handler mapped itself) comes in floods: counted in its incident, not a line per call.
            INCIDENTS.failure(err.reason, f"{method}: UNAVAILABLE (trace_id {trace_id})")  # type: ignore[attr-defined]
        elif expected:  # one line, no client values (a dependency outage is counted by INCIDENTS instead)
            log.info("%s: %s %s", method, err.code.name, err.reason)  # type: ignore[attr-defined]
        if isinstance(err, DomainError):
            st = to_status(err)
            if span is not None:
                span.set_attribute("rpc.grpc.status_code", st.code)
                if err.code not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT,
                                    grpc.StatusCode.ABORTED, grpc.StatusCode.PERMISSION_DENIED,
                                    grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.FAILED_PRECONDITION):
                    span.set_status(Status(StatusCode.ERROR, err.reason))
            return st
        log.exception("unhandled error in RPC (trace_id %s)", trace_id, exc_info=err)
        if span is not None:
            record_exception(span, err)
            span.set_status(Status(StatusCode.ERROR, type(err).__name__))
        return internal_status(trace_id)

    def _record(self, method: str, code: int | None, t0: float, context) -> None:
        if self._metrics is not None:
            self._metrics.record(method, status_code_of(context) if code is None else code, time.perf_counter() - t0)

    async def _abort(self, err: Exception, call: _CallScope) -> None:
        """End the call with the status `err` maps to (recorded for the metrics)."""
        st = self._status(err, call.method, call.span)
        call.code = st.code
        status = rpc_status.to_status(st)
        if extra := pushback_trailers(err):
            await call.context.abort(status.code, status.details, (*status.trailing_metadata, *extra))
        else:
            await call.context.abort_with_status(status)

    def _open(self, plan: _MethodPlan, request, context):
        """Authenticate (and check the method's scope), then start the server span (None: untraced)."""
        md = metadata_dict(context)
        self._authenticate(plan, md, request)
        span = self._start_span(plan, md)
        if span is not None:
            REQUEST_TRACE_ID.set(format(span.get_span_context().trace_id, "032x"))
        return span

    def _wrap_unary(self, method: str, behavior: Callable[..., Awaitable[Any]]):
        plan = self._plan(method)

        async def wrapped(request, context):
            call = _CallScope(context, method, self._record)
            try:
                try:
                    span = call.span = self._open(plan, request, context)
                    if span is None:
                        out = await behavior(request, context)
                    else:
                        # The span current while the handler runs. Not `trace.use_span`: its generator-based
                        # context manager costs more than the attach itself, and errors are recorded once,
                        # clipped, by _status (not by the SDK, in full, per call).
                        ctx_token = otel_context.attach(trace.set_span_in_context(span))
                        try:
                            out = await behavior(request, context)
                        finally:
                            otel_context.detach(ctx_token)
                    call.code = 0
                    return out
                except asyncio.CancelledError:
                    call.code = grpc.StatusCode.CANCELLED.value[0]
                    raise
                except grpc.aio.AbortError:
                    raise
                except Exception as err:  # noqa: BLE001 - the one place unknown errors become INTERNAL
                    await self._abort(err, call)
            finally:
                call.close()

        return wrapped

    def _wrap_stream(self, method: str, behavior: Callable[..., Any]):
        plan = self._plan(method)

        async def wrapped(request, context):
            call = _CallScope(context, method, self._record)
            try:
                try:
                    span = call.span = self._open(plan, request, context)
                    ctx_token = otel_context.attach(trace.set_span_in_context(span)) if span else None
                    try:
                        async for item in behavior(request, context):
                            yield item
                    except GeneratorExit:
                        # The client left: grpc closes this generator from another context, where
                        # this call's context variables cannot be reset (their context goes with it).
                        call.closed_elsewhere, ctx_token = True, None
                        raise
                    finally:
                        if ctx_token is not None:
                            otel_context.detach(ctx_token)
                    call.code = 0
                except (asyncio.CancelledError, GeneratorExit):
                    call.code = grpc.StatusCode.CANCELLED.value[0]
                    raise
                except grpc.aio.AbortError:
                    raise
                except Exception as err:  # noqa: BLE001
                    await self._abort(err, call)
            finally:
                call.close()

        return wrapped


class _CallScope:
    """What the interceptor sets up for one RPC and undoes when it ends: no caller yet (set by the
    token check), the RPC's deadline (`services.common.deadlines`), the server span once started, and
    the status code and duration reported to `record(method, code, t0, context)` at the end."""

    def __init__(self, context: grpc.aio.ServicerContext, method: str, record: Callable[..., None]):
        self.context, self.method, self._record = context, method, record
        self.t0, self.code = time.perf_counter(), None
        self._principal = set_current_principal(None)
        self._deadline = deadlines.enter(context)
        self._trace_id = REQUEST_TRACE_ID.set(None)  # log lines of this RPC name its trace
        self.span = None
        # A server stream the client left is closed by grpc from another context (see _wrap_stream).
        self.closed_elsewhere = False

    def close(self) -> None:
        if self.span is not None:
            self.span.end()
        if not self.closed_elsewhere:
            deadlines.leave(self._deadline)
            REQUEST_TRACE_ID.reset(self._trace_id)
            reset_current_principal(self._principal)
        self._record(self.method, self.code, self.t0, self.context)


@dataclass(frozen=True)
class _MethodPlan:
    """ServiceInterceptor's decisions for one method, made when its handler is wrapped: whether a call
    needs a token (not a public method), whether the method is mapped and to which scope (None: any),
    whether it gets a server span, and that span's name and attributes."""

    method: str
    authenticate: bool
    mapped: bool
    scope: str | None
    traced: bool
    span_name: str
    attributes: dict[str, str]


def _span_naming(method: str) -> tuple[str, dict[str, str]]:
    """SERVER span name and attributes of a full method name `/pkg.Service/Method` (OpenTelemetry RPC
    conventions: `rpc.system`, `rpc.service`, `rpc.method`)."""
    service, _, name = method.lstrip("/").rpartition("/")
    return method.lstrip("/"), {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}


@dataclass(frozen=True)
class _MethodDetails:
    """The `grpc.HandlerCallDetails` an interceptor's intercept_service gets when start() resolves a method."""

    method: str
    invocation_metadata: tuple = ()


async def _intercepted(chain: tuple[grpc.aio.ServerInterceptor, ...], method: str,
                       handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """What `chain` makes of `method`'s `handler` (as grpc.aio runs server interceptors, first to last,
    the last continuation answering `handler`); a method an interceptor refuses (None) is not served."""
    details = _MethodDetails(method)

    async def run(i: int, call_details: Any) -> grpc.RpcMethodHandler | None:
        if i == len(chain):
            return handler
        return await chain[i].intercept_service(functools.partial(run, i + 1), call_details)

    resolved = await run(0, details)
    if resolved is None:  # no interceptor of ours refuses a method; one that did would mean UNIMPLEMENTED
        raise ValueError(f"an interceptor refused {method}")
    return resolved


class _Registrations:
    """Takes the handlers a generated `add_*Servicer_to_server(servicer, server)` registers, for
    GrpcServer.start() to serve through its interceptors: by service, method name → handler."""

    def __init__(self) -> None:
        self.services: dict[str, dict[str, grpc.RpcMethodHandler]] = {}

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.services.setdefault(service, {}).update(handlers)

    def add_generic_rpc_handlers(self, generic_handlers: Iterable[Any]) -> None:
        # Generated code adds each service both ways (the registered handlers win in grpc.aio's lookup);
        # an older generator (the OTLP services) only this way, as a grpc.method_handlers_generic_handler.
        for g in generic_handlers:
            by_method = getattr(g, "_method_handlers", None)
            if not isinstance(by_method, dict):
                raise TypeError(f"GrpcServer serves the methods it can list, not {type(g).__name__}")
            for full, handler in by_method.items():
                service, _, name = full.lstrip("/").rpartition("/")
                self.services.setdefault(service, {}).setdefault(name, handler)


class GrpcServer:
    """A grpc.aio server with health + reflection and an ordered shutdown.

    `add(register, servicer, service_full_name)` registers a servicer; `start(address)` binds
    (port 0 = any free port) and marks every service SERVING; `stop()` drains.
    """

    def __init__(
        self,
        interceptors: list[grpc.aio.ServerInterceptor],
        grace_s: float = 10.0,
        drain_delay_s: float = 0.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        extra_options: list[tuple[str, Any]] | None = None,
    ):
        options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.so_reuseport", 0),
            ("grpc.max_connection_age_ms", MAX_CONNECTION_AGE_MS),
            ("grpc.max_connection_age_grace_ms", MAX_CONNECTION_AGE_GRACE_MS),
            *SERVER_KEEPALIVE_OPTIONS,
            *(extra_options or []),
        ]
        # First: a unary call whose client sent no request is INTERNAL at once (grpc.aio would hang it).
        # The chain is not grpc.aio's `interceptors=`: those run every interceptor's intercept_service
        # (a coroutine each, and the handler lookup) on every call. Each decides by method alone, so
        # start() runs the chain once per method and registers what it returns (`_Registrations`).
        self._chain: tuple[grpc.aio.ServerInterceptor, ...] = (MissingRequestInterceptor(), *interceptors)
        self.server = grpc.aio.server(options=options)
        self._registrations = _Registrations()
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._registrations)
        self._services: list[str] = [reflection.SERVICE_NAME, health.SERVICE_NAME]
        self._grace_s = grace_s
        self._drain_delay_s = drain_delay_s
        self._on_stop: list[Callable[[], Awaitable[None]]] = []
        # Called when stop() begins, before the drain delay (e.g. ending server streams that never end).
        self.on_drain: list[Callable[[], None]] = []
        self._watch: DependencyWatch | None = None
        # The service's `services.common.metrics.ServiceMetrics` (its Prometheus port: `.metrics.port`).
        self.metrics: Any = None
        self.ports: dict[str, int] = {}
        self.port: int = 0

    @property
    def services(self) -> list[str]:
        """Full names of the services served here (health is set for each, and for "")."""
        return list(self._services)

    def watch_database(self, url: str, also: Iterable[Any] = ()) -> DependencyWatch:
        """Health follows PostgreSQL at `url` from `start()` on (`services.common.health`); `also`: other
        servers of this process whose health follows it too. Stopped first by `stop()`."""
        self._watch = DependencyWatch([self, *also], postgres_probe(url),
                                      meter=self.metrics.meter if self.metrics is not None else None)
        return self._watch

    def watch(self, watch: DependencyWatch) -> DependencyWatch:
        """Health follows `watch` (another dependency than PostgreSQL) from `start()` on; stopped first by `stop()`."""
        self._watch = watch
        return watch

    def add(self, register: Callable[[Any, Any], None], servicer: Any, service_full_name: str) -> None:
        """`register(servicer, server)` (a generated `add_*Servicer_to_server`); served from start()."""
        register(servicer, self._registrations)
        self._services.append(service_full_name)

    def on_stop(self, cb: Callable[[], Awaitable[None]]) -> None:
        """Run `cb` after the server drained (in registration order)."""
        self._on_stop.append(cb)

    def bind(self, address: str, name: str = "main") -> int:
        port = self.server.add_insecure_port(address)
        if port == 0:
            raise OSError(f"cannot bind {address}")
        self.ports[name] = port
        if name == "main":
            self.port = port
        return port

    async def start(self) -> None:
        reflection_pb2_grpc.add_ServerReflectionServicer_to_server(reflection.aio.ReflectionServicer(self._services),
                                                                   self._registrations)
        for service, handlers in self._registrations.services.items():
            self.server.add_registered_method_handlers(service, {
                name: await _intercepted(self._chain, f"/{service}/{name}", handler)
                for name, handler in handlers.items()})
        await self.server.start()
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        for s in self._services:
            await self.health.set(s, health_pb2.HealthCheckResponse.SERVING)
        await self.health.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        if self._watch is not None:
            self._watch.start()

    async def stop(self, grace_s: float | None = None, drain_delay_s: float | None = None) -> None:
        """Health NOT_SERVING; keep serving for `drain_delay_s` (so load balancers and readiness
        probes see NOT_SERVING and stop sending); then refuse new RPCs and give in-flight ones
        `grace_s` seconds to finish; then the on_stop callbacks."""
        if self._watch is not None:
            await self._watch.stop()
        await self.health.enter_graceful_shutdown()
        for cb in self.on_drain:  # long-lived streams end now (their clients resume elsewhere)
            cb()
        delay = self._drain_delay_s if drain_delay_s is None else drain_delay_s
        if delay > 0:
            await asyncio.sleep(delay)
        await self.server.stop(self._grace_s if grace_s is None else grace_s)
        for cb in self._on_stop:
            try:
                await cb()
            except Exception:  # noqa: BLE001 - shutdown continues; the failure is logged
                log.exception("shutdown step failed")

    async def wait(self) -> None:
        await self.server.wait_for_termination()
