"""Package boundaries (docs/architecture.md "Processes", "The shape of a service"): no service imports
the client tools (`services/cli`); the service modules import each other without a cycle (every
import counts, also one inside a function), and so do the console's TypeScript modules."""
from __future__ import annotations

import ast
import re
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


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk of `graph` meets (module → the modules it imports)."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return cycles


def test_service_modules_import_each_other_without_a_cycle():
    graph = _graph()
    # A package's __init__ importing its own submodules is how a package is assembled, not a cycle.
    for m in graph:
        graph[m] = {i for i in graph[m] if not (i.startswith(m + ".") and (SERVICES.parent / m.replace(".", "/")).is_dir())}
    assert _cycles(graph) == []


CONSOLE_SRC = ROOT / "console" / "src"
# `import … from "./x"`, `import "./x"`, `export … from "./x"` (relative specifiers only: packages are leaves).
TS_IMPORT = re.compile(r"""(?:^|\n)\s*(?:import|export)\b[^;'"]*?(?:from\s*)?["'](\.{1,2}/[^"']+)["']""")


def _ts_graph(src: Path = CONSOLE_SRC) -> dict[str, set[str]]:
    """The console's modules (paths under `src`, generated code left out) → the modules they import."""
    files = [p for p in src.rglob("*.ts") if "gen" not in p.relative_to(src).parts]
    graph: dict[str, set[str]] = {}
    for p in files:
        deps = set()
        for spec in TS_IMPORT.findall(p.read_text(encoding="utf-8")):
            target = (p.parent / spec).resolve()
            for cand in (target.with_name(target.name + ".ts"), target / "index.ts", target):
                if cand.suffix == ".ts" and cand.is_file():
                    deps.add(cand.relative_to(src.resolve()).as_posix())
                    break
        graph[p.resolve().relative_to(src.resolve()).as_posix()] = deps
    return graph


def test_console_modules_import_each_other_without_a_cycle():
    graph = _ts_graph()
    assert len(graph) > 10 and any(graph.values())
    assert _cycles(graph) == []


def test_the_typescript_check_sees_a_cycle(tmp_path):
    (tmp_path / "pages").mkdir()
    (tmp_path / "a.ts").write_text('import { b } from "./pages/b";\nexport const a = 1;\n')
    (tmp_path / "pages" / "b.ts").write_text('import { a } from "../a";\nimport "../style.css";\nexport const b = a;\n')
    assert _cycles(_ts_graph(tmp_path)) == [["a.ts", "pages/b.ts", "a.ts"]]


def _reexports(path: Path) -> list[str]:
    """Names `path` imports only to hand on: `import *`, an import marked `noqa: F401`, or an
    imported name listed in `__all__`."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    imported: set[str] = set()
    out: list[str] = []
    lines = text.splitlines()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.asname or a.name.split(".")[0] for a in node.names]
            if "*" in names:
                out.append("import *")
            if "noqa: F401" in lines[node.lineno - 1] or "noqa: F401" in lines[node.end_lineno - 1]:
                out += names
            imported |= set(names)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            out += [e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant) and e.value in imported]
    return out


def test_no_service_module_re_exports_another_modules_names():
    offenders = {_module(p): got for pkg in SERVICE_PACKAGES for p in (SERVICES / pkg).rglob("*.py")
                 if (got := _reexports(p))}
    assert offenders == {}


def test_the_re_export_check_sees_each_form(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from a import *\nfrom b import x  # noqa: F401\nfrom c import y\n__all__ = ['y', 'z']\nz = 1\n")
    assert _reexports(probe) == ["import *", "x", "y"]
