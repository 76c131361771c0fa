"""The CLI refuses out-of-range numbers as usage errors (exit 2, the option named), before any call."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from services.cli.main import cli


@pytest.mark.parametrize("args", [["feedback", "list", "--limit", "99999999999"], ["feedback", "list", "--limit", "0"],
                                  ["feedback", "export", "--page-size", "-1"]])
def test_out_of_range_page_sizes_are_usage_errors_not_tracebacks(args):
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2, r.output
    assert "Invalid value for '--" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize(("variable", "value", "args"), [
    ("AGENTFEEDBACK_CLIENT_TIMEOUT_S", "abc", ["feedback", "list"]),
    ("AGENTFEEDBACK_CLIENT_TIMEOUT_S", "0", ["trace", "get", "0123456789abcdef0123456789abcdef"]),
    ("AGENTFEEDBACK_DB_POOL_MAX", "many", ["token"]),
])
def test_a_bad_setting_is_one_message_naming_the_variable(monkeypatch, variable, value, args):
    monkeypatch.setenv(variable, value)
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 1, r.output
    assert f"{variable}={value!r}" in r.output and "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
