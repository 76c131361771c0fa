"""Attribute limits on what the collector stores (OpenTelemetry specification, "Attribute Limits" and the
SDK's span limits: AttributeValueLengthLimit, AttributeCountLimit, EventCountLimit, LinkCountLimit), so one client cannot store megabytes
in one attribute. Like the SDK, nothing is rejected: a span over a limit is stored within it.

- A string value longer than `value_length` characters is cut to that many (each string of an array or
  kvlist separately); a bytes value to that many bytes. Attribute keys and event names are cut to the
  same length (the specification bounds no key; ours are bounded by the value limit).
- Past `count` distinct keys per span, event or link, further attributes are dropped and added to that
  span's, event's or link's `dropped_attributes_count` (as the SDK counts them). The first `count`
  distinct keys are kept (a repeated key keeps its last value, as without limits). Resource attributes
  are exempt from the count, as the specification says, but not from the value length.
- Past `events` events or `links` links in one span (the SDK's EventCountLimit / LinkCountLimit, 128
  each by default), the first ones are kept in the order sent and the rest dropped and added to the
  span's `dropped_events_count` / `dropped_links_count` (the OTLP fields an SDK fills when its own
  limit drops some). Like the SDK's, the count bounds what one span can carry however small each
  event is: 10,000 tiny events are 10,000 rows of the span's JSON that GetTrace and every evidence
  copy carry.
- A span name is cut to `name_length` characters, and so is the service name column (service.name is
  in a btree index, whose entries hold at most 2704 bytes: 512 characters are at most 2048 bytes), and
  the instrumentation scope's name and version (`limit_scope`: stored with every span of the scope, so
  an unbounded one was one client string written once per span: a 1 MiB scope name on 200 spans stored
  200 MiB).
- A span's status message and trace state, and each link's trace state, are cut to `value_length`
  characters, as a string attribute is (they were the only client strings of a span stored whole).
- A resource's attributes, after their values are cut, keep at most `resource_bytes` in all
  (`limit_resource`): the resource is stored again with every one of its spans, and with no count limit
  (the specification exempts resources) 64 attributes of 16 KiB on 200 tiny spans (a 1.06 MB Export)
  grew the database by 207-218 MB (10.5 MB within this limit). `service.name` is always kept (the spans' service column and searches read it), then
  the others in the order sent while they fit; the first that does not fit and every later one are
  dropped and added to the resource's `dropped_attributes_count` (OTLP Resource's field, stored with
  each span as `resource_dropped_attributes_count`).

Spans are changed in place in the Export request, so the forwarded copy and the evaluations read from
it see the same limited span. `over` is the cheap test (no attribute walked), `apply` the slow path
taken by the few spans over a limit."""
from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.proto.common.v1 import common_pb2


# A resource's attributes keep at most this many encoded bytes in all (the sum of their OTLP KeyValue
# sizes). Our own services' resources are 239 bytes (the SDK's telemetry.sdk.*, service.name /
# namespace / instance.id); resource detectors (host, process command line, container, Kubernetes,
# cloud) add a few KiB. 64 KiB keeps any real resource whole, or three values at the 16 KiB value length
# limit, and bounds what every span row repeats: 64 KiB per span, where 64 values of 16 KiB were 1 MiB.
RESOURCE_ATTRIBUTES_BYTE_LIMIT = 64 * 1024
SERVICE_NAME = "service.name"


@dataclass(frozen=True)
class Limits:
    """The collector's limits (settings AGENTFEEDBACK_COLLECTOR_ATTRIBUTE_VALUE_LENGTH_LIMIT,
    _ATTRIBUTE_COUNT_LIMIT, _SPAN_NAME_LENGTH_LIMIT, _SPAN_EVENT_COUNT_LIMIT, _SPAN_LINK_COUNT_LIMIT,
    _RESOURCE_ATTRIBUTES_BYTE_LIMIT; docs/choices.md "Attribute limits"). Lengths in characters, counts
    per span (events, links) or per span, event or link (count), `resource_bytes` in encoded bytes of a
    resource's attributes (OTLP KeyValue sizes) in all."""

    value_length: int = 16 * 1024
    count: int = 128
    name_length: int = 512
    events: int = 128  # OpenTelemetry SpanLimits EventCountLimit's default
    links: int = 128  # LinkCountLimit's default
    resource_bytes: int = RESOURCE_ATTRIBUTES_BYTE_LIMIT


@dataclass
class Tally:
    """What the limits changed in one Export: values (and keys, names) cut, attributes dropped."""

    truncated: int = 0
    dropped: int = 0
    events_dropped: int = 0
    links_dropped: int = 0
    resource_dropped: int = 0

    def warning(self, limits: Limits) -> str:
        """The OTLP partial_success warning (rejected 0, a message: the specification's way to tell a
        client its data was accepted but changed); '' when nothing was."""
        parts = []
        if self.truncated:
            parts.append(f"{self.truncated} value(s) or name(s) truncated (attribute values and keys, status "
                         f"messages and trace states to {limits.value_length} characters, span and scope "
                         f"names to {limits.name_length})")
        if self.dropped:
            parts.append(f"{self.dropped} attribute(s) dropped past {limits.count} per span, event or link "
                         "(counted in dropped_attributes_count)")
        if self.events_dropped:
            parts.append(f"{self.events_dropped} event(s) dropped past {limits.events} per span "
                         "(counted in dropped_events_count)")
        if self.links_dropped:
            parts.append(f"{self.links_dropped} link(s) dropped past {limits.links} per span "
                         "(counted in dropped_links_count)")
        if self.resource_dropped:
            parts.append(f"{self.resource_dropped} resource attribute(s) dropped past {limits.resource_bytes} "
                         "bytes per resource (the first ones kept; counted in the resource's dropped_attributes_count)")
        return "accepted with attribute limits: " + "; ".join(parts) if parts else ""


def over(sp, limits: Limits) -> bool:
    """Whether span `sp` may exceed a limit (cheap: lengths and the span's encoded size, which bounds
    every string in it)."""
    count = limits.count
    if sp.ByteSize() > limits.value_length or len(sp.attributes) > count or len(sp.name) > limits.name_length:
        return True
    if len(sp.events) > limits.events or len(sp.links) > limits.links:
        return True
    if events := sp.events:
        for e in events:
            if len(e.attributes) > count:
                return True
    if links := sp.links:
        for ln in links:
            if len(ln.attributes) > count:
                return True
    return False


def apply(sp, limits: Limits, tally: Tally) -> None:
    """Span `sp` within `limits`, changed in place."""
    if len(sp.name) > limits.name_length:
        sp.name = sp.name[:limits.name_length]
        tally.truncated += 1
    n = limits.value_length
    if len(sp.status.message) > n:
        sp.status.message = sp.status.message[:n]
        tally.truncated += 1
    if len(sp.trace_state) > n:
        sp.trace_state = sp.trace_state[:n]
        tally.truncated += 1
    sp.dropped_attributes_count += limit_attributes(sp.attributes, limits, tally)
    if (extra := len(sp.events) - limits.events) > 0:
        del sp.events[limits.events:]  # the first ones kept, as sent
        sp.dropped_events_count += extra
        tally.events_dropped += extra
    if (extra := len(sp.links) - limits.links) > 0:
        del sp.links[limits.links:]
        sp.dropped_links_count += extra
        tally.links_dropped += extra
    for e in sp.events:
        if len(e.name) > limits.value_length:
            e.name = e.name[:limits.value_length]
            tally.truncated += 1
        e.dropped_attributes_count += limit_attributes(e.attributes, limits, tally)
    for ln in sp.links:
        if len(ln.trace_state) > n:
            ln.trace_state = ln.trace_state[:n]
            tally.truncated += 1
        ln.dropped_attributes_count += limit_attributes(ln.attributes, limits, tally)


def limit_scope(scope, limits: Limits, tally: Tally) -> None:
    """An InstrumentationScope's name and version within `name_length` (in place)."""
    n = limits.name_length
    if len(scope.name) > n:
        scope.name = scope.name[:n]
        tally.truncated += 1
    if len(scope.version) > n:
        scope.version = scope.version[:n]
        tally.truncated += 1


def limit_resource(resource, limits: Limits, tally: Tally) -> None:
    """An OTLP Resource's attributes within the value length (no count limit: the specification exempts
    them), then within `resource_bytes` in all (`limit_resource_bytes`), in place; what is dropped is
    added to its `dropped_attributes_count`. One ByteSize when the resource is within both (the common
    case)."""
    if resource.ByteSize() > min(limits.value_length, limits.resource_bytes):
        limit_attributes(resource.attributes, limits, tally, count=None)
        resource.dropped_attributes_count += limit_resource_bytes(resource.attributes, limits.resource_bytes, tally)


def limit_resource_bytes(kvs, budget: int, tally: Tally) -> int:
    """Repeated KeyValue `kvs` (a resource's) within `budget` bytes of encoded KeyValues in all, in place:
    `service.name` (its last value, the one stored) first, then the others in the order sent while they
    fit; the first that does not and all after it are dropped. Returns the distinct keys dropped (counted
    in `tally.resource_dropped`). `service.name` alone over `budget` (a `resource_bytes` set below the
    value length) is kept all the same."""
    sizes = [kv.ByteSize() for kv in kvs]
    if sum(sizes) <= budget:
        return 0
    names = [i for i, kv in enumerate(kvs) if kv.key == SERVICE_NAME]
    keep = set(names[-1:])
    used = sum(sizes[i] for i in keep)
    for i, size in enumerate(sizes):
        if i in keep:
            continue
        if used + size > budget:
            break
        used += size
        keep.add(i)
    kept_keys = {kvs[i].key for i in keep}
    dropped = len({kv.key for kv in kvs} - kept_keys)
    kept = []
    for i in sorted(keep):
        copy = common_pb2.KeyValue()
        copy.CopyFrom(kvs[i])
        kept.append(copy)
    del kvs[:]
    kvs.extend(kept)
    tally.resource_dropped += dropped
    return dropped


def limit_attributes(kvs, limits: Limits, tally: Tally, count: int | None = -1) -> int:
    """Repeated KeyValue `kvs` within `limits` (in place); returns how many were dropped."""
    count = limits.count if count == -1 else count
    dropped = 0
    if count is not None and len(kvs) > count:
        kept: set[str] = set()
        for kv in kvs:
            if kv.key not in kept and len(kept) < count:
                kept.add(kv.key)
        dropped = len({kv.key for kv in kvs}) - len(kept)
        if dropped:
            keep = []
            for kv in kvs:
                if kv.key in kept:
                    copy = common_pb2.KeyValue()
                    copy.CopyFrom(kv)
                    keep.append(copy)
            del kvs[:]
            kvs.extend(keep)
            tally.dropped += dropped
    n = limits.value_length
    for kv in kvs:
        if len(kv.key) > n:
            kv.key = kv.key[:n]
            tally.truncated += 1
        if kv.value.ByteSize() > n:
            _limit_value(kv.value, n, tally)
    return dropped


def _limit_value(v, n: int, tally: Tally) -> None:
    kind = v.WhichOneof("value")
    if kind == "string_value":
        if len(v.string_value) > n:
            v.string_value = v.string_value[:n]
            tally.truncated += 1
    elif kind == "bytes_value":
        if len(v.bytes_value) > n:
            v.bytes_value = v.bytes_value[:n]
            tally.truncated += 1
    elif kind == "array_value":
        for x in v.array_value.values:
            _limit_value(x, n, tally)
    elif kind == "kvlist_value":
        for kv in v.kvlist_value.values:
            if len(kv.key) > n:
                kv.key = kv.key[:n]
                tally.truncated += 1
            _limit_value(kv.value, n, tally)
