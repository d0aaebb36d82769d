"""`fedctl demo`: the main job, end to end, on this machine.

Starts what `fedctl up` starts (a local Ray cluster with logical GPUs, the controller's actors, the
Ray Jobs API), submits a small mixed workload with the stock `ray job submit` CLI (an inference
job, two training gangs that contend, a gang that must wait for burst nodes, a batch job), shows
a live table of queues and jobs, and ends with a summary once every job finished.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import requests
from rich.console import Console
from rich.live import Live
from rich.table import Table

from federation.errors import FederationError
from federation.model import Federation
from federation.runtime.localray import free_port, ray_cli
from federation.runtime.sites import TERMINAL
from federation.runtime.up import start
from federation.store import Store

WORKLOAD = [  # (submission id, metadata, seconds of work)
    ("chat-serve", {"queue": "online", "gpus_per_task": "1", "priority": "online"}, 30),
    ("train-a", {"queue": "training", "tasks": "2", "gpus_per_task": "2"}, 25),
    ("train-b", {"queue": "training", "tasks": "2", "gpus_per_task": "2"}, 25),
    ("etl", {"queue": "batch", "gpus_per_task": "1"}, 10),
    ("train-big", {"queue": "training", "tasks": "2", "gpus_per_task": "4"}, 15),
]


def _table(store: Store, cloud: list[str], started: float, name: str) -> Table:
    t = Table(title=f"federation {name}: {time.time() - started:.0f} s")
    for col in ("job", "queue", "status", "site", "why / where"):
        t.add_column(col)
    for row in store.jobs():
        t.add_row(row.id, row.request.get("queue", ""), row.status, row.site or "-", (row.message or "")[:90])
    t.caption = f"burst nodes up: {', '.join(cloud) or 'none'}"
    return t


def _cloud_nodes(fed: Federation, url: str) -> list[str]:
    try:
        doc = requests.get(f"{url}/api/federation/status", timeout=10).json()
    except (requests.RequestException, ValueError):
        return []
    return [n["name"] for n in doc["nodes"] if fed.site(n["site"]).is_cloud]


def run_demo(fed: Federation, console: Console, timeout_s: float = 420.0) -> bool:
    missing = {q for _, m, _ in WORKLOAD for q in [m["queue"]] if q not in fed.leaf_queues}
    if missing:
        raise FederationError(f"the demo submits to queues {sorted(missing)}, which this config does not have; run it on configs/local.yaml")
    local = [s for s in fed.sites if s.kind == "local"]
    if not local:
        raise FederationError("the demo needs local sites (configs/local.yaml)")
    state = Path(tempfile.mkdtemp(prefix="fedctl-demo-")) / "state.sqlite"
    up = start(fed, state, 1.0, f"127.0.0.1:{free_port()}", None, lambda m: console.print(m, markup=False, highlight=False))
    store, ray, url = Store(state), ray_cli(), up.url
    console.print(f"[bold]fedctl demo[/bold]: local Ray cluster at {up.dashboard}, federation API at {url} (its controller runs as Ray actors); "
                  "submitting with the stock `ray job submit`")
    ok = False
    try:
        for job_id, meta, seconds in WORKLOAD:
            cmd = [ray, "job", "submit", "--address", url, "--submission-id", job_id, "--metadata-json", json.dumps(meta), "--no-wait",
                   "--", "python", "-c", f"import time; time.sleep({seconds}); print('{job_id} done')"]
            r = subprocess.run(cmd, env=up.env, capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise FederationError(f"ray job submit {job_id} failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
        started = time.time()
        seen: dict[str, tuple] = {}
        with Live(_table(store, [], started, fed.name), console=console, refresh_per_second=2, transient=not console.is_terminal) as live:
            while time.time() - started < timeout_s:
                live.update(_table(store, _cloud_nodes(fed, url), started, fed.name))
                if not console.is_terminal:  # piped (CI, a log): the live table is not shown, so say what changes as it changes
                    for r in store.jobs():
                        now = (r.status, r.site, r.reason)
                        if seen.get(r.id) != now:
                            seen[r.id] = now
                            console.print(f"{time.time() - started:5.0f} s  {r.id}: {r.status}" + (f" at {r.site}" if r.site else "")
                                          + (f" ({r.reason})" if r.reason and r.status == "PENDING" else ""), markup=False, highlight=False)
                if all(r.status in TERMINAL for r in store.jobs()):
                    break
                time.sleep(1)
        rows = store.jobs()
        ok = all(r.status == "SUCCEEDED" for r in rows)
        summary = Table(title="summary")
        for col in ("job", "queue", "site", "waited (s)", "ran (s)", "status"):
            summary.add_column(col)
        for r in rows:
            waited = (r.started_s or r.submitted_s) - r.submitted_s
            ran = (r.ended_s - r.started_s) if r.ended_s and r.started_s else 0
            summary.add_row(r.id, r.request.get("queue", ""), r.site or "-", f"{waited:.0f}", f"{ran:.0f}", r.status)
        console.print(summary)
        console.print("every job finished" if ok else "[red]not every job succeeded in time[/red]")
        return ok
    finally:
        up.close()
