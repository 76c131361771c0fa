"""Hypothesis strategies for any protobuf request, built from its descriptor (no hand-written shapes):
every field optional, strings from a pool of hostile and plausible values (NUL, huge, emoji, other
owners' resource names, forged tokens), numbers at their boundaries, enums including unknown values,
nested messages two levels deep, repeated fields up to three items, maps, Timestamps of any range."""
from __future__ import annotations

from collections.abc import Sequence

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import strategies as st

_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)
_EDGE_INTS = [0, 1, -1, 2, 20, 100, 999, 1000, 1001, 2**31 - 1, -(2**31)]
HOSTILE = ["", " ", "\x00", "a\x00b", "x" * 7000, "😀" * 3000, "../../etc/passwd", "instances/", "instances/../x",
           "feedback/", "ratings/", "%00", "'; DROP TABLE feedback; --", "\ud7ff", "\u202e", "0" * 32, "f" * 32,
           "00000000-0000-0000-0000-000000000000", "not-a-uuid", "eyJ0IjoxfQ", "eyJ0IjoiOTk5OTk5LTEyLTMxIn0",
           "instances/a/messages/b", "status", "issue_url", "body", "rating.note", "*", "a" * 64]


def _strings(pool: Sequence[str]) -> st.SearchStrategy[str]:
    # Real names first (they reach the code behind validation), then hostile values, then any text.
    plausible = [st.sampled_from(list(pool))] if pool else []
    return st.one_of(*plausible, st.sampled_from(HOSTILE), st.text(max_size=40))


def _scalar(f: FieldDescriptor, pool: Sequence[str]) -> st.SearchStrategy:
    t = f.type
    if t == FieldDescriptor.TYPE_STRING:
        return _strings(pool)
    if t == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=32 if t == FieldDescriptor.TYPE_FLOAT else 64)
    if t == FieldDescriptor.TYPE_ENUM:
        return st.one_of(st.sampled_from([v.number for v in f.enum_type.values]), st.integers(*_I32))
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return st.integers(0, 2**32 - 1)
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return st.integers(0, 2**64 - 1)
    if t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
        return st.one_of(st.sampled_from(_EDGE_INTS), st.integers(*_I64))
    return st.one_of(st.sampled_from(_EDGE_INTS), st.integers(*_I32))


def _repeated(f: FieldDescriptor) -> bool:
    rep = getattr(f, "is_repeated", None)  # protobuf ≥ 6 (FieldDescriptor.label is gone)
    return bool(rep) if rep is not None else f.label == FieldDescriptor.LABEL_REPEATED


def _timestamp():
    return st.builds(lambda s, n: {"seconds": s, "nanos": n},
                     st.one_of(st.integers(-62135596800, 253402300799), st.integers(*_I64)),
                     st.integers(*_I32))


def message(desc: Descriptor, pool: Sequence[str] = (), depth: int = 0) -> st.SearchStrategy:
    """A strategy for messages of `desc` (instances of its generated class)."""
    cls = message_factory.GetMessageClass(desc)
    fields: dict[str, st.SearchStrategy] = {}
    for f in desc.fields:
        mt = f.message_type
        if mt is not None and mt.GetOptions().map_entry:
            key, val = mt.fields_by_name["key"], mt.fields_by_name["value"]
            if val.message_type is not None:
                continue
            fields[f.name] = st.dictionaries(_scalar(key, pool), _scalar(val, pool), max_size=3)
            continue
        if mt is not None:
            if mt.full_name == "google.protobuf.Timestamp":
                s = _timestamp()
            elif mt.full_name in ("google.protobuf.Struct", "google.protobuf.Value") or depth >= 2:
                continue
            else:
                s = message(mt, pool, depth + 1)
        else:
            s = _scalar(f, pool)
        repeated = _repeated(f)
        fields[f.name] = st.lists(s, max_size=3) if repeated else s

    def build(values: dict) -> object:
        m = cls()
        for name, v in values.items():
            f = desc.fields_by_name[name]
            try:
                if f.message_type is not None and f.message_type.GetOptions().map_entry:
                    getattr(m, name).update(v)
                elif _repeated(f):
                    target = getattr(m, name)
                    for item in v:
                        if isinstance(item, dict):
                            target.add(**item)
                        elif f.message_type is not None:
                            target.add().CopyFrom(item)
                        else:
                            target.append(item)
                elif f.message_type is not None:
                    if isinstance(v, dict):
                        getattr(m, name).MergeFrom(f.message_type._concrete_class(**v))
                    else:
                        getattr(m, name).CopyFrom(v)
                else:
                    setattr(m, name, v)
            except (ValueError, TypeError, OverflowError):
                pass  # a value the field's type cannot hold (e.g. a lone surrogate in a string)
        return m

    return st.fixed_dictionaries({}, optional=fields).map(build)
