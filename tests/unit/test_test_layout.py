"""The test tree's own layout: no test module imports another test module — what tests share lives in
tests/helpers/ (or a conftest.py), so pytest never collects a test module's names into another and
moving or deleting one test file breaks no other; support code lives nowhere else, and tests/helpers
imports no module of a test folder."""
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
                     "from tests.helpers.console import shot\nfrom tests.helpers.grpcweb import gateway\n")
    assert sorted(_test_module_imports(probe)) == [
        ".test_d", "tests.e2e.test_a", "tests.e2e.test_b", "tests.e2e.test_c", "tests.e2e.test_e"]


# Outside tests/helpers only these non-test modules: the shared stack fixture module, package markers,
# conftest.py files, and the bench (its modules are the benchmarks, run by tests/bench/run.py).
def _support_outside_helpers() -> list[str]:
    out = []
    for p in TESTS.rglob("*.py"):
        rel = p.relative_to(TESTS)
        if rel.parts[0] in ("helpers", "bench") or p.name.startswith("test_") or p.name in ("__init__.py",
                                                                                             "conftest.py"):
            continue
        if rel.as_posix() != "stack.py":
            out.append(rel.as_posix())
    return sorted(out)


def test_support_code_lives_in_tests_helpers():
    assert _support_outside_helpers() == []


def test_helpers_import_no_test_folder():
    """tests/helpers is below every test folder: it imports tests.stack and other helpers, never a module
    of tests/unit, e2e, fuzz, ops, integration, multihost or bench."""
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name not in ("helpers", "__pycache__")}
    offenders = []
    for p in (TESTS / "helpers").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{p.name} imports {n}" for n in names
                          if n.startswith("tests.") and n.split(".")[1] in folders]
    assert offenders == []
