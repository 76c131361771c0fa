"""The shared feedback vocabulary (console/src/taxonomy.json) fits what the server accepts: every slug
has the shape PutRating checks, no judgement offers more reasons than a rating holds, every sentiment
and scope names a proto enum value, and the statistics defaults name a real question and choice."""
from __future__ import annotations

import json
import re
from pathlib import Path

from agentfeedback.feedback.v1 import feedback_pb2 as pb

TAXONOMY = Path(__file__).resolve().parents[2] / "console" / "src" / "taxonomy.json"
SLUG = re.compile(r"^[a-z][a-z0-9_]{0,63}$")  # feedback.proto Rating.aspect / reasons / choice
MAX_REASONS = 16  # feedback.proto Rating.reasons


def test_taxonomy_slugs_sentiments_and_scopes_are_ones_the_server_accepts():
    t = json.loads(TAXONOMY.read_text())
    aspects = set()
    for q in t["questions"]:
        assert SLUG.match(q["aspect"]) and q["aspect"] not in aspects, q["aspect"]
        aspects.add(q["aspect"])
        pb.RatingScope.Value(f"RATING_SCOPE_{q['scope']}")
        for s in q.get("sentiments", []):
            pb.RatingSentiment.Value(f"RATING_SENTIMENT_{s}")
        slugs = [c["slug"] for c in q["choices"]]
        assert len(slugs) == len(set(slugs)), q["aspect"]
        for c in q["choices"]:
            assert SLUG.match(c["slug"]), c["slug"]
            pb.RatingSentiment.Value(f"RATING_SENTIMENT_{c['sentiment']}")
            reasons = [r["slug"] for r in c["reasons"]]
            assert len(reasons) <= MAX_REASONS and len(reasons) == len(set(reasons))
            assert all(SLUG.match(r) for r in reasons)
    completion = next(q for q in t["questions"] if q["aspect"] == t["stats"]["completion_aspect"])
    assert len(completion["choices"]) == 4  # task completion's four states (issue 13)
    assert t["stats"]["complete_choice"] in {c["slug"] for c in completion["choices"]}
    assert t["stats"]["reaction_aspect"] in aspects
    assert {c["category"] for c in t["report_categories"]} == {
        n.removeprefix("CATEGORY_") for n in pb.Category.keys() if n != "CATEGORY_UNSPECIFIED"}
