"""Datasets out (issue 24): `agentfeedback export dataset` over the real ExportDataset stream writes the
caller's labelled turns as JSONL that Hugging Face `datasets` loads (its `json` builder, offline), in the
OpenAI chat-messages shape, with every rating of the turn, the reports and their frozen tool calls;
filters and the resume token work; branch copies are not labels unless asked for."""
from __future__ import annotations

import json
import os
import uuid

import pytest
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb

from tests.helpers.cli import _cli
from tests.helpers.feedback import flag, new_instance, rid, send, wait_state

CAPTURED = pb.TRACE_SNAPSHOT_STATE_CAPTURED


async def _rate(stack, inst: str, turn: int, aspect: str, sentiment: int, mask=(), **kw) -> pb.Rating:
    req = pb.PutRatingRequest(rating=pb.Rating(
        conversation=inst, turn_index=turn, scope=pb.RATING_SCOPE_MESSAGE, aspect=aspect, sentiment=sentiment, **kw),
        request_id=rid())
    req.update_mask.paths.extend(mask)
    return await stack.feedback().PutRating(req, metadata=stack.md())


def _load(path):
    import datasets

    return datasets.load_dataset("json", data_files=str(path), split="train")


@pytest.fixture
def hf_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))


async def test_labelled_turns_export_as_jsonl_that_datasets_loads(stack, tmp_path, hf_offline):
    inst = await new_instance(stack)
    turns = [await send(stack, inst, f"question {i}") for i in range(3)]
    await _rate(stack, inst, turns[0].reply.turn_index, "accuracy", pb.RATING_SENTIMENT_POSITIVE, note="spot on")
    await _rate(stack, inst, turns[2].reply.turn_index, "accuracy", pb.RATING_SENTIMENT_NEGATIVE)
    await _rate(stack, inst, turns[2].reply.turn_index, "tone", pb.RATING_SENTIMENT_POSITIVE, choice="friendly",
                mask=("sentiment", "choice"))
    report = await flag(stack, turns[2].reply.name, "wrong answer", sentiment=pb.SENTIMENT_BAD)
    await stack.aflush_spans()
    frozen = await wait_state(stack, report.name, CAPTURED)
    # A fork of turn 0: its copy of the turn-0 rating is not a label.
    await stack.chat().ForkConversation(chat_pb2.ForkConversationRequest(
        parent=inst, turn_index=turns[0].reply.turn_index, request_id=str(uuid.uuid4())), metadata=stack.md())
    # Another owner's ratings never appear.
    bob = await new_instance(stack, "bob")
    bt = await send(stack, bob, "bob's question", sub="bob")
    await stack.feedback().PutRating(pb.PutRatingRequest(rating=pb.Rating(
        conversation=bob, turn_index=bt.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE, aspect="accuracy",
        sentiment=pb.RATING_SENTIMENT_NEGATIVE), request_id=rid()), metadata=stack.md("bob"))

    out = tmp_path / "all.jsonl"
    r = await _cli(stack, "export", "dataset", "-o", str(out))
    assert r.exit_code == 0, r.output
    rows = _load(out)
    assert rows.num_rows == 2
    first, last = rows[0], rows[1]
    assert first["messages"] == [{"role": "user", "content": "question 0"},
                                 {"role": "assistant", "content": turns[0].reply.content}]
    assert [m["content"] for m in last["messages"]] == [
        "question 0", turns[0].reply.content, "question 1", turns[1].reply.content, "question 2",
        turns[2].reply.content]
    assert last["messages"][-1]["role"] == "assistant" and last["trace_id"] == turns[2].trace_id
    assert [(x["aspect"], x["sentiment"], x["choice"]) for x in last["ratings"]] == [
        ("accuracy", "RATING_SENTIMENT_NEGATIVE", ""), ("tone", "RATING_SENTIMENT_POSITIVE", "friendly")]
    assert first["ratings"][0]["note"] == "spot on" and first["ratings"][0]["origin"] == "RATING_ORIGIN_USER"
    assert [x["body"] for x in last["reports"]] == ["wrong answer"]
    assert [c["name"] for c in last["tool_calls"]] == [c.name for c in frozen.trace_snapshot.tool_calls]

    # Filters: only negative ratings; with branch copies the fork's turn is a label too.
    neg = tmp_path / "neg.jsonl"
    assert (await _cli(stack, "export", "dataset", "-o", str(neg), "--sentiment", "negative")).exit_code == 0
    assert [x["turn_index"] for x in _load(neg)] == [turns[2].reply.turn_index]
    copies = tmp_path / "copies.jsonl"
    assert (await _cli(stack, "export", "dataset", "-o", str(copies), "--include-branch-copies")).exit_code == 0
    assert len(copies.read_text().splitlines()) == 3
    # A cut export resumes after its last line.
    token = json.loads(out.read_text().splitlines()[0])["resume_token"]
    rest = tmp_path / "rest.jsonl"
    assert (await _cli(stack, "export", "dataset", "-o", str(rest), "--resume-token", token)).exit_code == 0
    assert [json.loads(x)["turn_index"] for x in rest.read_text().splitlines()] == [turns[2].reply.turn_index]
    assert os.path.getsize(rest) > 0


async def test_preference_pairs_from_forks_equal_what_the_forks_and_ratings_imply(stack, tmp_path, hf_offline):
    inst = await new_instance(stack)
    t0 = await send(stack, inst, "first question")
    t1 = await send(stack, inst, "second question")
    await _rate(stack, inst, t0.reply.turn_index, "reaction", pb.RATING_SENTIMENT_POSITIVE)
    await _rate(stack, inst, t1.reply.turn_index, "reaction", pb.RATING_SENTIMENT_NEGATIVE)
    await _rate(stack, inst, t1.reply.turn_index, "tone", pb.RATING_SENTIMENT_POSITIVE)
    # Fork after turn 0 (its turn-0 rating is copied: a branch copy, never an opinion); the same question again.
    fork = (await stack.chat().ForkConversation(chat_pb2.ForkConversationRequest(
        parent=inst, turn_index=t0.reply.turn_index, request_id=str(uuid.uuid4())), metadata=stack.md())).instance.name
    f1 = await send(stack, fork, "second question")
    assert f1.reply.turn_index == t1.reply.turn_index
    await _rate(stack, fork, f1.reply.turn_index, "reaction", pb.RATING_SENTIMENT_POSITIVE)  # better here
    await _rate(stack, fork, f1.reply.turn_index, "tone", pb.RATING_SENTIMENT_POSITIVE)  # the same: no pair
    # A second fork asked something else and was rated worse on reaction.
    fork2 = (await stack.chat().ForkConversation(chat_pb2.ForkConversationRequest(
        parent=inst, turn_index=t0.reply.turn_index, request_id=str(uuid.uuid4())), metadata=stack.md())).instance.name
    g1 = await send(stack, fork2, "a different question")
    await _rate(stack, fork2, g1.reply.turn_index, "reaction", pb.RATING_SENTIMENT_NEGATIVE)  # same as source: none
    await _rate(stack, fork2, g1.reply.turn_index, "tone", pb.RATING_SENTIMENT_NEGATIVE)  # worse than source

    out = tmp_path / "pairs.jsonl"
    r = await _cli(stack, "export", "pairs", "-o", str(out))
    assert r.exit_code == 0, r.output
    rows = sorted(_load(out), key=lambda x: x["aspect"])
    prefix = [{"role": "user", "content": "first question"}, {"role": "assistant", "content": t0.reply.content}]
    assert rows == [
        {"prompt": prefix + [{"role": "user", "content": "second question"}],
         "chosen": [{"role": "assistant", "content": f1.reply.content}],
         "rejected": [{"role": "assistant", "content": t1.reply.content}],
         "aspect": "reaction", "chosen_conversation": fork, "rejected_conversation": inst,
         "turn_index": t1.reply.turn_index},
        {"prompt": prefix,
         "chosen": [{"role": "user", "content": "second question"}, {"role": "assistant", "content": t1.reply.content}],
         "rejected": [{"role": "user", "content": "a different question"},
                      {"role": "assistant", "content": g1.reply.content}],
         "aspect": "tone", "chosen_conversation": inst, "rejected_conversation": fork2,
         "turn_index": t1.reply.turn_index},
    ]
    only = tmp_path / "tone.jsonl"
    assert (await _cli(stack, "export", "pairs", "-o", str(only), "--aspect", "tone")).exit_code == 0
    assert [json.loads(x)["aspect"] for x in only.read_text().splitlines()] == ["tone"]


async def test_an_export_with_nothing_rated_creates_the_file_and_says_why_it_is_empty(stack, tmp_path):
    """Right after the demo (a report, no rating): the file exists, empty, and the CLI says only rated
    turns are exported; counts take the right number ("1 row")."""
    inst = await new_instance(stack, "fay")
    turn = await send(stack, inst, "a question", sub="fay")
    await flag(stack, turn.reply.name, "wrong", sub="fay")
    out = tmp_path / "none.jsonl"
    r = await _cli(stack, "export", "dataset", "-o", str(out), sub="fay")
    assert r.exit_code == 0, r.output
    assert out.exists() and out.read_text() == ""
    assert "exported 0 labelled turns" in r.output and "only rated turns are exported" in r.output
    pairs = tmp_path / "pairs.jsonl"
    r = await _cli(stack, "export", "pairs", "-o", str(pairs), sub="fay")
    assert r.exit_code == 0 and pairs.exists() and "exported 0 preference pairs" in r.output

    await stack.feedback().PutRating(pb.PutRatingRequest(rating=pb.Rating(
        conversation=inst, turn_index=turn.reply.turn_index, scope=pb.RATING_SCOPE_MESSAGE, aspect="accuracy",
        sentiment=pb.RATING_SENTIMENT_NEGATIVE), request_id=rid()), metadata=stack.md("fay"))
    r = await _cli(stack, "export", "dataset", "-o", str(out), sub="fay")
    assert "exported 1 labelled turn\n" in r.output and len(out.read_text().splitlines()) == 1
    rows = tmp_path / "rows.jsonl"
    r = await _cli(stack, "feedback", "export", "-o", str(rows), sub="fay")
    assert "exported 1 row\n" in r.output
