"""Datasets out (issue 24): `agentfeedback export dataset` over the real ExportDataset stream writes the
caller's labelled turns as JSONL that Hugging Face `datasets` loads (its `json` builder, offline), in the
OpenAI chat-messages shape, with every rating of the turn, the reports and their frozen tool calls;
filters and the resume token work; branch copies are not labels unless asked for. Evaluations other
systems sent are exported with their author kind (filterable) and never become preference pairs."""
from __future__ import annotations

import json
import os
import uuid

import grpc
import pytest
from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb

from services.common.auth import SCOPE_FEEDBACK_EVALUATIONS
from services.common.errors import error_info
from services.common.pages import encode_page_token
from tests.helpers.cli import _cli
from tests.helpers.feedback import expect_error, flag, new_instance, rid, send, wait_state

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
    # A forged position (unsigned, as tokens were before they were signed; or another caller's) is refused.
    first = json.loads(out.read_text().splitlines()[0])
    for forged, md in ((encode_page_token({"c": first["conversation"], "t": 0}), stack.md()),
                       (token, stack.md("bob"))):
        call = stack.feedback().ExportDataset(pb.ExportDatasetRequest(resume_token=forged), metadata=md)
        e = await expect_error(call.read(), grpc.StatusCode.INVALID_ARGUMENT)
        assert error_info(e).metadata["field"] == "resume_token"


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


async def _evaluate(stack, trace_id: str, name: str, kind: int, identifier: str, label: str = "",
                    score: float | None = None) -> str:
    """An evaluation handed over as the trace collector does (AcceptEvaluations, its own credential)."""
    e = pb.Evaluation(trace_id=trace_id, name=name, label=label, author_kind=kind, identifier=identifier,
                      source="judges")
    if score is not None:
        e.score = score
    got = await stack.feedback().AcceptEvaluations(pb.AcceptEvaluationsRequest(evaluations=[e]),
                                                   metadata=stack.md("tracecollector", (SCOPE_FEEDBACK_EVALUATIONS,)))
    assert got.outcomes[0].state == pb.EvaluationOutcome.STATE_ACCEPTED, got
    return got.outcomes[0].rating


async def _export(stack, path, *args: str):
    r = await _cli(stack, "export", "dataset", "-o", str(path), *args)
    assert r.exit_code == 0, r.output
    return _load(path) if path.read_text() else []


async def test_evaluations_export_with_their_author_kind_and_the_author_kind_filter_picks_turns(
        stack, tmp_path, hf_offline):
    inst = await new_instance(stack)
    t0, t1, _ = [await send(stack, inst, f"question {i}") for i in range(3)]
    await _rate(stack, inst, t0.reply.turn_index, "accuracy", pb.RATING_SENTIMENT_POSITIVE)
    code = await _evaluate(stack, t0.trace_id, "toxicity", pb.AUTHOR_KIND_CODE, "regex-check", label="safe")
    llm = await _evaluate(stack, t1.trace_id, "relevance", pb.AUTHOR_KIND_LLM, "judge-v1", label="irrelevant",
                          score=0.25)

    rows = await _export(stack, tmp_path / "all.jsonl")
    assert [x["turn_index"] for x in rows] == [t0.reply.turn_index, t1.reply.turn_index]
    keep = ("aspect", "author_kind", "evaluator", "label", "score", "sentiment")
    assert [{k: x[k] for k in keep} for x in rows[0]["ratings"]] == [
        {"aspect": "accuracy", "author_kind": "AUTHOR_KIND_HUMAN", "evaluator": "", "label": "", "score": None,
         "sentiment": "RATING_SENTIMENT_POSITIVE"},
        {"aspect": "toxicity", "author_kind": "AUTHOR_KIND_CODE", "evaluator": "regex-check", "label": "safe",
         "score": None, "sentiment": "RATING_SENTIMENT_POSITIVE"}]
    assert [{k: x[k] for k in keep} for x in rows[1]["ratings"]] == [
        {"aspect": "relevance", "author_kind": "AUTHOR_KIND_LLM", "evaluator": "judge-v1", "label": "irrelevant",
         "score": 0.25, "sentiment": "RATING_SENTIMENT_NEGATIVE"}]
    assert rows[1]["messages"][-1] == {"role": "assistant", "content": t1.reply.content}

    # The author-kind filter picks turns (a picked turn still holds every rating, each with its kind).
    llm_rows = await _export(stack, tmp_path / "llm.jsonl", "--author-kind", "llm")
    assert [x["turn_index"] for x in llm_rows] == [t1.reply.turn_index]
    human = await _export(stack, tmp_path / "human.jsonl", "--author-kind", "human")
    assert [x["turn_index"] for x in human] == [t0.reply.turn_index]
    assert [x["author_kind"] for x in human[0]["ratings"]] == ["AUTHOR_KIND_HUMAN", "AUTHOR_KIND_CODE"]
    code_rows = await _export(stack, tmp_path / "code.jsonl", "--author-kind", "code")
    assert [x["turn_index"] for x in code_rows] == [t0.reply.turn_index]
    # The other filters read an evaluation's name as its aspect and its derived sentiment.
    neg = await _export(stack, tmp_path / "neg.jsonl", "--sentiment", "negative")
    assert [x["turn_index"] for x in neg] == [t1.reply.turn_index]
    tox = await _export(stack, tmp_path / "tox.jsonl", "--aspect", "toxicity", "--author-kind", "code")
    assert [x["turn_index"] for x in tox] == [t0.reply.turn_index]
    assert await _export(stack, tmp_path / "none.jsonl", "--aspect", "toxicity", "--author-kind", "llm") == []
    # Another owner never gets them.
    assert (await _cli(stack, "export", "dataset", "-o", str(tmp_path / "bob.jsonl"), sub="bob")).exit_code == 0
    assert (tmp_path / "bob.jsonl").read_text() == ""
    # The RPC refuses an unknown author kind, naming the field.
    e = await expect_error(_first(stack.feedback().ExportDataset(pb.ExportDatasetRequest(author_kind=9),
                                                                 metadata=stack.md())),
                           grpc.StatusCode.INVALID_ARGUMENT)
    assert error_info(e).metadata["field"] == "author_kind"
    assert {code, llm} == {x["name"] for r in rows for x in r["ratings"] if x["author_kind"] != "AUTHOR_KIND_HUMAN"}


async def _first(call):
    async for m in call:
        return m


async def test_an_llm_evaluation_never_becomes_a_preference_pair(stack, tmp_path, hf_offline):
    inst = await new_instance(stack)
    t0 = await send(stack, inst, "first question")
    t1 = await send(stack, inst, "second question")
    fork = (await stack.chat().ForkConversation(chat_pb2.ForkConversationRequest(
        parent=inst, turn_index=t0.reply.turn_index, request_id=str(uuid.uuid4())), metadata=stack.md())).instance.name
    f1 = await send(stack, fork, "second question")
    # A judge disagrees about the two branches on `reaction` (the owner rated both alike there), and on
    # `relevance` (the owner did not rate it at all): neither is the owner's preference.
    for trace_id, label in ((t1.trace_id, "positive"), (f1.trace_id, "negative")):
        await _evaluate(stack, trace_id, "reaction", pb.AUTHOR_KIND_LLM, "judge", label=label)
        await _evaluate(stack, trace_id, "relevance", pb.AUTHOR_KIND_HUMAN, "reviewer-7", label=label)
    await _rate(stack, inst, t1.reply.turn_index, "reaction", pb.RATING_SENTIMENT_POSITIVE)
    await _rate(stack, fork, f1.reply.turn_index, "reaction", pb.RATING_SENTIMENT_POSITIVE)
    # The owner's own differing opinion on `tone` is the one pair.
    await _rate(stack, inst, t1.reply.turn_index, "tone", pb.RATING_SENTIMENT_NEGATIVE)
    await _rate(stack, fork, f1.reply.turn_index, "tone", pb.RATING_SENTIMENT_POSITIVE)

    out = tmp_path / "pairs.jsonl"
    assert (await _cli(stack, "export", "pairs", "-o", str(out))).exit_code == 0
    rows = list(_load(out))
    assert [(x["aspect"], x["chosen_conversation"], x["rejected_conversation"]) for x in rows] == [("tone", fork, inst)]
    for aspect in ("reaction", "relevance"):
        only = tmp_path / f"{aspect}.jsonl"
        assert (await _cli(stack, "export", "pairs", "-o", str(only), "--aspect", aspect)).exit_code == 0
        assert only.read_text() == ""


async def test_a_turn_with_many_reports_exports_its_tool_calls_once_and_within_the_record_bound(
        stack, tmp_path, monkeypatch):
    """Every report on a turn freezes the same tool calls: the record carries them once. A turn with more
    reports than fit in a record (seen: 583 reports made a 4.2 MB record, over gRPC's 4 MiB limit, and the
    owner's export failed on it at every resume) carries the first that fit and says how many it has."""
    from services.feedback import codec_feed
    from tests.helpers.console import QUESTION, TOOL

    inst = await new_instance(stack)
    turn = await send(stack, inst, QUESTION)
    await _rate(stack, inst, turn.reply.turn_index, "accuracy", pb.RATING_SENTIMENT_NEGATIVE)
    await stack.aflush_spans()
    reports = [await flag(stack, turn.reply.name, f"wrong answer {i} " + "x" * 2000, sentiment=pb.SENTIMENT_BAD)
               for i in range(3)]
    frozen = [await wait_state(stack, r.name, CAPTURED) for r in reports]
    calls = [c.name for c in frozen[0].trace_snapshot.tool_calls]
    assert TOOL in calls

    whole = tmp_path / "whole.jsonl"
    assert (await _cli(stack, "export", "dataset", "-o", str(whole))).exit_code == 0
    (row,) = [json.loads(x) for x in whole.read_text().splitlines()]
    assert [c["name"] for c in row["tool_calls"]] == calls
    assert len(row["reports"]) == row["reports_total"] == 3 and row["ratings_total"] == 1

    # A bound that holds the turn's conversation, rating and one report, not three.
    records = [r async for r in stack.feedback().ExportDataset(pb.ExportDatasetRequest(), metadata=stack.md())]
    one = records[0].feedback[0].ByteSize()
    monkeypatch.setattr(codec_feed, "RECORD_BUDGET_BYTES", records[0].ByteSize() - one)
    cut = [r async for r in stack.feedback().ExportDataset(pb.ExportDatasetRequest(), metadata=stack.md())]
    assert len(cut) == 1 and cut[0].ByteSize() <= codec_feed.RECORD_BUDGET_BYTES
    assert len(cut[0].feedback) == 2 and cut[0].feedback_total == 3
    assert [f.name for f in cut[0].feedback] == [f.name for f in records[0].feedback][:2]
    assert len(cut[0].ratings) == cut[0].ratings_total == 1


async def test_a_conversation_too_long_for_the_record_keeps_the_messages_nearest_the_turn_and_says_how_many_not(
        stack, tmp_path, monkeypatch):
    """The conversation before a rated turn was never cut: one over ~3 MiB made a record over gRPC's 4 MiB
    limit (RESOURCE_EXHAUSTED at every resume). It now takes at most two thirds of the bound, newest first:
    the turn's own user message and those nearest it, the older ones counted in `messages_omitted`; the
    rating (the label) still fits."""
    from services.feedback import codec_feed

    inst = await new_instance(stack)
    turns = [await send(stack, inst, f"question {i} " + "q" * 3000) for i in range(6)]
    last = turns[-1].reply.turn_index
    await _rate(stack, inst, last, "accuracy", pb.RATING_SENTIMENT_NEGATIVE)
    (whole,) = [r async for r in stack.feedback().ExportDataset(pb.ExportDatasetRequest(), metadata=stack.md())]
    assert len(whole.messages) == 11 and whole.messages_omitted == 0  # 5 turns of 2 messages, then the question

    # A bound whose two thirds hold the reply and about 3 of those messages (each ~3 KB).
    monkeypatch.setattr(codec_feed, "RECORD_BUDGET_BYTES", 15_000)
    (cut,) = [r async for r in stack.feedback().ExportDataset(pb.ExportDatasetRequest(), metadata=stack.md())]
    assert cut.ByteSize() <= codec_feed.RECORD_BUDGET_BYTES, cut.ByteSize()  # was 26,653 bytes: every message
    kept = len(cut.messages)
    assert 1 <= kept < 11 and cut.messages_omitted == 11 - kept
    assert list(cut.messages) == list(whole.messages)[-kept:]  # the newest ones, oldest first
    assert cut.messages[-1].content.startswith("question 5 ")  # the turn's own user message
    assert len(cut.ratings) == cut.ratings_total == 1
    assert cut.completion == whole.completion

    out = tmp_path / "cut.jsonl"
    assert (await _cli(stack, "export", "dataset", "-o", str(out))).exit_code == 0
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert row["messages_omitted"] == 11 - kept and len(row["messages"]) == kept + 1  # + the reply
