"""Channel options shared by every gRPC channel a service opens (to another service, to the collector),
and the keepalive policy its servers accept."""

# Reconnect backoff of every channel one service opens to another (gRPC's defaults: 1 s first, up to
# 120 s): after a dependency comes back the next attempt is at most 1 s away, so the first call after
# its return succeeds within about 1 s (gRPC connection-backoff.md; channel args of grpc_types.h).
# Keepalive pings every 2 s, 2 s to answer, with or without calls: a connection to a host that vanished
# (its link cut: no RST, no FIN, calls hang) is closed within ≈ 4 s, its calls fail UNAVAILABLE and
# round_robin sends the next ones to the other replicas (without them the connection looks READY until
# TCP gives up, about 15 minutes; measured in tests/multihost).
RECONNECT_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 2000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]

# Server side of the same policy: accept a ping every 0.5 s even without calls (gRPC's default answers
# pings more often than every 5 minutes with GOAWAY too_many_pings), so the clients above and Envoy's
# upstream keepalive (1 s, deploy/envoy/envoy.yaml.tmpl) keep their connections.
SERVER_KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 500),
    ("grpc.http2.max_ping_strikes", 0),
]
