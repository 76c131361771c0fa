"""The span spool's bounds (services/common/span_spool.py): what does not fit pushes the oldest
batches out and is counted, old batches age out, a restarted process finds whole batches only."""
from __future__ import annotations

import pickle

from services.common.span_spool import SpanSpool


def _batch(n: int, tag: str) -> list[tuple]:
    return [(tag, i, "x" * 100) for i in range(n)]


def test_a_full_spool_drops_the_oldest_batches_and_counts_their_spans(tmp_path):
    one = len(pickle.dumps(_batch(10, "a"), protocol=pickle.HIGHEST_PROTOCOL))
    spool = SpanSpool(tmp_path, max_bytes=one * 3 + 10)
    for tag in "abcd":
        spool.put(_batch(10, tag))
    assert spool.dropped == 10 and spool.spans == 30
    path, batch = spool.oldest()
    assert batch[0][0] == "b"  # "a" made room for "d"
    spool.remove(path)
    assert spool.spans == 20 and spool.dropped == 10
    spool.put([("huge", 0, "y" * (one * 4))])  # larger than the whole spool: dropped itself
    assert spool.dropped == 11 and spool.spans == 20


def test_a_restarted_process_finds_the_whole_batches_and_not_a_torn_write(tmp_path):
    SpanSpool(tmp_path).put(_batch(3, "kept"))
    (tmp_path / "00000000000000000001-1-1-3.tmp").write_bytes(b"cut short")
    again = SpanSpool(tmp_path)
    assert again.spans == 3
    _, batch = again.oldest()
    assert batch == _batch(3, "kept")
    assert not list(tmp_path.glob("*.tmp"))


def test_batches_older_than_the_age_bound_are_dropped_and_counted(tmp_path):
    spool = SpanSpool(tmp_path, max_age_s=0.0)
    spool.put(_batch(4, "old"))
    assert spool.oldest() is None
    assert spool.dropped == 4 and spool.spans == 0
