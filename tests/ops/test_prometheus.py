"""deploy/monitoring with the real Prometheus (Debian's `prometheus` package, which `make test` installs
through scripts/ensure_system_packages.sh): the alert rules pass `promtool check rules` and their unit
tests, and a Prometheus server scraping a running stack sees every service up, its counters moving
as traffic flows, its rules loaded, and every dashboard query valid."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import yaml

from agentfeedback.chat.v1 import chat_pb2
from agentfeedback.feedback.v1 import feedback_pb2 as pb
from tests.helpers.procs import reported_port
from tests.stack import Stack

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
JOBS = {"chat": "chat", "agent": "agent", "feedback": "feedback", "tracecollector": "collector"}


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not installed: `make test` installs Debian's prometheus (scripts/ensure_system_packages.sh)"
    return path


def test_alert_rules_pass_promtool_check_and_their_unit_tests():
    check = subprocess.run([_tool("promtool"), "check", "rules", str(MONITORING / "alerts.yaml")],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 15 rules found" in check.stdout
    unit = subprocess.run([_tool("promtool"), "test", "rules", "alerts_test.yaml"], cwd=MONITORING,
                          capture_output=True, text=True, timeout=60)
    assert unit.returncode == 0, unit.stdout + unit.stderr


def _dashboard_queries() -> list[str]:
    dash = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return [t["expr"] for p in dash["panels"] for t in p["targets"]]


async def _query(http: httpx.AsyncClient, base: str, expr: str) -> list[dict]:
    r = await http.get(f"{base}/api/v1/query", params={"query": expr})
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", (expr, body)
    return body["data"]["result"]


async def test_a_real_prometheus_scrapes_the_stack_and_sees_counters_move(stack: Stack, tmp_path: Path):
    targets = [{"targets": [f"127.0.0.1:{stack.metrics_port(svc)}"], "labels": {"job": job}}
               for job, svc in JOBS.items()]
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": [str(MONITORING / "alerts.yaml")],
              "scrape_configs": [{"job_name": "agentfeedback", "static_configs": targets, "honor_labels": True}]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([_tool("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", "--web.listen-address=127.0.0.1:0"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        # Port 0: Prometheus binds any free port and logs the one it got.
        port = await reported_port(tmp_path / "prometheus.log", proc, r'msg="Listening on" address=127\.0\.0\.1:(\d+)')
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(timeout=5.0) as http:
            deadline = time.monotonic() + 60
            while True:  # every target scraped and up
                assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
                try:
                    up = await _query(http, base, "up")
                except (httpx.HTTPError, ValueError):
                    up = []
                if len(up) == len(JOBS) and all(r["value"][1] == "1" for r in up):
                    break
                assert time.monotonic() < deadline, up
                await asyncio.sleep(0.5)

            async def total(expr: str) -> float:
                got = await _query(http, base, expr)
                return sum(float(r["value"][1]) for r in got)

            accepted0 = await total("sum(otelcol_receiver_accepted_spans_total)")
            turns0 = await total('sum(agentfeedback_chat_turns_total{outcome="OK"})')
            reports0 = await total("sum(agentfeedback_feedback_reports_created_total)")
            md = stack.md()
            inst = (await stack.chat().CreateInstance(chat_pb2.CreateInstanceRequest(
                instance=chat_pb2.Instance(display_name="prom", agent="reference")), metadata=md)).name
            for i in range(3):
                t = await stack.chat().SendMessage(chat_pb2.SendMessageRequest(
                    instance=inst, content=f"turn {i}", request_id=str(uuid.uuid4())), metadata=md)
            await stack.feedback().CreateFeedback(pb.CreateFeedbackRequest(
                feedback=pb.Feedback(message=t.reply.name, body="seen by prometheus"), request_id=str(uuid.uuid4())),
                metadata=md)
            await stack.aflush_spans()
            deadline = time.monotonic() + 30
            while True:
                moved = (await total("sum(otelcol_receiver_accepted_spans_total)") > accepted0,
                         await total('sum(agentfeedback_chat_turns_total{outcome="OK"})') >= turns0 + 3,
                         await total("sum(agentfeedback_feedback_reports_created_total)") >= reports0 + 1)
                if all(moved):
                    break
                assert time.monotonic() < deadline, moved
                await asyncio.sleep(0.5)
            sends = await total('sum(rpc_server_duration_milliseconds_count{job="chat",rpc_method="SendMessage",'
                                'rpc_grpc_status_code="0"})')
            assert sends >= 3
            up = await total('min by (job) (agentfeedback_dependency_up{dependency="postgresql"})')
            assert up == 3  # chat, feedback, tracecollector probe PostgreSQL and reach it

            rules = (await http.get(f"{base}/api/v1/rules")).json()["data"]["groups"]
            loaded = {r["name"]: r["health"] for g in rules for r in g["rules"]}
            shipped = [r.get("alert") or r["record"] for g in yaml.safe_load((MONITORING / "alerts.yaml").read_text())["groups"]
                       for r in g["rules"]]
            assert sorted(loaded) == sorted(shipped) and len(shipped) == 15 and set(loaded.values()) == {"ok"}, loaded
            firing = (await http.get(f"{base}/api/v1/alerts")).json()["data"]["alerts"]
            assert not [a for a in firing if a["state"] == "firing"], firing
            for expr in _dashboard_queries():
                await _query(http, base, expr)  # every panel's query is valid PromQL here
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
