"""The live controller applies the tidal windows' quotas, as the simulator does, and says which
windows are active. The site's Ray cluster is unreachable here: these tests stop at admission."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from federation.config import parse
from federation.errors import BadSubmission
from federation.runtime.controller import Controller
from federation.runtime.sites import RaySite
from federation.store import Store

CONFIG = """
federation: {name: tide, timezone: Asia/Shanghai}
sites:
  - name: idc
    kind: idc
    ray_address: http://127.0.0.1:9
    node_groups:
      - {name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 6}
queues:
  - {name: research, deserved: {gpu: 16}, capability: {gpu: 16}}
policies:
  tidal:
    - name: night-training
      window: {start: "22:00", end: "08:00"}
      queues:
        research: {capability: {gpu: 32}}
"""


def at(hour: int) -> float:
    return datetime(2026, 12, 3, hour, 0, tzinfo=ZoneInfo("Asia/Shanghai")).timestamp()


@pytest.fixture
def ctl(tmp_path):
    clock = [at(12)]
    c = Controller(parse(CONFIG), Store(tmp_path / "s.db"), {"idc": RaySite("idc", "http://127.0.0.1:9")}, clock=lambda: clock[0])
    return c, clock


def submit(c, job_id, tasks):
    c.submit({"entrypoint": "python train.py", "submission_id": job_id, "metadata": {"queue": "research", "tasks": str(tasks), "gpus_per_task": "8"}})


def test_a_gang_only_a_night_window_allows_waits_for_the_night(ctl):
    c, clock = ctl
    submit(c, "big", 3)  # 24 GPUs: above the day's capability of 16, within the night's 32
    c.tick()
    row = c.store.get("big")
    assert row.status == "PENDING" and row.reason == "ExceedsCapability"
    st = c.status()
    assert st["tidal"] == {"active": [], "next_transition": datetime(2026, 12, 3, 22, 0, tzinfo=ZoneInfo("Asia/Shanghai")).isoformat()}
    assert next(q for q in st["queues"] if q["name"] == "research")["guarantee"]["gpu"] == 0
    clock[0] = at(23)
    c.tick()
    assert c.store.get("big").status == "ADMITTED"
    assert c.status()["tidal"]["active"] == ["night-training"]


def test_a_gang_above_every_window_is_rejected_at_submit(ctl):
    c, _ = ctl
    with pytest.raises(BadSubmission, match="capability"):
        submit(c, "huge", 5)  # 40 GPUs: above even the night's 32


def test_fedctl_status_shows_how_well_the_forecast_predicted_the_last_day(tmp_path):
    """Sixteen days of a nightly research gang in the journal: `fedctl status` reports the
    forecast's error on the last day, learned without it, beside the last-hour baseline."""
    import subprocess
    import sys

    from federation.runtime.api import Serving
    from federation.store import JobRow
    from tests.test_live import free_port

    fed = parse(CONFIG + "    - name: prewarm\n      forecast: {history_days: 14, lead_s: 900}\n")
    store = Store(tmp_path / "s.db")
    for d in range(16):
        start = at(23) - (16 - d) * 86400
        store.insert(JobRow(f"past-{d}", "python train.py", {}, {}, {"queue": "research", "tasks": 2, "gpus_per_task": 8.0},
                            status="SUCCEEDED", site="idc", submitted_s=start, started_s=start, ended_s=start + 3600))
    c = Controller(fed, store, {"idc": RaySite("idc", "http://127.0.0.1:9")}, clock=lambda: at(12))
    waiting = "raysubmit_" + "x" * 30  # as long as Ray's own ids, and more
    submit(c, waiting, 3)  # 24 GPUs: only the night's capability allows it
    c.tick()  # learns the profile (the serving loop's own first cycle might come after the status read)
    serving = Serving(c, "127.0.0.1", free_port(), cycle_s=0.2)
    try:
        r = subprocess.run([sys.executable, "-m", "federation.cli", "status", "--address", serving.url], capture_output=True, text=True, timeout=60)
    finally:
        serving.close()
    assert r.returncode == 0, r.stderr
    assert "forecast error over the last 24 h, learned without them: 0.00 GPUs per queue and hour" in r.stdout, r.stdout
    assert c.forecast_error["last_hour_mae"] > 0
    assert waiting in r.stdout


def test_fedctl_status_never_cuts_a_job_id_on_a_narrow_terminal():
    from rich.console import Console

    from federation.status_view import pending_table

    job = "raysubmit_" + "x" * 30  # as long as Ray's own ids, and more
    con = Console(width=80, record=True)
    con.print(pending_table([{"job": job, "queue": "research-vision", "position": 12, "message": "ExceedsCapability: " + "the numbers " * 12}]))
    assert job in con.export_text()  # whole: people copy it into `fedctl explain`
