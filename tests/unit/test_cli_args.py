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
