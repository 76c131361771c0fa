"""The feedback model's enums are the proto's: every member has the proto value of the same name and
number, and the proto has no value the model lacks (a new proto value fails here until the model has it)."""
from __future__ import annotations

import pytest

from agentfeedback.feedback.v1 import feedback_pb2 as pb
from services.feedback import domain
from services.feedback.model.enums import PROTO_ENUMS
from services.feedback.model.enums import TraceState, member


def _upper_snake(name: str) -> str:
    return "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(name)).upper()


@pytest.mark.parametrize("model_enum, proto_name", PROTO_ENUMS.items(), ids=[n for n in PROTO_ENUMS.values()])
def test_model_enum_numbers_are_the_protos(model_enum, proto_name):
    descriptor = pb.DESCRIPTOR.enum_types_by_name[proto_name]
    prefix = _upper_snake(proto_name)
    proto = {v.name: v.number for v in descriptor.values}
    model = {f"{prefix}_{m.name}": m.value for m in model_enum}
    assert model == proto


@pytest.mark.parametrize("model_enum", list(PROTO_ENUMS), ids=lambda e: e.__name__)
def test_member_is_the_enum_called_with_the_number(model_enum):
    for m in model_enum:
        assert member(model_enum, m.value) is model_enum(m.value) is m
    for unknown in (max(model_enum) + 1, 40000):  # refused, or (Category's `_missing_`) a pseudo-member
        try:
            expected = model_enum(unknown)
        except ValueError:
            with pytest.raises(ValueError):
                member(model_enum, unknown)
        else:
            got = member(model_enum, unknown)
            assert got == expected and got.name == expected.name


def test_every_enum_of_the_feedback_proto_has_a_model_enum():
    assert set(PROTO_ENUMS.values()) == set(pb.DESCRIPTOR.enum_types_by_name)


def test_the_rules_short_names_are_the_model_members():
    assert domain.TRACE_PENDING is TraceState.PENDING and domain.TRACE_NONE is TraceState.UNSPECIFIED
    assert domain.STATUS_FILED == pb.STATUS_FILED and domain.SOURCE_CLIENT == pb.SNAPSHOT_SOURCE_CLIENT


def test_an_unknown_category_filter_is_bound_to_page_tokens_on_every_python():
    """A newer client's category number (a pseudo-member UNKNOWN_<n>) survives copy and pickle, so a
    list call's filters can be bound to its page token (on Python 3.11.2 deepcopy went by name:
    ListRecentFeedback(category=23) answered INTERNAL)."""
    import copy  # noqa: PLC0415
    import pickle  # noqa: PLC0415

    from services.feedback import codec  # noqa: PLC0415
    from services.feedback.model.enums import Category

    assert copy.deepcopy(Category(23)) == 23 and pickle.loads(pickle.dumps(Category(23))) == 23
    assert codec.filters(codec.list_recent(pb.ListRecentFeedbackRequest(category=23))[0])["category"] == 23
