"""The OTLP ingest token setting and check (services/tracecollector/ingest_auth.py): tokens split and
validated without ever showing one, the header parsed as RFC 6750 says, and `make run` handing the
collector's first token to its own services through the standard exporter header variable."""
from __future__ import annotations

import pytest
from opentelemetry.util.re import parse_env_headers

from services.cli.stack import LocalStack, _ingest_headers
from services.common.settings import CommonSettings, SettingsError, load_settings
from services.tracecollector.ingest_auth import INVALID, MISSING, IngestTokens, split_tokens
from services.tracecollector.settings import CollectorSettings

TOKEN = "0123456789abcdef0123"
OTHER = "Zm9vYmFyYmF6cXV4cXV1eA=="
EXPORTER_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                      "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")


def test_tokens_are_split_on_commas_and_trimmed():
    assert split_tokens("") == ()
    assert split_tokens(" , ") == ()
    assert split_tokens(f" {TOKEN} ,{OTHER},, ") == (TOKEN, OTHER)


@pytest.mark.parametrize("bad", ["short-token", "has a space-0123456789", "quote\"0123456789abc", "é" * 20, "a" * 4097])
def test_a_malformed_token_is_refused_by_position_never_by_value(bad):
    with pytest.raises(ValueError) as e:
        split_tokens(f"{TOKEN},{bad}")
    assert "token 2 of 2" in str(e.value) and bad not in str(e.value)


def test_a_malformed_token_stops_the_collector_with_its_variable_named_and_its_value_hidden(monkeypatch):
    monkeypatch.setenv("AGENTFEEDBACK_COLLECTOR_OTLP_BEARER_TOKENS", f"{TOKEN},short")
    with pytest.raises(SettingsError) as e:
        load_settings(CollectorSettings)
    assert "AGENTFEEDBACK_COLLECTOR_OTLP_BEARER_TOKENS=(secret)" in str(e.value)
    assert TOKEN not in str(e.value) and ",short" not in str(e.value)


def test_the_setting_reads_the_environment_and_defaults_to_none(monkeypatch):
    monkeypatch.delenv("AGENTFEEDBACK_COLLECTOR_OTLP_BEARER_TOKENS", raising=False)
    assert CollectorSettings().otlp_tokens() == ()
    monkeypatch.setenv("AGENTFEEDBACK_COLLECTOR_OTLP_BEARER_TOKENS", f"{TOKEN},{OTHER}")
    settings = CollectorSettings()
    assert settings.otlp_tokens() == (TOKEN, OTHER)
    assert TOKEN not in repr(settings) and TOKEN not in str(settings.model_dump())


def test_refusal_reasons():
    tokens = IngestTokens([TOKEN, OTHER])
    assert tokens.refusal(f"Bearer {TOKEN}") is None
    assert tokens.refusal(f"bearer   {OTHER} ") is None  # the scheme is case-insensitive (RFC 7235)
    for missing in (None, "", "Bearer", "Bearer ", TOKEN, f"Basic {TOKEN}", f"Token {TOKEN}"):
        assert tokens.refusal(missing) == MISSING, missing
    for invalid in (f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN.upper()}", "Bearer é",
                    f"Bearer {TOKEN},{OTHER}"):
        assert tokens.refusal(invalid) == INVALID, invalid
    with pytest.raises(ValueError):
        IngestTokens([])


def _clean(monkeypatch):
    for name in (*EXPORTER_VARIABLES, "AGENTFEEDBACK_COLLECTOR_OTLP_BEARER_TOKENS"):
        monkeypatch.delenv(name, raising=False)


def test_make_run_gives_its_services_the_collectors_first_token_in_the_standard_format(monkeypatch):
    _clean(monkeypatch)
    assert _ingest_headers() == {}  # no token: ingest stays open on loopback, nothing sent
    monkeypatch.setenv("AGENTFEEDBACK_COLLECTOR_OTLP_BEARER_TOKENS", f" {OTHER} ,{TOKEN}")
    (variable, header), = _ingest_headers().items()
    assert variable == "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
    assert dict(parse_env_headers(header)) == {"authorization": f"Bearer {OTHER}"}  # the SDK's own parser
    by_name = {c.name: c.env for c in LocalStack(CommonSettings()).plan()}
    for name in ("chat", "agent", "feedback"):
        assert by_name[name]["OTEL_EXPORTER_OTLP_TRACES_HEADERS"] == header
    assert by_name["tracecollector"]["AGENTFEEDBACK_COLLECTOR_OTLP_BEARER_TOKENS"] == f" {OTHER} ,{TOKEN}"


@pytest.mark.parametrize("variable", EXPORTER_VARIABLES)
def test_make_run_sends_no_token_where_the_caller_pointed_or_configured_the_exporters(monkeypatch, variable):
    _clean(monkeypatch)
    monkeypatch.setenv("AGENTFEEDBACK_COLLECTOR_OTLP_BEARER_TOKENS", TOKEN)
    monkeypatch.setenv(variable, "http://elsewhere:4317" if "ENDPOINT" in variable else "x-api-key=k")
    assert _ingest_headers() == {}
