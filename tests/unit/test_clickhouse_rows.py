"""The ClickHouse store's row encoding (clickhouse_rows): the one-pass attribute map gives what the
exporter's AsString and ingest's text policy give, and the Arrow batch stores U+0000 as U+FFFD in every
text column, nested ones included."""
from __future__ import annotations

import orjson
import pyarrow as pa
import pytest
from opentelemetry.proto.common.v1 import common_pb2

from services.tracecollector.clickhouse_rows import COLUMNS, SCHEMA, split_attributes, string_map
from services.tracecollector.ingest import attributes_dict, to_json
from tests.helpers.otlp import kv

CASES = [
    [kv("s", "x"), kv("i", 42), kv("zero", 0), kv("big", 2**60), kv("b", True), kv("f", False), kv("d", 0.25),
     kv("e", ""), kv("by", b"\x01\x02"), kv("a", ["x", 1, 2.5]), kv("o", {"k": [True]})],
    # A repeated key keeps its last value, whichever kinds the two have.
    [kv("k", 1), kv("k", "now a string")],
    [kv("k", "a string"), kv("k", 7)],
    [kv("k", 1), kv("k", "")],
    [common_pb2.KeyValue(key="none")],  # an empty AnyValue
    # NUL inside an array / kvlist: stored as U+FFFD, as ingest.to_json makes it for PostgreSQL.
    [kv("a", ["ok\x00bad"]), kv("o", {"k\x00": "v\x00"})],
]


@pytest.mark.parametrize("kvs", CASES)
def test_string_map_is_as_string_of_the_cleaned_attributes(kvs):
    strings, typed = string_map(kvs)
    want_strings, want_typed = split_attributes(orjson.loads(to_json(attributes_dict(kvs))))
    # Plain strings keep their NUL here (the batch cleans whole columns); nothing in these cases has one.
    assert strings == want_strings
    assert (typed or {}) == want_typed


def _payload_rows(rows):
    from services.tracecollector.clickhouse_rows import arrow_payload

    return pa.ipc.open_stream(arrow_payload(rows)).read_all()


def test_the_arrow_batch_stores_nul_as_the_replacement_character_in_every_text_column():
    m = {"k\x00": "v\x00", "plain": "x"}
    row = (1, "ab" * 16, "cd" * 8, "", "ts\x00", "name\x00", "Server", "svc", m, "scope", "", m, 5, "Ok", "msg\x00",
           [2], ["ev\x00"], [m], ["ab" * 16], ["cd" * 8], ["st\x00"], [m], "")
    clean = {"k\ufffd": "v\ufffd", "plain": "x"}
    t = _payload_rows([row, row])
    assert t.schema == SCHEMA
    got = {c: t.column(c).to_pylist()[1] for c in COLUMNS}
    assert got["TraceState"] == "ts\ufffd" and got["SpanName"] == "name\ufffd" and got["StatusMessage"] == "msg\ufffd"
    assert dict(got["ResourceAttributes"]) == clean and dict(got["SpanAttributes"]) == clean
    assert got["Events.Name"] == ["ev\ufffd"] and [dict(x) for x in got["Events.Attributes"]] == [clean]
    assert got["Links.TraceState"] == ["st\ufffd"] and [dict(x) for x in got["Links.Attributes"]] == [clean]


def test_rows_sharing_a_resource_map_each_carry_it():
    res_a, res_b = {"service.name": "a"}, {"service.name": "b", "x": "1"}
    base = (1, "ab" * 16, "cd" * 8, "", "", "n", "Server", "svc", None, "scope", "", {}, 5, "Ok", "",
            [], [], [], [], [], [], [], "")
    rows = [base[:8] + (r,) + base[9:] for r in (res_a, res_a, res_b, res_a)]
    t = _payload_rows(rows)
    assert [dict(x) for x in t.column("ResourceAttributes").to_pylist()] == [res_a, res_a, res_b, res_a]
