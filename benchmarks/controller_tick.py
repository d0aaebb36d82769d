"""The live controller's whole tick at `fedctl bench scale`'s size, in one process.

    python benchmarks/controller_tick.py [--jobs 50000] [--rounds 20]

`fedctl bench scale --live` times the scheduling core and its kept state. A controller's tick
also reads the store's mirror of live rows, builds the observation, decides whether the cycle is
full, and writes admissions and reasons back. This runs `Controller.tick` itself on the bench's
federation (10,000 nodes over 3 sites, 1,000 queues), with the store on disk and each site's Ray
cluster replaced by the tests' in-process fake (it takes every job and runs it until stopped):
the jobs are submitted as `ray job submit` would (the same body), then rounds of 100 new jobs,
each followed by a tick. Priorities are all the default class (the bench config has one).
Each round's new jobs reclaim from borrowers: 16 preemptions a tick (the cycle's cap), whose
victims stop only after their 120 s grace, so the jobs stopping grow by 16 a tick.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import federation.cycle as cycle_module  # noqa: E402
from federation.bench import scale  # noqa: E402
from federation.runtime.controller import Controller  # noqa: E402
from federation.store import Store  # noqa: E402
from tests.test_controller_faults import FakeSite  # noqa: E402


def body(j) -> dict:
    r = j.per_task
    return {"entrypoint": "python x.py", "submission_id": j.id, "metadata": {
        "queue": j.queue, "tasks": str(j.tasks), "gpus_per_task": f"{r.gpu_milli / 1000:g}",
        "cpus_per_task": f"{r.cpu_milli / 1000:g}", "memory_gib_per_task": f"{r.memory_mib / 1024:g}"}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    fed = scale.build()
    clock = [1000.0]
    looked: list[int] = []  # waiting jobs each cycle looked at: all of them is a full cycle
    stopping: list[int] = []  # preempted jobs within their grace period (`grace_s`, 120 s: a tick is 1 s here)
    real = cycle_module.schedule

    def schedule(snap, now, state=None):
        looked.append(len(snap.pending))
        stopping.append(len(snap.stopping))
        return real(snap, now, state)

    cycle_module.schedule = schedule
    with tempfile.TemporaryDirectory() as tmp:
        ctl = Controller(fed, Store(Path(tmp) / "s.db"), {s.name: FakeSite(s.name) for s in fed.sites}, clock=lambda: clock[0])
        t0 = time.perf_counter()
        for j in scale.jobs(fed, args.jobs, 0):
            ctl.submit(body(j))
        print(f"{args.jobs:,} submitted in {time.perf_counter() - t0:.1f} s", flush=True)
        t0 = time.perf_counter()
        ctl.tick()
        print(f"first tick: {time.perf_counter() - t0:.2f} s, looked at {looked[-1]:,} waiting jobs", flush=True)
        times, nxt = [], args.jobs
        for r in range(args.rounds):
            for j in scale.jobs(fed, 100, 1 + r, start=nxt):
                ctl.submit(body(j))
            nxt += 100
            clock[0] += 1
            t0 = time.perf_counter()
            ctl.tick()
            times.append((time.perf_counter() - t0) * 1000)
        print(f"ticks after 100 new jobs each (ms): {[round(t) for t in times]}")
        print(f"waiting jobs each looked at: {looked[1:]}")
        print(f"jobs stopping at each: {stopping[1:]}")
        print(f"p50 {statistics.median(times):.0f} ms, max {max(times):.0f} ms")


if __name__ == "__main__":
    main()
