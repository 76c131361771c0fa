"""deploy/otel-collector/*.yaml against the OpenTelemetry Collector contrib distribution we deploy
(image otel/opentelemetry-collector-contrib:0.136.0): every component used is one that distribution
contains, every pipeline references defined components, and the sampling tier keeps what it must.

CONTRIB_COMPONENTS is data, not code: the component modules of the contrib distribution, from
open-telemetry/opentelemetry-collector-releases, distributions/otelcol-contrib/manifest.yaml
(components at v0.136.0; all extensions, exporters, processors and connectors, and the receivers that
take traces or Kubernetes data - the manifest lists ~100 receivers). A config key is the component's `type` (its metadata.yaml), which is the module
name without its kind suffix except for the modules in TYPE_EXCEPTIONS (checked against each one's
metadata.yaml: e.g. extension/storage/filestorage → `file_storage`).
"""
from __future__ import annotations

import re
from copy import deepcopy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.deploy import DEPLOY, compose_config, kustomize

CONTRIB_VERSION = "0.136.0"
CONTRIB_COMPONENTS: dict[str, list[str]] = {
    "extensions": [
        "zpagesextension", "ackextension", "asapauthextension", "awsproxy", "azureauthextension",
        "basicauthextension", "bearertokenauthextension", "cgroupruntimeextension", "datadogextension",
        "headerssetterextension", "healthcheckextension", "httpforwarderextension", "jaegerremotesampling",
        "oauth2clientauthextension", "oidcauthextension", "opampextension", "pprofextension",
        "sigv4authextension", "filestorage", "dbstorage", "redisstorageextension", "sumologicextension",
        "googleclientauthextension", "k8sleaderelector",
    ],
    "exporters": [
        "debugexporter", "nopexporter", "otlpexporter", "otlphttpexporter", "alibabacloudlogserviceexporter",
        "awscloudwatchlogsexporter", "awsemfexporter", "awskinesisexporter", "awsxrayexporter", "awss3exporter",
        "azureblobexporter", "azuredataexplorerexporter", "azuremonitorexporter", "bmchelixexporter",
        "carbonexporter", "cassandraexporter", "clickhouseexporter", "coralogixexporter", "datadogexporter",
        "datasetexporter", "dorisexporter", "elasticsearchexporter", "faroexporter", "fileexporter",
        "googlecloudexporter", "googlecloudpubsubexporter", "googlemanagedprometheusexporter",
        "honeycombmarkerexporter", "influxdbexporter", "kafkaexporter", "loadbalancingexporter",
        "logicmonitorexporter", "logzioexporter", "mezmoexporter", "opensearchexporter", "otelarrowexporter",
        "prometheusexporter", "prometheusremotewriteexporter", "pulsarexporter", "rabbitmqexporter",
        "sapmexporter", "sentryexporter", "signalfxexporter", "splunkhecexporter", "stefexporter",
        "sumologicexporter", "syslogexporter", "tencentcloudlogserviceexporter", "tinybirdexporter",
        "zipkinexporter",
    ],
    "processors": [
        "batchprocessor", "memorylimiterprocessor", "attributesprocessor", "cumulativetodeltaprocessor",
        "coralogixprocessor", "deltatocumulativeprocessor", "deltatorateprocessor", "filterprocessor",
        "geoipprocessor", "groupbyattrsprocessor", "groupbytraceprocessor", "intervalprocessor",
        "isolationforestprocessor", "k8sattributesprocessor", "logdedupprocessor", "metricsgenerationprocessor",
        "metricstarttimeprocessor", "metricstransformprocessor", "probabilisticsamplerprocessor",
        "redactionprocessor", "remotetapprocessor", "resourcedetectionprocessor", "resourceprocessor",
        "schemaprocessor", "spanprocessor", "sumologicprocessor", "tailsamplingprocessor", "transformprocessor",
    ],
    "receivers": [
        "nopreceiver", "otlpreceiver", "jaegerreceiver", "kafkareceiver", "zipkinreceiver", "prometheusreceiver",
        "hostmetricsreceiver", "filelogreceiver", "k8sclusterreceiver", "kubeletstatsreceiver",
        "otlpjsonfilereceiver", "otelarrowreceiver", "postgresqlreceiver", "receivercreator", "statsdreceiver",
        "syslogreceiver", "httpcheckreceiver", "dockerstatsreceiver", "k8seventsreceiver", "k8sobjectsreceiver",
    ],
    "connectors": [
        "forwardconnector", "countconnector", "datadogconnector", "exceptionsconnector", "failoverconnector",
        "grafanacloudconnector", "otlpjsonconnector", "roundrobinconnector", "routingconnector",
        "servicegraphconnector", "spanmetricsconnector", "sumconnector", "signaltometricsconnector",
    ],
}
TYPE_EXCEPTIONS = {
    "healthcheckextension": "health_check",
    "filestorage": "file_storage",
    "dbstorage": "db_storage",
    "redisstorageextension": "redis_storage",
    "memorylimiterprocessor": "memory_limiter",
    "tailsamplingprocessor": "tail_sampling",
    "probabilisticsamplerprocessor": "probabilistic_sampler",
    "headerssetterextension": "headers_setter",
    "httpforwarderextension": "http_forwarder",
    "k8sleaderelector": "k8s_leader_elector",
}
_SUFFIX = {"extensions": "extension", "exporters": "exporter", "processors": "processor",
           "receivers": "receiver", "connectors": "connector"}
KINDS = tuple(_SUFFIX)


def known_types(kind: str) -> set[str]:
    out = set()
    for module in CONTRIB_COMPONENTS[kind]:
        out.add(TYPE_EXCEPTIONS.get(module) or module.removesuffix(_SUFFIX[kind]))
    return out


COLLECTOR_CONFIGS = sorted(p for p in (DEPLOY / "otel-collector").glob("*.yaml") if p.name != "kustomization.yaml")
# How the configs are started (files merged in order, as `otelcol-contrib --config a --config b`).
DEPLOYED_CONFIGS = {
    "compose": ["compose.yaml"],
    "gateway": ["gateway.yaml"],
    "sampler-tempo": ["sampler.yaml"],
    "sampler-clickhouse": ["sampler.yaml", "clickhouse.yaml"],
}


def merge(a: Any, b: Any) -> Any:
    """The collector's confmap merge of several --config files: maps merge key by key, anything else
    (lists included) is replaced by the later file."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = deepcopy(a)
        for k, v in b.items():
            out[k] = merge(out[k], v) if k in out else deepcopy(v)
        return out
    return deepcopy(b)


def load_config(name: str) -> dict[str, Any]:
    cfg: dict[str, Any] = {}
    for f in DEPLOYED_CONFIGS[name]:
        cfg = merge(cfg, yaml.safe_load((DEPLOY / "otel-collector" / f).read_text()))
    return cfg


def component_type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def test_every_collector_config_file_is_deployed_somewhere():
    used = {f for files in DEPLOYED_CONFIGS.values() for f in files}
    assert {p.name for p in COLLECTOR_CONFIGS} == used


def test_the_component_list_is_the_one_the_deployed_image_has():
    images = {compose_config()["services"]["otel-collector"]["image"]}
    for target in ("base", "production"):
        images |= {c["image"] for o in kustomize(target) if o["kind"] == "Deployment"
                   for c in o["spec"]["template"]["spec"]["containers"] if "opentelemetry-collector" in c["image"]}
    assert images == {f"otel/opentelemetry-collector-contrib:{CONTRIB_VERSION}"}


@pytest.mark.parametrize("name", sorted(DEPLOYED_CONFIGS))
def test_components_exist_in_the_contrib_distribution(name):
    cfg = load_config(name)
    for kind in KINDS:
        for component_id in cfg.get(kind) or {}:
            assert component_type(component_id) in known_types(kind), (
                f"{name}: {kind[:-1]} {component_id!r} is not in otelcol-contrib {CONTRIB_VERSION}"
            )


def test_component_check_rejects_a_name_the_distribution_lacks():
    """The check above can fail: a core-only spelling (`logging`, removed) or a typo is not in the list."""
    assert "logging" not in known_types("exporters")
    assert "tailsampling" not in known_types("processors")
    assert "tail_sampling" in known_types("processors") and "loadbalancing" in known_types("exporters")


@pytest.mark.parametrize("name", sorted(DEPLOYED_CONFIGS))
def test_pipelines_reference_defined_components(name):
    cfg = load_config(name)
    service = cfg["service"]
    for ext in service.get("extensions", []):
        assert ext in cfg["extensions"], f"{name}: service extension {ext} is not defined"
    pipelines = service["pipelines"]
    assert "traces" in pipelines
    used: dict[str, set[str]] = {k: set() for k in KINDS}
    for pname, p in pipelines.items():
        for kind in ("receivers", "processors", "exporters"):
            for cid in p.get(kind, []):
                assert cid in (cfg.get(kind) or {}) or cid in (cfg.get("connectors") or {}), (
                    f"{name}: pipeline {pname} uses undefined {kind[:-1]} {cid}"
                )
                used[kind].add(cid)
        assert p["receivers"] and p["exporters"], f"{name}: pipeline {pname} is incomplete"
    # memory_limiter first (the collector's own guidance: it must see data before anything buffers it).
    assert pipelines["traces"]["processors"][0] == "memory_limiter", name


def _endpoint_host_port(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.removeprefix("http://").rpartition(":")
    return host, int(port)


def test_compose_collector_fans_out_to_our_collector_and_jaeger():
    cfg = load_config("compose")
    exporters = cfg["service"]["pipelines"]["traces"]["exporters"]
    hosts = {_endpoint_host_port(cfg["exporters"][e]["endpoint"]) for e in exporters}
    assert hosts == {("tracecollector", 4317), ("jaeger", 4317)}
    services = compose_config()["services"]
    assert services["tracecollector"]["environment"]["AGENTFEEDBACK_COLLECTOR_OTLP_GRPC_LISTEN"] == "0.0.0.0:4317"
    assert services["jaeger"]["image"].startswith("jaegertracing/jaeger:2.")  # Jaeger v2 receives OTLP on 4317


def test_gateway_sends_everything_to_our_collector_and_routes_by_trace_id():
    cfg = load_config("gateway")
    pipeline = cfg["service"]["pipelines"]["traces"]
    assert "tail_sampling" not in pipeline["processors"], "our collector must get every span, unsampled"
    ours = cfg["exporters"]["otlp/agentfeedback"]
    lb = cfg["exporters"]["loadbalancing/sampler"]
    assert {"otlp/agentfeedback", "loadbalancing/sampler"} == set(pipeline["exporters"])
    assert lb["routing_key"] == "traceID"
    objs = kustomize("base")
    services = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Service"}
    host, port = _endpoint_host_port(ours["endpoint"])
    assert port in {p["port"] for p in services[host]["spec"]["ports"]}
    assert ours["sending_queue"]["storage"] in cfg["service"]["extensions"]
    sampler_svc = services[lb["resolver"]["dns"]["hostname"]]
    assert sampler_svc["spec"].get("clusterIP") == "None", "the loadbalancing DNS resolver needs a headless Service"


@pytest.mark.parametrize("name", ["sampler-tempo", "sampler-clickhouse"])
def test_sampler_keeps_error_turns_and_turns_with_feedback(name):
    cfg = load_config(name)
    pipeline = cfg["service"]["pipelines"]["traces"]
    assert "tail_sampling" in pipeline["processors"]
    ts = cfg["processors"]["tail_sampling"]
    policies = {p["type"]: p for p in ts["policies"]}
    assert policies["status_code"]["status_code"]["status_codes"] == ["ERROR"]
    ottl = policies["ottl_condition"]["ottl_condition"]
    assert 'name == "feedback.created"' in ottl["spanevent"]
    # Late feedback on an unsampled turn must be decided afresh, not dropped by a cached "no".
    assert not ts.get("decision_cache", {}).get("non_sampled_cache_size")
    assert ts["decision_cache"]["sampled_cache_size"] >= ts["num_traces"]
    (exporter,) = pipeline["exporters"]
    assert component_type(exporter) == ("clickhouse" if name == "sampler-clickhouse" else "otlp")


def test_the_feedback_policy_names_what_the_feedback_service_emits():
    """The OTTL conditions compare span / span event names with what services/feedback really emits."""
    ottl = next(p for p in load_config("sampler-tempo")["processors"]["tail_sampling"]["policies"]
                if p["type"] == "ottl_condition")["ottl_condition"]
    source = "\n".join(p.read_text() for p in (Path(DEPLOY.parent) / "services" / "feedback").glob("*.py"))
    events = set(re.findall(r'add_event\(\s*"([^"]+)"', source))
    spans = set(re.findall(r'start_span\(\s*"([^"]+)"', source))
    wanted_events = {m for c in ottl["spanevent"] for m in re.findall(r'^name == "([^"]+)"$', c)}
    wanted_spans = {m for c in ottl["span"] for m in re.findall(r'^name == "([^"]+)"$', c)}
    assert wanted_events and wanted_events <= events, (wanted_events, events)
    assert wanted_spans and wanted_spans <= spans, (wanted_spans, spans)
