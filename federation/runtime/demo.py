"""`fedctl demo`: the main job, end to end, on this machine.

Starts what `fedctl up` starts (a local Ray cluster with logical GPUs, the controller, the Ray
Jobs API), submits a small mixed workload with the stock `ray job submit` CLI (an inference
job, two training gangs that contend, a gang that must wait for burst nodes, a batch job), shows
a live table of queues and jobs, and ends with a summary once every job finished.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from federation.errors import FederationError
from federation.model import Federation
from federation.runtime.api import serve
from federation.runtime.controller import Controller, config_nodes
from federation.runtime.localray import free_port, ray_cli, start_local_ray
from federation.runtime.sites import TERMINAL, RaySite
from federation.store import Store
from providers.local import LocalProvider

WORKLOAD = [  # (submission id, metadata, seconds of work)
    ("chat-serve", {"queue": "online", "gpus_per_task": "1", "priority": "online"}, 30),
    ("train-a", {"queue": "training", "tasks": "2", "gpus_per_task": "2"}, 25),
    ("train-b", {"queue": "training", "tasks": "2", "gpus_per_task": "2"}, 25),
    ("etl", {"queue": "batch", "gpus_per_task": "1"}, 10),
    ("train-big", {"queue": "training", "tasks": "2", "gpus_per_task": "4"}, 15),
]


def _table(ctl: Controller, started: float) -> Table:
    t = Table(title=f"federation {ctl.fed.name}: {time.time() - started:.0f} s")
    for col in ("job", "queue", "status", "site", "why / where"):
        t.add_column(col)
    for row in ctl.store.jobs():
        t.add_row(row.id, row.request.get("queue", ""), row.status, row.site or "-", (row.message or "")[:90])
    nodes = ", ".join(n.name for n in ctl.cloud_nodes) or "none"
    t.caption = f"burst nodes up: {nodes}"
    return t


def run_demo(fed: Federation, console: Console, timeout_s: float = 420.0) -> bool:
    missing = {q for _, m, _ in WORKLOAD for q in [m["queue"]] if q not in fed.leaf_queues}
    if missing:
        raise FederationError(f"the demo submits to queues {sorted(missing)}, which this config does not have; run it on configs/local.yaml")
    local = [s for s in fed.sites if s.kind == "local"]
    if not local:
        raise FederationError("the demo needs local sites (configs/local.yaml)")
    dashboard, gcs, env = start_local_ray(config_nodes(fed, [s.name for s in local]))
    ray = ray_cli()
    state = Path(tempfile.mkdtemp(prefix="fedctl-demo-")) / "state.sqlite"
    providers = {s.name: LocalProvider(s.name, gcs, dashboard, getattr(s.provider, "start_delay_s", 0.0), env) for s in local if s.is_cloud}
    ctl = Controller(fed, Store(state), {s.name: RaySite(s.name, dashboard) for s in local}, providers=providers)
    port = free_port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder = {}

    def serve_forever():
        asyncio.set_event_loop(loop)
        holder["runner"] = loop.run_until_complete(serve(ctl, "127.0.0.1", port, cycle_s=1.0))
        ready.set()
        loop.run_forever()

    threading.Thread(target=serve_forever, daemon=True).start()
    ready.wait(30)
    url = f"http://127.0.0.1:{port}"
    console.print(f"[bold]fedctl demo[/bold]: local Ray cluster at {dashboard}, federation API at {url}; submitting with the stock `ray job submit`")
    ok = False
    try:
        for job_id, meta, seconds in WORKLOAD:
            cmd = [ray, "job", "submit", "--address", url, "--submission-id", job_id, "--metadata-json", json.dumps(meta), "--no-wait",
                   "--", "python", "-c", f"import time; time.sleep({seconds}); print('{job_id} done')"]
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise FederationError(f"ray job submit {job_id} failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
        started = time.time()
        with Live(_table(ctl, started), console=console, refresh_per_second=2, transient=not console.is_terminal) as live:
            while time.time() - started < timeout_s:
                live.update(_table(ctl, started))
                if all(r.status in TERMINAL for r in ctl.store.jobs()):
                    break
                time.sleep(1)
        rows = ctl.store.jobs()
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
        asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        for p in providers.values():
            p.close()
        subprocess.run([ray, "stop"], env=env, capture_output=True, timeout=120)
