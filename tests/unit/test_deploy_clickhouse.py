"""deploy/: the span store's ClickHouse cluster lines up in compose and in the production overlay — the
collector points at a server of the cluster that deploy/clickhouse/cluster.xml defines, every host that file
lists is a server with its shard and replica macros, Keeper ids match the raft configuration, and the schema
the collector creates there is ReplicatedMergeTree under Distributed."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from urllib.parse import urlsplit

from services.tracecollector.clickhouse import Tables, schema_statements
from tests.helpers.deploy import DEPLOY, compose_config, kustomize, pod_spec, workloads

CLUSTER = ET.parse(DEPLOY / "clickhouse" / "cluster.xml").getroot()
KEEPER = ET.parse(DEPLOY / "clickhouse" / "keeper.xml").getroot()


def cluster_layout() -> tuple[str, list[list[str]]]:
    """(cluster name, hosts per shard) of remote_servers."""
    (cluster,) = list(CLUSTER.find("remote_servers"))
    shards = [[r.findtext("host") for r in shard.findall("replica")] for shard in cluster.findall("shard")]
    return cluster.tag, shards


def test_cluster_is_sharded_and_replicated_through_keeper():
    name, shards = cluster_layout()
    assert name == "spans" and len(shards) >= 2 and all(len(s) >= 2 for s in shards)
    assert all(s.findtext("internal_replication") == "true" for s in CLUSTER.find("remote_servers")[0])
    assert len(CLUSTER.find("zookeeper").findall("node")) == 3
    raft = KEEPER.find("keeper_server/raft_configuration")
    assert [s.findtext("id") for s in raft] == ["1", "2", "3"]
    stmts = schema_statements(Tables("otel", "otel_traces", cluster=name), retention_days=14)
    assert "ReplicatedMergeTree()" in stmts[0] and any("ENGINE = Distributed('spans'" in s for s in stmts)


def test_compose_collector_uses_the_cluster_and_every_listed_host_is_a_server_with_its_macros():
    cfg = compose_config()["services"]
    name, shards = cluster_layout()
    env = cfg["tracecollector"]["environment"]
    assert env["AGENTFEEDBACK_COLLECTOR_SPAN_STORE"] == "clickhouse"
    assert env["AGENTFEEDBACK_COLLECTOR_CLICKHOUSE_CLUSTER"] == name
    url = urlsplit(env["AGENTFEEDBACK_COLLECTOR_CLICKHOUSE_URL"])
    assert url.hostname in cfg and url.port == 8123
    for shard_no, hosts in enumerate(shards, start=1):
        for host in hosts:
            service = cfg[host.split(".")[0]]
            assert host in service["networks"]["default"]["aliases"]
            assert service["environment"]["CLICKHOUSE_SHARD"] == str(shard_no)
            assert service["environment"]["CLICKHOUSE_REPLICA"] == host
    for i, node in enumerate(CLUSTER.find("zookeeper").findall("node")):
        keeper = cfg[node.findtext("host").split(".")[0]]
        assert keeper["environment"]["KEEPER_ID"] == str(i + 1)


def test_production_collector_uses_the_cluster_served_by_a_statefulset_of_every_listed_host():
    objs = kustomize("production")
    name, shards = cluster_layout()
    collector = next(w for w in workloads(objs) if w["metadata"]["name"] == "tracecollector")
    env = {e["name"]: e.get("value") for e in pod_spec(collector)["containers"][0]["env"]}
    assert env["AGENTFEEDBACK_COLLECTOR_SPAN_STORE"] == "clickhouse"
    assert env["AGENTFEEDBACK_COLLECTOR_CLICKHOUSE_CLUSTER"] == name
    host = urlsplit(env["AGENTFEEDBACK_COLLECTOR_CLICKHOUSE_URL"]).hostname
    services = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Service"}
    assert services[host]["spec"]["selector"] == {"app.kubernetes.io/name": "clickhouse"}
    sts = {o["metadata"]["name"]: o for o in objs if o["kind"] == "StatefulSet"}
    ch, keeper = sts["clickhouse"], sts["clickhouse-keeper"]
    hosts = [h for s in shards for h in s]
    assert ch["spec"]["replicas"] == len(hosts) and ch["spec"]["serviceName"] == "clickhouse"
    assert hosts == [f"clickhouse-{i}.clickhouse" for i in range(len(hosts))]  # ordinal order: shard = i // 2 + 1
    assert keeper["spec"]["replicas"] == len(KEEPER.find("keeper_server/raft_configuration"))
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("clickhouse-config"))
    for f in ("cluster.xml", "users.xml", "keeper.xml"):
        assert cm["data"][f] == (DEPLOY / "clickhouse" / f).read_text()
