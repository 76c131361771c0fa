"""Channel options shared by every gRPC channel a service opens (to another service, to the collector)."""

# Reconnect backoff of every channel one service opens to another (gRPC's defaults: 1 s first, up to
# 120 s): after a dependency comes back the next attempt is at most 1 s away, so the first call after
# its return succeeds within about 1 s (gRPC connection-backoff.md; channel args of grpc_types.h).
RECONNECT_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
