"""A week of tide on the canonical federation: no tidal policy, windows only, windows plus forecast.

    python benchmarks/tidal_week.py [--jobs 1000] [--seed 1]

One 7-day trace from the generator's tidal pattern (inference by day, half of it on 1g.10gb MIG
instances; training gangs of at most 4 nodes and batch filling the night) runs through
configs/idc-aws-gcp.yaml three ways: with its tidal policies removed, with its windows but not its
forecast policy, and as it is. From each run's event stream this prints:

- online p99 wait for jobs submitted inside the daytime window (weekdays 08:00-22:00 local),
  and outside it;
- training throughput at night: GPU-hours that research and batch work ran between 22:00 and
  08:00, and the training jobs that finished;
- cloud spend and the share of paid cloud node-time that was idle;
- readiness at each weekday 08:00: of the daytime online guarantee (32 GPUs), how much was used
  by online or not held by other queues' work on its site, the IDC (counted from the events, the
  same way in all three runs; report.json's `tidal` block also discounts GPUs being re-sliced).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import yaml

from federation.config import parse
from federation.simulation.engine import SimOptions
from federation.simulation.run import simulate
from federation.simulation.traces import generate, read_jsonl

CONFIG = Path(__file__).parent.parent / "configs" / "idc-aws-gcp.yaml"
START = datetime(2026, 1, 5)  # a Monday: the simulator's default t = 0
IDC = "idc-beijing"


def variants() -> dict[str, str]:
    base = yaml.safe_load(CONFIG.read_text())
    bare = json.loads(json.dumps(base))
    bare["policies"]["tidal"] = []
    windows = json.loads(json.dumps(base))
    windows["policies"]["tidal"] = [t for t in base["policies"]["tidal"] if "forecast" not in t]
    return {"no tidal policy": yaml.safe_dump(bare), "windows only": yaml.safe_dump(windows), "windows + forecast": CONFIG.read_text()}


def local(t: float) -> datetime:
    return START + timedelta(seconds=t)


def daytime(t: float) -> bool:
    at = local(t)
    return at.weekday() < 5 and 8 <= at.hour < 22


def night_overlap(a: float, b: float) -> float:
    """Seconds of [a, b) that fall between 22:00 and 08:00 local."""
    total, t = 0.0, a
    while t < b:
        at = local(t)
        hour_end = t + 3600 - (at.minute * 60 + at.second + at.microsecond / 1e6)
        if at.hour >= 22 or at.hour < 8:
            total += min(b, hour_end) - t
        t = hour_end
    return total


def analyse(events: list[dict], idc_gpus: int, days: int) -> dict:
    queue, per_task, gpus, kind, sub, first = {}, {}, {}, {}, {}, {}
    site, began, runs = {}, {}, []  # runs: (queue, site, gpus, start, end)
    for e in events:
        j = e.get("job")
        if e["type"] == "submit":
            queue[j], sub[j] = e["queue"], e["t"]
            per_task[j] = e["gpu_milli_per_task"] / 1000
        elif e["type"] == "admit":
            site[j] = e["site"]
            gpus[j] = per_task[j] * len(e["placements"])
        elif e["type"] == "start":
            first.setdefault(j, e["t"])
            began[j] = e["t"]
        elif e["type"] in ("finish", "requeue") and j in began:
            runs.append((queue[j], site[j], gpus[j], began.pop(j), e["t"]))
            kind[j] = e["type"]
    waits = {"day": [], "other": [], "research": []}
    for j, q in queue.items():
        if q == "online" and j in first:
            waits["day" if daytime(sub[j]) else "other"].append(first[j] - sub[j])
        elif q == "research-nlp" and j in first:
            waits["research"].append(first[j] - sub[j])
    night_gpu_h = sum(g * night_overlap(a, b) for q, _, g, a, b in runs if q != "online") / 3600
    trained = sum(1 for j, k in kind.items() if k == "finish" and queue[j] == "research-nlp")
    ready = []
    for day in range(days):
        t = day * 86400 + 8 * 3600
        if local(t).weekday() >= 5:
            continue
        # used by online or free = all but what other queues' work holds there
        others = sum(g for q, s, g, a, b in runs if q != "online" and s == IDC and a <= t < b) + sum(
            gpus[j] for j in began if queue[j] != "online" and site[j] == IDC and began[j] <= t)
        ready.append(min(32.0, idc_gpus - others) / 32)
    return {"waits": waits, "night_gpu_h": night_gpu_h, "trained": trained, "ready": ready}


def p50(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else 0.0


def p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[int(0.99 * (len(xs) - 1))] if xs else 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2400, help="jobs generated; every --thin-th training or batch job is kept")
    ap.add_argument("--thin", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--days", type=int, default=7, help="a weekly forecast first predicts in the second week")
    a = ap.parse_args()
    recs = generate({"inference": "online", "training": "research-nlp", "batch": "batch"}, jobs=a.jobs, days=a.days, seed=a.seed,
                    inference_mig="1g.10gb", inference_mig_share=0.5, max_gang_nodes=4)
    # the generator's mix at this size would bury the IDC in training; keep its tide of
    # inference whole (so online needs more than its base guarantee by day) and thin the rest
    recs = [r for i, r in enumerate(recs) if r["queue"] == "online" or i % a.thin == 0]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "week.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
        print(f"{len(recs)} jobs over {a.days} days, seed {a.seed}: {sum(1 for r in recs if r['queue'] == 'online')} online, "
              f"{sum(1 for r in recs if r['queue'] == 'research-nlp')} training, {sum(1 for r in recs if r['queue'] == 'batch')} batch")
        for name, text in variants().items():
            fed = parse(text, "idc-aws-gcp.yaml")
            idc_gpus = sum(g.count * g.gpus_per_node for g in fed.site(IDC).node_groups)
            t0 = time.perf_counter()
            rep, res = simulate(fed, read_jsonl(path, fed), None, SimOptions(seed=1), html=False)
            m = analyse(res.events, idc_gpus, a.days)
            c = rep["cloud"]
            idle = c["idle_paid_node_hours"] / c["paid_node_hours"] if c["paid_node_hours"] else 0.0
            r = m["ready"]
            print(f"{name:19s}: online p99 wait {p99(m['waits']['day']):6.1f} s by day ({len(m['waits']['day'])} jobs), "
                  f"{p99(m['waits']['other']):6.1f} s otherwise; night training+batch {m['night_gpu_h']:7.1f} GPU-h, "
                  f"{m['trained']} training jobs done, their wait p50 {p50(m['waits']['research']):.0f} s; cloud ${c['cost_usd']:8.2f} ({idle:.0%} idle); "
                  f"guarantee ready at 08:00: min {min(r):.0%}, mean {sum(r) / len(r):.0%}; "
                  f"preemptions {rep['jobs']['preempted']}; invariants {rep['invariants']}; {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
