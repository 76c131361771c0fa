"""Ids from os.urandom read a pool at a time (`ids.random_bytes`): resource ids are UUID4s, trace and
span ids are never 0 and never repeat, seeding `random` changes nothing, a refill hands out no byte
twice and a forked child never hands out its parent's bytes."""
from __future__ import annotations

import os
import random
import uuid

from services.common import ids
from services.common.ids import RANDOM_POOL_BYTES, new_id, random_bytes
from services.common.telemetry import SystemRandomIdGenerator


def test_a_resource_id_is_a_uuid4_in_32_lowercase_hex_characters():
    got = [new_id() for _ in range(5000)]
    assert len(set(got)) == len(got)
    for i in got:
        u = uuid.UUID(i)
        assert ids.HEX32.match(i) and u.hex == i and u.version == 4 and u.variant == uuid.RFC_4122


def test_trace_and_span_ids_do_not_follow_a_seeded_random_nor_repeat():
    g = SystemRandomIdGenerator()
    runs = []
    for _ in range(2):
        random.seed(7)
        runs.append(([g.generate_trace_id() for _ in range(2000)], [g.generate_span_id() for _ in range(2000)]))
    traces = runs[0][0] + runs[1][0]
    spans = runs[0][1] + runs[1][1]
    assert len(set(traces)) == len(traces) and len(set(spans)) == len(spans)
    assert all(0 < t < 2**128 for t in traces) and all(0 < s < 2**64 for s in spans)
    assert max(traces).bit_length() > 120 and max(spans).bit_length() > 56  # the whole width is used


def test_the_pool_refills_without_handing_out_a_byte_twice(monkeypatch):
    reads = []

    def urandom(n):
        reads.append(n)
        return bytes([len(reads)]) * n

    monkeypatch.setattr(ids, "_random_pool", b"")
    monkeypatch.setattr(ids, "_random_pos", 0)
    monkeypatch.setattr(ids.os, "urandom", urandom)
    got = [random_bytes(16) for _ in range(RANDOM_POOL_BYTES // 16 + 1)]
    assert reads == [RANDOM_POOL_BYTES, RANDOM_POOL_BYTES]
    assert got[-2] == bytes([1]) * 16 and got[-1] == bytes([2]) * 16  # the first pool used up whole, then the next
    partial = random_bytes(RANDOM_POOL_BYTES - 8)  # does not fit what is left: a new pool, from its start
    assert partial == bytes([3]) * (RANDOM_POOL_BYTES - 8) and len(reads) == 3


def test_a_forked_child_does_not_hand_out_its_parents_bytes():
    random_bytes(16)  # the parent's pool is filled
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the next 64 bytes it would hand out
        os.write(w, random_bytes(64))
        os._exit(0)
    os.close(w)
    child = os.read(r, 64)
    os.close(r)
    os.waitpid(pid, 0)
    assert len(child) == 64 and child != random_bytes(64)
