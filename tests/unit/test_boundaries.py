"""Package boundaries (docs/architecture.md "Processes", "The shape of a service"): no service imports
the client tools (`services/cli`), and the service modules import each other without a cycle (every
import counts, also one inside a function)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "services"
SERVICE_PACKAGES = ("chat", "feedback", "tracecollector", "common")


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """The `services.*` modules a file imports (`from a import b` counts `a.b` when that is a module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("services")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("services"):
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for pkg in SERVICE_PACKAGES for p in (SERVICES / pkg).rglob("*.py")}
    return {m: {i for i in _imports(p) if i in files and i != m} for m, p in files.items()}


def test_no_service_imports_the_client_tools():
    offenders = sorted(
        f"{_module(p)} imports {i}"
        for pkg in SERVICE_PACKAGES for p in (SERVICES / pkg).rglob("*.py")
        for i in _imports(p) if i == "services.cli" or i.startswith("services.cli.")
    )
    assert offenders == []


def test_service_modules_import_each_other_without_a_cycle():
    graph = _graph()
    # A package's __init__ importing its own submodules is how a package is assembled, not a cycle.
    for m in graph:
        graph[m] = {i for i in graph[m] if not (i.startswith(m + ".") and (SERVICES.parent / m.replace(".", "/")).is_dir())}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert cycles == []
