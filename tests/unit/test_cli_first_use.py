"""Newcomer papercuts of issue 15, each as the newcomer meets it."""
from __future__ import annotations

from click.testing import CliRunner

from scripts.settings_table import rows
from services.cli.envoy import GatewaySettings
from services.cli.main import cli
from tests.helpers.ports import closed_port


def test_every_setting_in_the_readme_table_has_a_real_default_and_a_description():
    for var, default, _component, doc in rows():
        assert "PydanticUndefined" not in default, var
        assert doc.strip(), f"{var} has no description"


def test_moving_the_console_port_moves_the_default_allowed_origins(monkeypatch):
    monkeypatch.delenv("AGENTFEEDBACK_GATEWAY_ALLOWED_ORIGINS", raising=False)
    monkeypatch.delenv("AGENTFEEDBACK_CONSOLE_ORIGINS", raising=False)
    monkeypatch.setenv("AGENTFEEDBACK_GATEWAY_CONSOLE_PORT", "9191")
    assert GatewaySettings().origins == ("http://127.0.0.1:9191", "http://localhost:9191")
    monkeypatch.setenv("AGENTFEEDBACK_GATEWAY_ALLOWED_ORIGINS", "https://console.example.com")
    assert GatewaySettings().origins == ("https://console.example.com",)


def test_feedback_list_help_names_the_columns_it_prints():
    out = CliRunner().invoke(cli, ["feedback", "list", "--help"]).output
    assert "id, status, trace id, created (UTC), the first words" in " ".join(out.split())
    assert "target" not in out.split("Options:")[0]


def test_a_command_run_without_the_stack_says_to_start_it_with_make_run():
    """A new user ran `agentfeedback feedback list` from the README without the stack and read only
    gRPC's 'UNAVAILABLE: failed to connect to all addresses'."""
    with closed_port() as port:
        result = CliRunner().invoke(cli, ["feedback", "list"], env={
            "AGENTFEEDBACK_CLIENT_FEEDBACK_TARGET": f"127.0.0.1:{port}", "AGENTFEEDBACK_CLIENT_TOKEN": "t"})
    assert result.exit_code == 1
    assert "UNAVAILABLE" in result.output
    assert "`make run`" in result.output and f"127.0.0.1:{port}" in result.output, result.output
