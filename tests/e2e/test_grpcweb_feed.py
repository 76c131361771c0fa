"""The change feed through Envoy over gRPC-web (how the console would watch it): the stream opens with
a heartbeat, carries an event written meanwhile, and heartbeats keep it open past Envoy's stream idle
timeout (set to 2 s here; 300 s in deploy/)."""
from __future__ import annotations

import asyncio
import base64
import struct
import time
import uuid

import httpx
from agentfeedback.feedback.v1 import feedback_pb2 as pb

from services.cli.envoy import GatewayPorts, start_envoy
from services.common.auth import SCOPE_FEEDBACK_READ
from tests.helpers.grpcweb import ALLOWED_ORIGIN, FEEDBACK, TRAILERS, frame
from tests.helpers.feedback import new_instance, send
from tests.stack import start_stack


async def _frames(resp: httpx.Response):
    """The gRPC-web text stream's frames as they arrive: (flag, payload)."""
    buf, pending = b"", b""
    async for chunk in resp.aiter_bytes():
        pending += chunk
        cut = len(pending) - len(pending) % 4
        buf, pending = buf + base64.b64decode(pending[:cut]), pending[cut:]
        while len(buf) >= 5 and len(buf) >= 5 + struct.unpack(">I", buf[1:5])[0]:
            n = struct.unpack(">I", buf[1:5])[0]
            yield buf[0], buf[5:5 + n]
            buf = buf[5 + n:]


async def test_watch_feedback_over_grpc_web_stays_open_on_heartbeats_and_carries_events(database_url, tmp_path):
    stack = await start_stack(database_url, tmp_path, feedback={"feed_heartbeat_s": 0.5})
    ports = GatewayPorts(gateway=0, chat=stack.ports["chat"], feedback=stack.ports["feedback"],
                         traces=stack.ports["query"])
    envoy = await asyncio.to_thread(start_envoy, ports, (ALLOWED_ORIGIN,), config_dir=tmp_path / "envoy",
                                    stream_idle_timeout_s=2)
    try:
        inst = await new_instance(stack)
        t = await send(stack, inst, "hello")
        headers = {"content-type": "application/grpc-web-text", "accept": "application/grpc-web-text",
                   "x-grpc-web": "1", "origin": ALLOWED_ORIGIN,
                   "authorization": f"Bearer {stack.token('alice', (SCOPE_FEEDBACK_READ,))}"}
        body = base64.b64encode(frame(pb.WatchFeedbackRequest().SerializeToString()))
        got: list[pb.WatchFeedbackResponse] = []
        t0 = time.monotonic()
        async with httpx.AsyncClient(timeout=10) as client, client.stream(
                "POST", envoy.url + FEEDBACK + "WatchFeedback", content=body, headers=headers) as resp:
            assert resp.status_code == 200
            async for flag, payload in _frames(resp):
                assert not flag & TRAILERS, f"the stream ended: {payload!r}"
                got.append(pb.WatchFeedbackResponse.FromString(payload))
                if len(got) == 2:  # open and idle for a heartbeat: now a change
                    await stack.feedback().PutRating(pb.PutRatingRequest(rating=pb.Rating(
                        conversation=inst, turn_index=t.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE,
                        aspect="reaction", sentiment=pb.RATING_SENTIMENT_POSITIVE), request_id=str(uuid.uuid4())),
                        metadata=stack.md())
                if time.monotonic() - t0 > 3.5:  # well past Envoy's 2 s idle timeout
                    break
        events = [m for m in got if m.HasField("event")]
        assert len(events) == 1 and events[0].event.type == pb.FEEDBACK_EVENT_TYPE_CREATED
        assert events[0].event.rating.sentiment == pb.RATING_SENTIMENT_POSITIVE
        beats = [m for m in got if m.HasField("heartbeat_time")]
        assert len(beats) >= 5 and all(b.resume_token for b in beats)
    finally:
        await asyncio.to_thread(envoy.stop)
        await stack.stop()
