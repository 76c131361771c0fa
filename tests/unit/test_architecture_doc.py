"""docs/architecture.md matches the code: every file path it names exists, and it names every module of
services/common (a newcomer reads the map first)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
# A backticked file name or path: `services/chat/turn.py`, `repository/text_search.py`, `codec.py`.
PATH = re.compile(r"`([A-Za-z0-9_.\-/]+\.(?:py|sql|ts|json|md|ya?ml|toml|css|html|sh|proto))`")
# Where a path written relative to a service or without folders is looked for.
BASES = [ROOT, ROOT / "services", *sorted(p for p in (ROOT / "services").iterdir() if p.is_dir())]


def _exists(path: str) -> bool:
    if any((base / path).exists() for base in BASES):
        return True
    if "/" not in path:  # a bare file name: a module of some service, a test, a console source
        return any(ROOT.glob(f"services/**/{path}")) or any(ROOT.glob(f"tests/**/{path}")) \
            or any(ROOT.glob(f"console/src/**/{path}"))
    return False


def test_every_path_the_architecture_doc_names_exists():
    named = sorted(set(PATH.findall(DOC.read_text(encoding="utf-8"))))
    assert len(named) > 20
    assert [p for p in named if not _exists(p)] == []


def test_the_check_would_see_a_stale_name():
    assert not _exists("services/feedback/servicer_operator.py") and not _exists("model_ratings.py")
    assert _exists("repository/text_search.py") and _exists("chat/domain.py") and _exists("codec.py")


def test_the_architecture_doc_names_every_common_module():
    text = DOC.read_text(encoding="utf-8")
    modules = sorted(p.stem for p in (ROOT / "services" / "common").glob("*.py") if p.stem != "__init__")
    assert [m for m in modules if f"`{m}`" not in text and f"common/{m}.py" not in text] == []
