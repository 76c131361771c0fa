"""gRPC's own retry policy for the calls that are safe to repeat (service config `retryPolicy`,
gRFC A6: https://github.com/grpc/proposal/blob/master/A6-client-retries.md), used by every channel a
service opens to another and by the client tools (CLI, MCP) — no retry loops of our own.

What is retried: UNAVAILABLE only (the server could not be reached, or said so; RESOURCE_EXHAUSTED and
DEADLINE_EXCEEDED are left to the caller), at most 4 attempts, backoff 0.2 s × 2ⁿ up to 2 s with
gRPC's jitter, and only for calls a repeat cannot duplicate: reads, CreateFeedback (its request_id is
required, so a repeat answers with the first report) and DeleteRating (deleting twice is deleting
once). SendMessage is not here: without a request_id a repeat would store the user message twice
(with one, a caller may retry it: services/chat/turn.py RETRYABLE_CODES).
A server's `grpc-retry-pushback-ms` trailer is honoured by gRPC itself; our RetryInfo detail is for
callers deciding on their own. Our servers send a negative pushback ("do not retry") with an
UNAVAILABLE answered after a dependency's whole timeout was waited out (`errors.Unavailable.waited`,
e.g. CreateFeedback with the chat service frozen): each attempt would wait it out again (4 attempts ×
2 s + backoff = 9.4 s). Envoy's route retries do not read it; the same answer carries
`x-envoy-ratelimited`, which they do (`errors.NO_RETRY_PUSHBACK`).
"""
from __future__ import annotations

import json

RETRY_POLICY = {
    "maxAttempts": 4,
    "initialBackoff": "0.2s",
    "maxBackoff": "2s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}

# gRFC A6 retry throttling, per channel: every failed attempt costs a token, every success gives back
# 0.1, and retries stop while fewer than half of the 10 tokens are left. A dependency that is down
# (every attempt fails) therefore gets retried for the first few calls only; after that calls fail at
# once and callers with a fallback (feedback's client snapshot when chat is down) answer in
# milliseconds instead of waiting out 4 backed-off attempts each.
RETRY_THROTTLING = {"maxTokens": 10, "tokenRatio": 0.1}

_SAFE: dict[str, tuple[str, ...] | None] = {
    "agentfeedback.traces.v1.TraceQueryService": None,  # every method reads
    "agentfeedback.chat.v1.ChatService": ("GetInstance", "ListInstances", "GetMessage", "ListMessages",
                                          "ListSuspectedDefects", "GetSuspectedDefect"),
    "agentfeedback.feedback.v1.FeedbackService": ("CreateFeedback", "GetFeedback", "ListFeedback", "ListRatings",
                                                  "DeleteRating", "GetFeedbackStats", "ListRecentFeedback",
                                                  "GetTurnFeedback", "ListAuditRecords", "CountConversationFeedback"),
}


def safe_methods() -> dict[str, tuple[str, ...] | None]:
    """Full service name → the methods safe to repeat (None: every method); the gateway's retries
    (services/cli/envoy.py) follow the same table."""
    return dict(_SAFE)


def service_config(round_robin: bool = True) -> str:
    """The gRPC service config JSON: `round_robin` balancing (service-to-service channels) and the
    retry policy above for the safe methods."""
    names = []
    for service, methods in _SAFE.items():
        names += [{"service": service}] if methods is None else [{"service": service, "method": m} for m in methods]
    cfg: dict = {"methodConfig": [{"name": names, "retryPolicy": RETRY_POLICY}],
                 "retryThrottling": RETRY_THROTTLING}
    if round_robin:
        cfg["loadBalancingConfig"] = [{"round_robin": {}}]
    return json.dumps(cfg)
