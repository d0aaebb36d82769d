"""What a platform engineer watches: /metrics has every series the dashboard and the alert rules
name from the first scrape (zeros, not gaps), the exposition is valid, and the alert rules pass
their own promtool unit tests."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from federation.config import parse
from federation.runtime.api import make_app
from federation.runtime.controller import Controller
from federation.store import Store

from .conftest import ROOT
from .test_controller_faults import SITES, FakeSite

CONFIG = "federation: {name: watched, timezone: UTC}" + SITES + """  - name: cloud
    kind: simulated
    provider: {kind: simulated}
    node_groups:
      - {name: od, gpu_model: A100-40GB, gpus_per_node: 8, cpus_per_node: 96, memory_gib_per_node: 1152, min_nodes: 0, max_nodes: 2, price_usd_per_hour: 30}
queues:
  - {name: research, deserved: {gpu: 8}, capability: {gpu: 24}, burst: true}
  - {name: online, guarantee: {gpu: 4}, deserved: {gpu: 8}}
policies:
  burst: {enabled: true, budget_usd_per_month: 5000}
"""
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian's prometheus package has it)")


@pytest.fixture
def scrape(tmp_path):
    c = Controller(parse(CONFIG), Store(tmp_path / "s.db"), {"idc": FakeSite()})
    c.submit({"entrypoint": "x", "submission_id": "big", "metadata": {"queue": "online", "gpus_per_task": "8", "tasks": "2"}})
    c.tick()  # the IDC is full
    c.submit({"entrypoint": "x", "submission_id": "waits", "metadata": {"queue": "online", "gpus_per_task": "8"}})
    c.tick()

    async def go():
        async with TestClient(TestServer(make_app(c, None))) as client:
            return await (await client.get("/metrics")).text()

    return asyncio.run(go())


def samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_counters_and_per_site_and_queue_series_exist_at_zero_before_anything_happens(scrape):
    got = samples(scrape)
    assert {s.labels["site"]: s.value for s in got["federation_admissions_total"]} == {"idc": 1.0, "cloud": 0.0}
    assert {s.labels["site"]: s.value for s in got["federation_site_gpus_allocated"]} == {"idc": 16.0, "cloud": 0.0}
    assert {s.labels["reason"] for s in got["federation_preemptions_total"]} >= {"Reclaim", "Priority", "QuotaShrink", "WindowPrepare"}
    assert {s.labels["site"]: s.value for s in got["federation_cloud_nodes"]} == {"cloud": 0.0}
    assert {s.labels["site"]: s.value for s in got["federation_site_gpus"]} == {"idc": 16.0, "cloud": 0.0}
    assert {s.labels["queue"]: s.value for s in got["federation_queue_gpu_guarantee"]} == {"research": 0.0, "online": 4.0}
    assert {s.labels["queue"]: s.value for s in got["federation_queue_gpu_capability"]}["online"] == float("inf")
    assert got["federation_cloud_budget_usd_month"][0].value == 5000.0
    assert got["federation_build_info"][0].labels["federation"] == "watched"
    assert {s.labels["queue"]: s.value for s in got["federation_queue_pending_jobs"]} == {"research": 0.0, "online": 1.0}


def expressions() -> list[str]:
    dash = json.loads((ROOT / "deploy" / "grafana" / "gpu-federation.json").read_text())
    import yaml

    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yaml").read_text())
    return [t["expr"] for p in dash["panels"] for t in p["targets"]] + [r["expr"] for g in rules["groups"] for r in g["rules"]]


def test_every_series_the_dashboard_and_the_alerts_name_is_served(scrape):
    served = set(samples(scrape))
    named = {m for e in expressions() for m in re.findall(r"\bfederation_[a-z_]+", e)}
    assert len(named) >= 15
    assert named <= served, sorted(named - served)


@needs_promtool
def test_the_exposition_is_valid_for_promtool(scrape):
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=scrape, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr  # lint findings included


@needs_promtool
def test_the_alert_rules_pass_promtool_check_and_their_unit_tests():
    rules = ROOT / "deploy" / "prometheus"
    for args in (["check", "rules", "alerts.yaml"], ["test", "rules", "alerts_test.yaml"]):
        r = subprocess.run([PROMTOOL, *args], cwd=rules, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr


def test_showback_counts_each_queues_gpu_seconds_in_metrics_and_status(tmp_path):
    """Per-queue GPU-hours, as `fedctl simulate` reports them: a 16-GPU gang for half an hour is
    8 GPU-hours to its queue (in /metrics as seconds), nothing to the other."""
    clock = [1_800_000_000.0]
    c = Controller(parse(CONFIG), Store(tmp_path / "s.db"), {"idc": FakeSite()}, clock=lambda: clock[0])
    c.submit({"entrypoint": "x", "submission_id": "big", "metadata": {"queue": "online", "gpus_per_task": "8", "tasks": "2"}})
    c.tick()
    clock[0] += 1800
    c.tick()

    async def go():
        async with TestClient(TestServer(make_app(c, None))) as client:
            return await (await client.get("/metrics")).text()

    got = samples(asyncio.run(go()))
    assert {s.labels["queue"]: s.value for s in got["federation_queue_gpu_seconds_total"]} == {"research": 0.0, "online": 16 * 1800.0}
    assert {s.labels["queue"]: s.value for s in got["federation_queue_cloud_cost_usd_total"]} == {"research": 0.0, "online": 0.0}
    assert c.status()["showback"]["queues"]["online"] == {"gpu_hours": 8.0, "cloud_gpu_hours": 0.0, "cost_usd": 0.0}
