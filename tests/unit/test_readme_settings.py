"""The README's configuration table lists every setting the services read, with its current default."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("settings_table", ROOT / "scripts" / "settings_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_readme_table_is_complete_and_current():
    tool = _tool()
    readme = (ROOT / "README.md").read_text()
    assert tool.readme_block(readme) == tool.table(), "run: python scripts/settings_table.py --write"
    for var, *_ in tool.rows():
        assert f"`{var}`" in readme


def test_defaults_read_as_values_not_python_objects():
    """A newcomer reads `(empty)`, not `SecretStr('')` or `PydanticUndefined`."""
    for var, default, *_ in _tool().rows():
        assert "SecretStr" not in default and "Undefined" not in default, (var, default)
