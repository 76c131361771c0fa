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


@pytest.mark.parametrize(("option", "value"), [("--since", "yesterday"), ("--since", "2026-12-01"),
                                               ("--until", "2026-12-01T00:00:00")])
def test_a_time_that_is_not_rfc_3339_is_a_usage_error_naming_the_option(option, value):
    r = CliRunner().invoke(cli, ["export", "dataset", option, value])
    assert r.exit_code == 2, r.output
    assert f"Invalid value for '{option}'" in r.output and "2026-12-01T00:00:00Z" in r.output
    assert "Traceback" not in r.output and not isinstance(r.exception, ValueError)


def test_an_rfc_3339_time_with_its_offset_becomes_that_instant():
    from services.cli.export import Rfc3339  # noqa: PLC0415

    ts = Rfc3339().convert("2026-12-01T01:00:00+01:00", None, None)
    assert ts.ToJsonString() == "2026-12-01T00:00:00Z"
