"""OTLP/HTTP receivers: `POST /v1/traces` and `POST /v1/logs` (default port 4318), aiohttp. Logs: only the
`gen_ai.evaluation.result` events are kept (logs.py); every other record is answered 200, not stored.

Per the OTLP specification (opentelemetry-proto `docs/specification.md`, "OTLP/HTTP"):
- Bodies: `application/x-protobuf` (binary ExportTraceServiceRequest / ExportLogsServiceRequest) or
  `application/json` (OTLP/JSON: lowerCamelCase keys, trace/span ids as case-insensitive hex, enums as integers,
  64-bit integers as strings or numbers, unknown fields ignored). The response uses the request's
  Content-Type. Other types → 415.
- `Content-Encoding: gzip` (or deflate) is decompressed here, not by aiohttp (its parser refused `br`
  and `zstd` itself with a plain-text 400 before any handler ran): run the app with `app_runner`. The
  body limit (default 20 MiB) applies before and after decompression → 413 Content Too Large (the
  client must not retry). Another coding (`br`, `zstd`, `compress`, …) → 415 Unsupported Media Type
  (RFC 9110 §15.5.16); a body that is not in the coding it claims → 400.
- Another path → 404, another method on it → 405 (Allow: POST), each with a google.rpc.Status; a
  request refused before a handler ran (broken encoding, malformed request) is one incident in the
  log, not a traceback per request (README "Logs").
- With `otlp_bearer_tokens` set (ingest_auth.py), an export without `Authorization: Bearer <an accepted
  token>` → 401 + `WWW-Authenticate: Bearer` + google.rpc.Status (UNAUTHENTICATED), its body read and dropped (never decoded),
  before any other check; nothing is stored (the client must not retry).
- 200 + ExportTraceServiceResponse (with `partial_success` when spans were rejected) or
  ExportLogsServiceResponse (`rejected_log_records`: evaluation events that can never become ratings);
  400 + google.rpc.Status when the body cannot be decoded; 503 + `Retry-After` (seconds) when the
  write queue is full or storage failed (retryable). Error bodies are google.rpc.Status in the
  request's encoding.
"""
from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import re
import zlib

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from services.common.clip import MESSAGE_MAX_CHARS, clip, clip_message
from services.common.errors import http_status, to_status
from services.common.incidents import INCIDENTS
from services.tracecollector import ingest_auth
from services.tracecollector.ingest import Ingestor
from services.tracecollector.logs import LogsIngestor
from services.tracecollector.writer import Overloaded
from services.common.depfail import is_database_down
from services.tracecollector.otlp_grpc import export_response, failure, logs_response

log = logging.getLogger(__name__)

PATH = "/v1/traces"
LOGS_PATH = "/v1/logs"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")
# An id that is not valid hex becomes this (1 byte): the span is then rejected by validation
# (partial success) instead of failing the whole request.
_BAD_ID = base64.b64encode(b"\xff").decode()
# Content-Encodings decoded here (decode_body); aiohttp's own decoding is off (app_runner).
_ENCODINGS = frozenset({"gzip", "x-gzip", "deflate", "identity"})
# Compressed bodies up to this size are decoded on the event loop, larger ones in a worker thread.
_INLINE_DECODE_BYTES = 64 * 1024


# Incident key of requests refused before they reached a handler (see _ClientErrorsAsWarnings).
CLIENT_ERRORS = "OTLP_HTTP_CLIENT_ERROR"


class _ClientErrorsAsWarnings(logging.Filter):
    """aiohttp answers a request its parser refuses (a malformed request line or header, broken chunked
    framing) itself and logs an ERROR with a traceback per request: the client's mistake, not ours, and
    anyone could flood the log with it. Each becomes a failure of one incident (CLIENT_ERRORS,
    services/common/incidents.py): the first a WARNING line, the next ones counted in a summary line
    every 10 s. The line keeps aiohttp's own words and drops what it quotes of the request (a header
    over the line limit is quoted from its start: an Authorization header's bearer token)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError | RequestPayloadError):
            INCIDENTS.failure(CLIENT_ERRORS, f"OTLP/HTTP request refused: {refusal_words(exc)}")
            return False
        return True


def refusal_words(exc: Exception) -> str:
    """What the log says of a request aiohttp's parser refused: its status and aiohttp's own words, cut
    before the first quote or colon (after which aiohttp quotes the request's bytes), clipped."""
    message = getattr(exc, "message", None) or str(exc)
    words = re.split(r"[:'\"`]", " ".join(str(message).split()), maxsplit=1)[0].strip()
    code = getattr(exc, "code", None)
    return clip(f"{code} {words}" if code else words or type(exc).__name__, 120)


logging.getLogger("aiohttp.server").addFilter(_ClientErrorsAsWarnings())


def _ids_to_base64(obj: dict) -> None:
    for k in _ID_KEYS:
        v = obj.get(k)
        if isinstance(v, str):
            try:
                obj[k] = base64.b64encode(bytes.fromhex(v)).decode()
            except ValueError:
                obj[k] = _BAD_ID


def _objects(parent: dict, *keys: str) -> list[dict]:
    """The JSON objects in the list `parent[key]` (first key present), skipping anything else."""
    for k in keys:
        v = parent.get(k)
        if v is not None:
            return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []
    return []


def _json_document(body: bytes, message: str) -> dict:
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"body is not JSON: {e}") from None
    except RecursionError:
        raise ValueError("body is not OTLP/JSON: nested too deeply") from None
    if not isinstance(doc, dict):
        raise ValueError(f"body must be a JSON object ({message})")  # noqa: TRY004 - bad data → 400
    return doc


def _parse_dict(doc: dict, msg: Message) -> Message:
    try:
        json_format.ParseDict(doc, msg, ignore_unknown_fields=True)
    except (json_format.ParseError, RecursionError) as e:
        # ParseDict stops at 100 nested messages (ParseError); RecursionError is the backstop.
        # protobuf's ParseError quotes the offending value whole (`... must be in [] which is <value>`):
        # a 1 MiB string there would come back in the 400 and in the log line, so it is clipped.
        raise ValueError(f"body is not an OTLP/JSON {msg.DESCRIPTOR.name}: {clip(e, MESSAGE_MAX_CHARS)}") from None
    return msg


def parse_json_request(body: bytes) -> trace_service_pb2.ExportTraceServiceRequest:
    """An OTLP/JSON body as ExportTraceServiceRequest; ValueError when it is not OTLP/JSON."""
    doc = _json_document(body, "ExportTraceServiceRequest")
    # Ids are hex in OTLP/JSON, base64 in the protobuf JSON mapping: convert before parsing.
    # Wrongly shaped parts are left to ParseDict, which reports them.
    for rs in _objects(doc, "resourceSpans", "resource_spans"):
        for ss in _objects(rs, "scopeSpans", "scope_spans"):
            for sp in _objects(ss, "spans"):
                _ids_to_base64(sp)
                for ln in _objects(sp, "links"):
                    _ids_to_base64(ln)
    return _parse_dict(doc, trace_service_pb2.ExportTraceServiceRequest())


def parse_json_logs_request(body: bytes) -> logs_service_pb2.ExportLogsServiceRequest:
    """An OTLP/JSON body as ExportLogsServiceRequest (ids hex as for spans); ValueError when it is not."""
    doc = _json_document(body, "ExportLogsServiceRequest")
    for rl in _objects(doc, "resourceLogs", "resource_logs"):
        for sl in _objects(rl, "scopeLogs", "scope_logs"):
            for lr in _objects(sl, "logRecords", "log_records"):
                _ids_to_base64(lr)
    return _parse_dict(doc, logs_service_pb2.ExportLogsServiceRequest())


class BodyTooLarge(ValueError):
    """The decoded body exceeds the limit (→ 413)."""


def _inflate(body: bytes, coding: str, limit: int) -> bytes:
    """`body` in one gzip/deflate coding, decoded to at most `limit` bytes: BodyTooLarge beyond it,
    ValueError when it is not in that coding (broken or truncated). gzip may hold several members
    (RFC 1952 §2.2); deflate is zlib-wrapped (RFC 9110 §8.4.1.2) or, as some clients send it, raw."""
    gz = coding in ("gzip", "x-gzip")
    out = bytearray()
    rest = body
    while rest:
        wbits = 16 + zlib.MAX_WBITS if gz else (zlib.MAX_WBITS if rest[0] & 0x0F == 8 else -zlib.MAX_WBITS)
        d = zlib.decompressobj(wbits)
        try:
            out += d.decompress(rest, limit + 1 - len(out))
        except zlib.error as e:
            raise ValueError(f"request body is not {coding}: {e}") from None
        if len(out) > limit:
            raise BodyTooLarge(f"request body exceeds {limit} bytes after decompression")
        if not d.eof:
            raise ValueError(f"request body is not {coding}: it ends before its compressed stream does")
        rest = d.unused_data if gz else b""
    return bytes(out)


def decode_body(body: bytes, codings: list[str], limit: int) -> bytes:
    """`body` with its Content-Encoding `codings` (in the order applied, each in _ENCODINGS) undone."""
    for coding in reversed(codings):
        if coding != "identity" and body:
            body = _inflate(body, coding, limit)
    return body


def app_runner(app: web.Application, **kw) -> web.AppRunner:
    """The runner `create_app`'s application needs: aiohttp's request decompression off (the handlers
    decode, answer an unknown coding 415 and bound the decoded size)."""
    return web.AppRunner(app, auto_decompress=False, **kw)


def _encode(msg: Message, content_type: str) -> bytes:
    if content_type == JSON:
        return json_format.MessageToJson(msg, indent=None).encode()
    return msg.SerializeToString()


def _error(http: int | None, st: status_pb2.Status, content_type: str, headers: dict | None = None) -> web.Response:
    """The answer carrying `st`; its HTTP status from the one gRPC→HTTP table (`errors.http_status`)
    unless `http` names an HTTP-only one (415 media type, 413 body too large). Its message is bounded
    (`clip_message`) as `to_status` bounds a gRPC one: no client value comes back unbounded."""
    if len(st.message) > MESSAGE_MAX_CHARS:
        st.message = clip_message(st.message)
    return web.Response(status=http or http_status(st.code), body=_encode(st, content_type), content_type=content_type,
                        headers=headers)


async def _drop_body(request: web.Request) -> bool:
    """Read the request's body and drop it (aiohttp would otherwise read it after the answer, and a broken
    one logged a traceback per request); False when it cannot be read (the answer must close the connection)."""
    try:
        await request.read()
    except (RequestPayloadError, web.HTTPRequestEntityTooLarge, ConnectionResetError):
        request.content.feed_eof()
        return False
    return True


async def _unauthenticated(request: web.Request, reason: str, reply_type: str, signal: str,
                           on_refused: ingest_auth.RefusalHook | None) -> web.Response:
    """401 + `WWW-Authenticate: Bearer` (RFC 6750 §3) + google.rpc.Status in `reply_type`; the body read and dropped, never decoded."""
    readable = await _drop_body(request)
    ingest_auth.report(on_refused, "http", signal, reason, request.remote or "-")
    challenge = 'Bearer error="invalid_token"' if reason == ingest_auth.INVALID else "Bearer"
    resp = _error(401, ingest_auth.unauthenticated(reason), reply_type, headers={"WWW-Authenticate": challenge})
    if not readable:
        resp.force_close()
    return resp


def create_app(ingestor: Ingestor, *, max_body_bytes: int, retry_after_s: float,
               logs: LogsIngestor | None = None, tokens: ingest_auth.IngestTokens | None = None,
               on_refused: ingest_auth.RefusalHook | None = None) -> web.Application:
    """The aiohttp application serving POST /v1/traces (and POST /v1/logs with `logs`). With `tokens`,
    an export without an accepted `Authorization: Bearer` is 401 (ingest_auth.py), `on_refused` told."""

    def handler(decode_protobuf, decode_json, ingest, respond, what: str, signal: str):
        async def export(request: web.Request) -> web.Response:
            ctype = request.content_type
            reply_type = JSON if ctype == JSON else PROTOBUF
            if tokens is not None and (reason := tokens.refusal(request.headers.get("Authorization"))) is not None:
                return await _unauthenticated(request, reason, reply_type, signal, on_refused)
            if ctype not in (PROTOBUF, JSON):
                st = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT,
                                       message=f"Content-Type must be {PROTOBUF} or {JSON}, got {clip(ctype)!r}")
                return _error(415, st, PROTOBUF)
            coding = ",".join(request.headers.getall("Content-Encoding", ()))
            codings = [e.strip().lower() for e in coding.split(",") if e.strip()]
            if not set(codings) <= _ENCODINGS:
                # Unknown codings would otherwise be read as if the body were not encoded (RFC 9110 §8.4: 415).
                st = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT,
                                       message=f"Content-Encoding must be gzip, deflate or identity: {clip(coding)!r}")
                return _error(415, st, reply_type)
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                st = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED,
                                       message=f"request body exceeds {max_body_bytes} bytes")
                return _error(413, st, reply_type)
            except (RequestPayloadError, ConnectionResetError) as e:
                # A chunked body whose framing is broken, or a client gone before its body ended (a
                # Content-Length it never sent): its own doing, not ours, so no ERROR with a traceback
                # per connection (aiohttp's answer to a handler's exception).
                st = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT,
                                       message=f"request body cannot be read: {clip(str(e).strip())}")
                # The rest of the body cannot be read either: mark it read (aiohttp would otherwise try
                # to drain it after the answer and log the same failure), answer, close the connection.
                request.content.feed_eof()
                resp = _error(None, st, reply_type)
                resp.force_close()
                return resp
            try:
                if len(body) <= _INLINE_DECODE_BYTES:
                    body = decode_body(body, codings, max_body_bytes)
                else:
                    body = await asyncio.to_thread(decode_body, body, codings, max_body_bytes)
            except BodyTooLarge as e:
                return _error(413, status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=str(e)), reply_type)
            except ValueError as e:
                return _error(None, status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=str(e)), reply_type)
            try:
                req = decode_json(body) if ctype == JSON else decode_protobuf(body)
            except (ValueError, DecodeError) as e:
                return _error(None, status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=str(e)), reply_type)
            try:
                result = await ingest(req)
            except Exception as e:
                if not isinstance(e, Overloaded) and not is_database_down(e) and not (
                        e.__cause__ is not None and is_database_down(e.__cause__)):
                    log.exception("OTLP/HTTP export not stored")  # (a database outage is counted as an incident)
                err = failure(e, retry_after_s, what)
                delay = str(max(1, math.ceil(err.retry_after_s or retry_after_s)))
                return _error(None, to_status(err), reply_type, headers={"Retry-After": delay})
            return web.Response(status=200, body=_encode(respond(result), reply_type), content_type=reply_type)

        return export

    async def elsewhere(request: web.Request) -> web.Response:
        """Any other path or method: 404 / 405 with a google.rpc.Status, the body read and dropped
        first (aiohttp would otherwise read it after the answer, and a broken one logged a traceback
        per request); a body that cannot be read closes the connection."""
        unreadable = not await _drop_body(request)
        wrong_method = request.path in paths
        st = status_pb2.Status(code=code_pb2.UNIMPLEMENTED if wrong_method else code_pb2.NOT_FOUND,
                               message=f"only POST {request.path} is served here" if wrong_method else
                               f"no such path: {clip(request.path)}; OTLP/HTTP is POST {' or '.join(paths)}")
        resp = _error(405 if wrong_method else 404, st, PROTOBUF, headers={"Allow": "POST"} if wrong_method else None)
        if unreadable:
            resp.force_close()
        return resp

    app = web.Application(client_max_size=max_body_bytes)
    app.router.add_post(PATH, handler(trace_service_pb2.ExportTraceServiceRequest.FromString, parse_json_request,
                                      ingestor.export, export_response, "spans", "traces"))
    paths = [PATH]
    if logs is not None:
        app.router.add_post(LOGS_PATH, handler(logs_service_pb2.ExportLogsServiceRequest.FromString,
                                               parse_json_logs_request, logs.export, logs_response, "evaluations", "logs"))
        paths.append(LOGS_PATH)
    app.router.add_route("*", "/{tail:.*}", elsewhere)
    return app
