"""Untrusted text made safe for a terminal: every CLI renderer prints owners' words, span names and
attributes through `for_terminal` (or `json_line`), so a report body or an OTLP span name cannot move
the cursor, clear the screen, set the window title (ECMA-48 C0/C1 controls, CSI, OSC) or reorder what
the reader sees (Unicode bidi controls, Trojan Source, CVE-2021-42574).

A control is shown escaped, as Python writes it: ESC as `\\x1b`, U+202E as `\\u202e`.
"""
from __future__ import annotations

import json
import re

# C0 (U+0000–U+001F), DEL, C1 (U+0080–U+009F); bidi embeddings/overrides/isolates and marks
# (U+200E/F, U+202A–U+202E, U+2066–U+2069, U+061C); BOM/zero-width no-break space; line and
# paragraph separators (terminals and editors break lines on them).
_UNSAFE = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff"
_PATTERNS: dict[str, re.Pattern[str]] = {}


def _escape(ch: str) -> str:
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def _pattern(keep: str) -> re.Pattern[str]:
    if keep not in _PATTERNS:
        _PATTERNS[keep] = re.compile(f"[{_UNSAFE}]" if not keep else f"(?![{re.escape(keep)}])[{_UNSAFE}]")
    return _PATTERNS[keep]


def for_terminal(text: object, *, keep: str = "") -> str:
    """`text` (str() of it) with every control escaped; `keep` names controls left as they are where the
    layout is ours (e.g. "\\n\\t" for a multi-line rendering whose lines the renderer built)."""
    return _pattern(keep).sub(lambda m: _escape(m.group()), str(text))


def json_line(obj: object) -> str:
    """One JSON line for a terminal: non-ASCII text stays readable, but controls JSON leaves raw (C1,
    bidi, separators) are written as \\uXXXX escapes, so the line is still valid JSON of the same value."""
    return _pattern("").sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(obj, ensure_ascii=False))


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """`n` and the noun in the number it takes: "1 row", "2 rows", "0 labelled turns"."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"
