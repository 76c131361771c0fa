"""Print the README's configuration table from the settings classes (the one source of truth).

Usage: python scripts/settings_table.py [--write]   (--write updates README.md; tests/unit/test_readme_settings.py checks the README has every row)
"""
from __future__ import annotations

import inspect
import sys
from pathlib import Path


from pydantic import SecretStr
from pydantic_settings import BaseSettings

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from services.chat.agent.settings import AgentSettings  # noqa: E402 - after the sys.path line above
from services.chat.settings import ChatSettings  # noqa: E402 - after the sys.path line above
from services.cli.client import ClientSettings  # noqa: E402 - after the sys.path line above
from services.cli.envoy import GatewaySettings  # noqa: E402 - after the sys.path line above
from services.common.settings import PROJECT_ROOT, CommonSettings  # noqa: E402 - after the sys.path line above
from services.feedback.settings import FeedbackSettings  # noqa: E402 - after the sys.path line above
from services.tracecollector.settings import CollectorSettings  # noqa: E402 - after the sys.path line above

CLASSES: list[tuple[str, type[BaseSettings]]] = [
    ("all services", CommonSettings),
    ("chat gateway", ChatSettings),
    ("reference agent", AgentSettings),
    ("feedback", FeedbackSettings),
    ("trace collector", CollectorSettings),
    ("gRPC-web gateway / console", GatewaySettings),
    ("CLI / MCP client", ClientSettings),
]


def _comments(cls: type) -> dict[str, str]:
    """Field name → the comment lines right above its definition in the class body; a comment above a
    group of fields (no blank line between them, none with a comment of its own) describes each."""
    src = inspect.getsource(cls).splitlines()
    out: dict[str, str] = {}
    pending: list[str] = []
    group = ""
    for line in src:
        s = line.strip()
        if not s:
            pending, group = [], ""
            continue
        if s.startswith("#"):
            pending.append(s.lstrip("# ").strip())
            continue
        if ":" in s and not s.startswith(("class", "model_config", '"""', "def", "@", "return")):
            name = s.split(":", 1)[0].strip()
            if name.isidentifier():
                if pending:
                    group = " ".join(pending)
                if group:
                    out[name] = group
        pending = []
    return out


def env_name(cls: type[BaseSettings], field: str) -> str:
    f = cls.model_fields[field]
    alias = f.validation_alias
    if alias is not None and hasattr(alias, "choices"):
        return str(alias.choices[0])
    return (cls.model_config.get("env_prefix", "") + field).upper()


def rows() -> list[tuple[str, str, str, str]]:
    """(variable, default, component, description), each variable once."""
    seen: set[str] = set()
    out = []
    for component, cls in CLASSES:
        docs: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            if isinstance(klass, type) and issubclass(klass, BaseSettings) and klass is not BaseSettings:
                docs.update(_comments(klass))
        for name, f in cls.model_fields.items():
            var = env_name(cls, name)
            if var in seen:
                continue
            seen.add(var)
            default = f.get_default(call_default_factory=True)  # a default_factory's value, not PydanticUndefined
            if isinstance(default, Path):
                # The repository root's, not the working directory's (PROJECT_ROOT in the code).
                default = str(default).replace(str(PROJECT_ROOT), "<repo root>")
            if isinstance(default, SecretStr):  # a secret's default is shown as "(empty)" or "(secret)"
                default = "(secret)" if default.get_secret_value() else ""
            out.append((var, repr(default) if default not in ("", None) else "(empty)", component, docs.get(name, "")))
    return out


def table() -> str:
    lines = ["| variable | default | used by | what it does |", "|---|---|---|---|"]
    for var, default, comp, doc in rows():
        lines.append(f"| `{var}` | `{default}` | {comp} | {doc} |")
    return "\n".join(lines)


BEGIN, END = "<!-- settings-table:begin -->", "<!-- settings-table:end -->"


def readme_block(readme: str) -> str:
    """The table currently between the README's markers."""
    return readme.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def write_readme(path: Path = PROJECT_ROOT / "README.md") -> None:
    text = path.read_text()
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    path.write_text(f"{head}{BEGIN}\n{table()}\n{END}{tail}")


if __name__ == "__main__":
    if "--write" in sys.argv:
        write_readme()
    else:
        print(table())
