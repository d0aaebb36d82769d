"""Burst against no burst, in the simulator, on a tidal trace whose workday peak exceeds the IDC.

    python benchmarks/burst.py [--days 3] [--jobs 700] [--seed 1] [--pending-wait-s 600] [--scale-in-idle-s 300]

Prints, for each run: the p95 wait of the burst-enabled queues, the cloud spend, and idle-paid
node-hours (booting or idle, paid for) as a share of paid node-hours (target under 15%).
"""

from __future__ import annotations

import argparse
import time

from federation.config import parse
from federation.jobs import make_job
from federation.simulation.engine import SimOptions
from federation.simulation.run import simulate
from federation.simulation.traces import Trace, TraceJob, generate

CONFIG = """
federation: {{name: burst-bench, timezone: UTC}}
priority_classes: [{{name: normal, value: 100, default: true}}, {{name: online, value: 1000, preemptible: false}}]
sites:
  - name: idc
    kind: idc
    provider: {{kind: simulated}}
    node_groups:
      - {{name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 128, memory_gib_per_node: 1024, count: 16, racks: 2}}
  - name: cloud
    kind: simulated
    provider: {{kind: simulated}}
    node_groups:
      - {{name: spot, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 96, memory_gib_per_node: 1152, max_nodes: 24,
         spot: true, price_usd_per_hour: 11.57, boot_s: 420, fallback: on-demand, spot_interruptions_per_hour: 0.02}}
      - {{name: on-demand, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 96, memory_gib_per_node: 1152, max_nodes: 8,
         price_usd_per_hour: 32.77, boot_s: 420}}
queues:
  - {{name: online, guarantee: {{gpu: 32}}, deserved: {{gpu: 48}}, weight: 2, sites: [idc]}}
  - {{name: research, deserved: {{gpu: 56}}, burst: true}}
  - {{name: batch, deserved: {{gpu: 24}}, burst: true}}
policies:
  preemption: {{reclaim: true, grace_s: 120}}
  burst: {{enabled: {enabled}, pending_wait_s: {wait}, budget_usd_per_hour: 400, scale_in_idle_s: {idle}, provisioning_timeout_s: 1800}}
"""
BURST_QUEUES = ("research", "batch")


def run(enabled: bool, days: float, jobs: int, seed: int, wait: float = 600, idle: float = 300) -> dict:
    fed = parse(CONFIG.format(enabled=str(enabled).lower(), wait=wait, idle=idle), "burst-bench.yaml")
    trace = []
    for r in generate({"inference": "online", "training": "research", "batch": "batch"}, jobs=jobs, days=days, seed=seed):
        r = dict(r)
        dur, ckpt = r.pop("duration_s"), r.pop("checkpoint_interval_s", None)
        trace.append(TraceJob(make_job(fed, **r), dur, ckpt))
    t0 = time.perf_counter()
    report, _ = simulate(fed, Trace(trace), None, SimOptions(seed=seed), html=False)
    report["bench_wall_s"] = time.perf_counter() - t0
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=3)
    ap.add_argument("--jobs", type=int, default=700)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pending-wait-s", type=float, default=600)
    ap.add_argument("--scale-in-idle-s", type=float, default=300)
    a = ap.parse_args()
    print(f"{a.jobs} jobs over {a.days:g} days, seed {a.seed}; IDC 16 x 8 A100; cloud spot (24 max) falling back to on-demand (8 max); "
          f"pending_wait_s {a.pending_wait_s:g}, scale_in_idle_s {a.scale_in_idle_s:g}")
    for enabled in (False, True):
        rep = run(enabled, a.days, a.jobs, a.seed, a.pending_wait_s, a.scale_in_idle_s)
        c = rep["cloud"]
        waits = {q: rep["per_queue"][q]["wait_s"] for q in BURST_QUEUES}
        idle_share = c["idle_paid_node_hours"] / c["paid_node_hours"] if c["paid_node_hours"] else 0.0
        print(f"burst {'on ' if enabled else 'off'}: wait p95 " + ", ".join(f"{q} {w['p95']:.0f} s" for q, w in waits.items())
              + f"; online p95 {rep['per_queue']['online']['wait_s']['p95']:.0f} s"
              + f"; completed {rep['jobs']['completed']}/{rep['jobs']['submitted']}; cloud {c['cost_usd']:.0f} USD, "
              f"{c['paid_node_hours']:.1f} paid node-h, idle-paid {idle_share:.1%}; preempted {rep['jobs']['preempted']}; "
              f"invariants {rep['invariants']['violations'] if 'violations' in rep['invariants'] else rep['invariants']}; "
              f"{rep['bench_wall_s']:.1f} s wall")


if __name__ == "__main__":
    main()
