"""The test tree's own layout (issue 12): no test module imports another test module — what tests share
lives in tests/helpers/ (or a conftest.py, or a `*_support.py` module), so pytest never collects a test
module's names into another and moving or deleting one test file breaks no other."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _is_test_module(dotted: str) -> bool:
    return dotted.rsplit(".", 1)[-1].startswith("test_")


def _test_module_imports(path: Path) -> list[str]:
    """The test modules `path` imports (`import tests.x.test_y`, `from tests.x.test_y import …`,
    `from tests.x import test_y`, relative forms too), every import counted, also one inside a function."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            if node.module and _is_test_module(node.module):
                out.append(base)
            out += [f"{base}.{a.name}" for a in node.names if a.name.startswith("test_")]
    return out


def test_no_test_module_imports_another_test_module():
    offenders = sorted(f"{p.relative_to(TESTS.parent)} imports {m}"
                       for p in TESTS.rglob("*.py") for m in _test_module_imports(p))
    assert offenders == []


def test_the_check_sees_each_import_form(tmp_path):
    """The check above can fail: each way of importing a test module is caught, helpers are not."""
    probe = tmp_path / "probe.py"
    probe.write_text("import tests.e2e.test_a\nfrom tests.e2e.test_b import x\nfrom tests.e2e import test_c\n"
                     "from .test_d import y\ndef f():\n    from tests.e2e.test_e import z\n"
                     "from tests.helpers.console import shot\nfrom tests.e2e.grpcweb_support import gateway\n")
    assert sorted(_test_module_imports(probe)) == [
        ".test_d", "tests.e2e.test_a", "tests.e2e.test_b", "tests.e2e.test_c", "tests.e2e.test_e"]
