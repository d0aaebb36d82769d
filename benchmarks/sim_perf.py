"""Simulator speed: the openb default trace (8,152 pods, 1,213 nodes; target under 30 s) and a
synthetic tidal trace of 100,000 jobs on 2,000 nodes (target under 5 minutes).

    python benchmarks/sim_perf.py [--openb-only]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from federation.config import load, parse
from federation.jobs import make_job
from federation.simulation.engine import SimOptions
from federation.simulation.run import simulate
from federation.simulation.traces import Trace, TraceJob, generate, read_openb

ROOT = Path(__file__).resolve().parent.parent
OPENB = ROOT.parent / "shared" / "data" / "openb" / "openb_pod_list_default.csv"

BIG = """
federation: {name: big, timezone: UTC}
priority_classes: [{name: normal, value: 100, default: true}, {name: online, value: 1000, preemptible: false}]
sites:
  - name: idc
    kind: idc
    provider: {kind: simulated}
    node_groups:
      - {name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 128, memory_gib_per_node: 1024, count: 1500, racks: 30}
      - {name: h100, gpu_model: H100-80GB, gpus_per_node: 8, cpus_per_node: 192, memory_gib_per_node: 2048, count: 500, racks: 10}
  - name: cloud
    kind: simulated
    provider: {kind: simulated}
    node_groups:
      - {name: spot, gpu_model: A100-40GB, gpus_per_node: 8, cpus_per_node: 96, memory_gib_per_node: 1152, max_nodes: 200, spot: true, price_usd_per_hour: 11.57, boot_s: 420}
queues:
  - {name: online, guarantee: {gpu: 2000}, deserved: {gpu: 4000}, weight: 2, sites: [idc]}
  - {name: research, deserved: {gpu: 8000}}
  - {name: research-nlp, parent: research, deserved: {gpu: 5000}, burst: true}
  - {name: research-vision, parent: research, deserved: {gpu: 3000}, burst: true}
  - {name: batch, deserved: {gpu: 4000}, burst: true}
policies:
  burst: {enabled: true, pending_wait_s: 600, budget_usd_per_hour: 2000}
"""


def timed(fed, trace, label):
    t0 = time.perf_counter()
    report, _ = simulate(fed, trace, None, SimOptions(seed=0), html=False)
    wall = time.perf_counter() - t0
    print(f"{label}: {report['jobs']['submitted']} jobs, {report['jobs']['completed']} completed, "
          f"utilization {report['gpu_utilization']['overall']:.3f}, wait p95 {report['wait_s']['p95']:.0f} s, "
          f"invariants {report['invariants']}: {wall:.1f} s wall")


def main() -> None:
    if OPENB.exists():
        fed = load(ROOT / "configs" / "openb.yaml")
        t0 = time.perf_counter()
        trace = read_openb(OPENB, fed, skip_bad_lines=True)
        print(f"openb trace read in {time.perf_counter() - t0:.1f} s ({len(trace.skipped)} never-scheduled pods skipped)")
        timed(fed, trace, "openb default on configs/openb.yaml")
    if "--openb-only" in sys.argv:
        return
    fed = parse(BIG, "big.yaml")
    records = generate({"inference": "online", "training": "research-nlp", "batch": "batch"}, jobs=100_000, days=14, seed=1)
    jobs = []
    for r in records:
        r = dict(r)
        dur, ckpt = r.pop("duration_s"), r.pop("checkpoint_interval_s", None)
        jobs.append(TraceJob(make_job(fed, **r), dur, ckpt))
    timed(fed, Trace(jobs), "synthetic tidal, 100,000 jobs over 14 days on 2,000 nodes")


if __name__ == "__main__":
    main()
