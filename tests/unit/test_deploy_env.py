"""Environment variables in deploy/ match what the processes read.

Both directions:
- every variable a manifest sets for one of our processes is read by that process: its settings class
  (introspected: env_prefix + field, or the field's validation alias) or the OpenTelemetry SDK's `OTEL_*`;
  a misspelt or wrongly prefixed name (e.g. AGENTFEEDBACK_CHAT_DATABASE_URL) fails here instead of being
  silently ignored in production;
- every setting a container deployment cannot leave at its default is set: the database URL (empty would
  start an embedded PostgreSQL inside the container), a JWT verification key, and every field whose
  default is a loopback address (listen addresses and targets: 127.0.0.1 is another container's nowhere).
"""
from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from tests.helpers.deploy import (
    ENTRYPOINT_SETTINGS,
    compose_config,
    compose_our_services,
    is_our_image,
    kustomize,
    load_settings_class,
    otel_env_names,
    pod_spec,
    settings_env_names,
    workloads,
)

JWT_KEY_FIELDS = {"jwt_secret", "jwt_public_key_file", "jwt_jwks_url"}
# Processes that keep no data of their own and may run without a database URL.
NO_DATABASE = {"agentfeedback-agent"}


def deployed_processes() -> list[tuple[str, str, dict[str, str]]]:
    """(where, entry point, env name → value or '<secret>') for every process of ours in compose and k8s."""
    out = []
    for name, svc in compose_our_services(compose_config()).items():
        cmd = svc["command"][0]
        if cmd in ENTRYPOINT_SETTINGS:
            out.append((f"compose:{name}", cmd, {k: str(v) for k, v in (svc.get("environment") or {}).items()}))
    for target in ("base", "production"):
        for w in workloads(kustomize(target)):
            for c in pod_spec(w)["containers"]:
                if is_our_image(c["image"]) and c["command"][0] in ENTRYPOINT_SETTINGS:
                    env = {e["name"]: e.get("value", "<secret>") for e in c.get("env", [])}
                    out.append((f"k8s-{target}:{w['metadata']['name']}", c["command"][0], env))
    return out


def test_settings_introspection_sees_the_shared_and_the_prefixed_names():
    """The reading of settings classes this file relies on, checked against pydantic-settings itself."""
    cls = load_settings_class(ENTRYPOINT_SETTINGS["agentfeedback-chat"])
    names = settings_env_names(cls)
    assert names["AGENTFEEDBACK_DATABASE_URL"] == "database_url"
    assert names["AGENTFEEDBACK_CHAT_LISTEN"] == "listen"
    assert "AGENTFEEDBACK_CHAT_DATABASE_URL" not in names


def test_introspected_names_are_the_ones_pydantic_settings_reads(monkeypatch):
    for ref in ENTRYPOINT_SETTINGS.values():
        cls = load_settings_class(ref)
        names = settings_env_names(cls)
        for env_name, field in names.items():
            monkeypatch.setenv(env_name, "probe-value")
            try:
                value = getattr(cls(), field)
            except ValidationError as e:
                # Rejected the probe value for this very variable (or a cross-field check naming it): it was read.
                assert any((err["loc"] and str(err["loc"][0]).upper() in (env_name, field.upper()))
                           or (not err["loc"] and env_name in err["msg"]) for err in e.errors()), e
            else:
                if isinstance(value, SecretStr):
                    value = value.get_secret_value()
                assert str(value) == "probe-value", f"{cls.__name__} does not read {env_name}"
            monkeypatch.delenv(env_name)


def test_every_variable_set_is_read_by_the_process():
    processes = deployed_processes()
    assert len(processes) >= 15, [p[0] for p in processes]
    otel = otel_env_names()
    problems = []
    for where, cmd, env in processes:
        read = settings_env_names(load_settings_class(ENTRYPOINT_SETTINGS[cmd]))
        for name in env:
            if name.upper() not in read and name not in otel:
                problems.append(f"{where} ({cmd}) sets {name}, which nothing in that process reads")
    assert not problems, "\n".join(problems)


def test_settings_a_container_cannot_default_are_set():
    problems = []
    for where, cmd, env in deployed_processes():
        cls = load_settings_class(ENTRYPOINT_SETTINGS[cmd])
        read = settings_env_names(cls)
        set_fields = {read[n.upper()] for n in env if n.upper() in read}
        if cmd not in NO_DATABASE and "database_url" not in set_fields:
            problems.append(f"{where}: no AGENTFEEDBACK_DATABASE_URL (would start an embedded PostgreSQL)")
        if cmd != "agentfeedback-migrate" and not JWT_KEY_FIELDS & set_fields:
            problems.append(f"{where}: no JWT verification key ({sorted(JWT_KEY_FIELDS)})")
        for field, info in cls.model_fields.items():
            if isinstance(info.default, str) and info.default.startswith(("127.0.0.1", "localhost")):
                if field not in set_fields:
                    problems.append(f"{where}: {field} left at its loopback default {info.default!r}")
        for name, value in env.items():
            if name.upper() in read and read[name.upper()].endswith("listen"):
                if not value.startswith("0.0.0.0:"):
                    problems.append(f"{where}: {name}={value} is not reachable from other containers")
    assert not problems, "\n".join(problems)


def test_services_calling_feedback_as_themselves_have_a_credential_wherever_none_can_be_minted():
    """Chat tells feedback which turns were removed and the collector hands it evaluations, each under
    its own service credential, minted from the HS256 secret when there is one. Under RS256/JWKS none
    can be minted: the token must be set, or removals wait in chat's outbox forever and evaluations are
    never delivered. And every collector hands evaluations on (an unset target silently ignores them)."""
    problems = []
    for where, cmd, env in deployed_processes():
        cls = load_settings_class(ENTRYPOINT_SETTINGS[cmd])
        read = settings_env_names(cls)
        set_fields = {read[n.upper()] for n in env if n.upper() in read}
        mints = "jwt_secret" in set_fields
        if cmd == "agentfeedback-chat" and not mints and "feedback_token" not in set_fields:
            problems.append(f"{where}: RS256 and no AGENTFEEDBACK_CHAT_FEEDBACK_TOKEN")
        if cmd == "agentfeedback-tracecollector":
            if "feedback_target" not in set_fields:
                problems.append(f"{where}: no AGENTFEEDBACK_COLLECTOR_FEEDBACK_TARGET (evaluations dropped)")
            elif not mints and "evaluations_token" not in set_fields:
                problems.append(f"{where}: RS256 and no AGENTFEEDBACK_COLLECTOR_EVALUATIONS_TOKEN")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("target", ["compose", "base", "production"])
def test_services_export_spans_to_the_otel_collector(target):
    if target == "compose":
        envs = [(n, s.get("environment") or {}) for n, s in compose_our_services(compose_config()).items()
                if s["command"][0] in ENTRYPOINT_SETTINGS and s["command"][0] != "agentfeedback-migrate"]
        services = set(compose_config()["services"])
    else:
        objs = kustomize(target)
        envs = [(w["metadata"]["name"], {e["name"]: e.get("value") for e in c.get("env", [])})
                for w in workloads(objs) if w["kind"] == "Deployment"
                for c in pod_spec(w)["containers"] if is_our_image(c["image"]) and c["command"][0] != "envoy"]
        services = {o["metadata"]["name"] for o in objs if o["kind"] == "Service"}
    assert envs
    for name, env in envs:
        endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
        host = endpoint.removeprefix("http://").split(":")[0]
        assert host == "otel-collector" and host in services, f"{target}:{name} exports to {endpoint!r}"


def _listen_ports(env: dict) -> set[int]:
    ports = set()
    for name, value in env.items():
        if name.endswith(("_LISTEN", "_PORT")) and value:
            ports.add(int(str(value).rsplit(":", 1)[-1]))
    return ports


def test_every_target_names_a_service_listening_on_that_port():
    """`*_TARGET` values (host:port) point at a real peer: in compose a service of ours that listens on that
    port; in Kubernetes a Service in the same build exposing that port."""
    problems = []
    services = compose_config()["services"]
    for where, _cmd, env in deployed_processes():
        for name, value in env.items():
            if not name.endswith("_TARGET"):
                continue
            host, _, port = value.rpartition(":")
            if where.startswith("compose:"):
                peer = services.get(host)
                if peer is None or int(port) not in _listen_ports(peer.get("environment") or {}):
                    problems.append(f"{where}: {name}={value} reaches no compose service listening there")
            else:
                target = where.split(":", 1)[0].removeprefix("k8s-")
                svcs = {o["metadata"]["name"]: o for o in kustomize(target) if o["kind"] == "Service"}
                svc = svcs.get(host)
                if svc is None or int(port) not in {p["port"] for p in svc["spec"]["ports"]}:
                    problems.append(f"{where}: {name}={value} reaches no Service port")
    assert not problems, "\n".join(problems)
