"""`NamedSQL`: `:name` parameters become asyncpg's `$n` in first-use order, casts are left alone."""
from __future__ import annotations

import pytest

from services.common.db import NamedSQL


def test_names_are_numbered_in_first_use_order_and_reused():
    q = NamedSQL("SELECT * FROM t WHERE a = :a AND b = :b::smallint AND (:a = '' OR c = :c) AND d = '{}'::jsonb")
    assert q == "SELECT * FROM t WHERE a = $1 AND b = $2::smallint AND ($1 = '' OR c = $3) AND d = '{}'::jsonb"
    assert q.names == ("a", "b", "c")
    assert q.bind({"c": 3, "a": 1, "b": 2, "unused": 9}) == (q.text, 1, 2, 3)
    assert type(q.text) is str  # asyncpg accepts only an exact str


def test_a_missing_value_is_a_key_error_naming_it():
    with pytest.raises(KeyError, match="owner"):
        NamedSQL("DELETE FROM t WHERE owner = :owner").bind({})


def test_time_literals_and_json_keys_are_not_parameters():
    q = NamedSQL("""SELECT '12:30'::time, '{"unverified": true}'::jsonb, x::text FROM t WHERE y = :y""")
    assert q.names == ("y",) and "'12:30'" in q
