"""The scheduling core at scale: `fedctl bench scale` (benchmarks/README.md has the figures).

1,000 queues in a 3-level tree (10 x 9 x 10), 10,000 nodes of 8 GPUs over 3 sites, 50,000
pending gangs of 1-64 GPUs. Measures one full cycle from an empty cluster (admissions per
second), then incremental cycles that bring 100 new jobs into that state (p50 / p99), then one
full cycle again over every waiting job with the admitted ones running (what a live tick is
after any admission or preemption).

`live=True` (`--live`) runs the cycles as the live controller does: each cycle it hands over
the running jobs it read (a new tuple; a job's object is made again only when its row changes,
so here the same objects) and the state it keeps is brought up to date from them
(`federation.live_state`); the default keeps one state object as the simulator does, applying
its own admissions.
"""

from __future__ import annotations

import json
import random
import statistics
import time

from federation import garbage
from federation.config import parse
from federation.live_state import LiveState
from federation.model import Federation, JobSpec, Node, Resources, RunningJob
from federation.scheduler import CycleState, Snapshot, incremental_pending, schedule

GPU_SIZES = (1, 1, 1, 2, 2, 4, 8, 8, 16, 32, 64)  # whole-GPU gang sizes, small ones most common


def build(queues_top: int = 10, mid: int = 9, leaves: int = 10, nodes: int = 10_000, sites: int = 3) -> Federation:
    """The federation, read from a config as a user's is: quotas name GPUs alone (as in the
    canonical example), so CPUs and memory are the nodes' to limit, not the queues' to borrow.
    (Until 2026-12-07 the bench built its queues by hand with 0 CPUs and memory deserved, which
    no config gives: every job borrowed, and fair share ran on CPU shares.)"""
    per_leaf = nodes * 8000 // (queues_top * mid * leaves)  # milli-GPU: the sums below stay exact

    def queue(name: str, parent: str | None, deserved_milli: int, guarantee: bool = False) -> dict:
        q = {"name": name, "deserved": {"gpu": deserved_milli / 1000}}
        if parent:
            q["parent"] = parent
        if guarantee:  # one GPU, or all it deserves where the federation is tiny
            q["guarantee"] = {"gpu": min(1000, deserved_milli) / 1000}
        return q

    qs = []
    for t in range(queues_top):
        qs.append(queue(f"t{t}", None, per_leaf * mid * leaves))
        for m in range(mid):
            qs.append(queue(f"t{t}m{m}", f"t{t}", per_leaf * leaves))
            qs += [queue(f"t{t}m{m}l{leaf}", f"t{t}m{m}", per_leaf, guarantee=leaf == 0) for leaf in range(leaves)]
    group = {"name": "g", "gpu_model": "A100-80GB", "gpus_per_node": 8, "cpus_per_node": 96, "memory_gib_per_node": 1024, "count": nodes // sites}
    doc = {"federation": {"name": "bench", "timezone": "UTC"}, "sites": [{"name": f"site{s}", "kind": "idc", "node_groups": [group]} for s in range(sites)],
           "priority_classes": [{"name": "normal", "value": 100, "default": True}], "queues": qs,
           "policies": {"placement": {"strategy": "fragmentation-aware"}}}
    return parse(json.dumps(doc), "<bench>")


def node_list(fed: Federation, racks: int = 40) -> list[Node]:
    out = []
    for s in fed.sites:
        for g in s.node_groups:
            r = g.node_resources
            out += [Node(f"{s.name}-n{i}", s.name, g.name, g.gpu_model, 8, r.cpu_milli, r.memory_mib, rack=f"r{i % racks}") for i in range(g.count)]
    return out


def jobs(fed: Federation, n: int, seed: int, start: int = 0) -> list[JobSpec]:
    rng = random.Random(seed)
    leaves = fed.leaf_queues
    out = []
    for i in range(start, start + n):
        gpus = rng.choice(GPU_SIZES)
        tasks, per = (gpus // 8, 8) if gpus > 8 else (1, gpus)
        out.append(JobSpec(f"j{i}", rng.choice(leaves), tasks, Resources.of(per, per * 4, per * 32), float(i), priority=rng.choice((100, 100, 100, 1000))))
    return out


def run(pending_jobs: int = 50_000, new_jobs: int = 100, rounds: int = 30, seed: int = 0, nodes: int = 10_000, live: bool = False, log=print) -> dict:
    fed = build(nodes=nodes)
    all_nodes = tuple(node_list(fed))
    pending = jobs(fed, pending_jobs, seed)
    snap = Snapshot(fed, all_nodes, (), tuple(pending))
    kept = LiveState() if live else None
    t0 = time.perf_counter()
    state = kept.sync(snap, None) if kept is not None else CycleState.build(snap)
    t_build = time.perf_counter() - t0
    garbage.settle()  # as each shell does before a cycle (an O(1) freeze, outside the core's time there too)
    t0 = time.perf_counter()
    plan = schedule(snap, 0.0, state)
    t_cycle = time.perf_counter() - t0
    by_id = {j.id: j for j in pending}
    if kept is not None:
        kept.started(plan, by_id, 0.0)
    admitted = len(plan.admissions)
    log(f"full cycle: {admitted} of {pending_jobs} jobs admitted in {t_cycle:.2f} s ({admitted / t_cycle:,.0f} admissions/s); state built in {t_build:.2f} s")
    running = tuple(RunningJob(by_id[a.job_id], a.site, a.placements, 0.0) for a in plan.admissions)
    admitted_ids = {a.job_id for a in plan.admissions}  # once: rebuilt per job, this line was most of the command's time
    waiting = {j.id: j for j in pending if j.id not in admitted_ids}
    reservations = plan.reservations
    times = []
    next_id = pending_jobs

    def cycle(pending: tuple[JobSpec, ...], now: float):
        # as both shells do, the cycle is told which running jobs are stopping (none: the bench
        # never carries its preemptions out) instead of finding them by a scan
        nonlocal state
        seen = kept.observe(tuple(running)) if kept is not None else running  # the last tuple if nothing changed
        snap = Snapshot(fed, all_nodes, seen, pending, reservations=reservations, stopping=())
        if kept is not None:
            state = kept.sync(snap, state.strategy)
        garbage.settle()
        p = schedule(snap, now, state)
        if kept is not None:
            kept.started(p, waiting, now)
        return p

    for r in range(rounds):
        new = jobs(fed, new_jobs, seed + 1 + r, start=next_id)
        next_id += new_jobs
        for j in new:
            waiting[j.id] = j
        subset = incremental_pending(waiting, {j.id for j in new}, reservations, full=False)
        t0 = time.perf_counter()
        p = cycle(subset, float(r + 1))
        times.append(time.perf_counter() - t0)
        reservations = p.reservations
        for a in p.admissions:
            running += (RunningJob(waiting.pop(a.job_id), a.site, a.placements, float(r + 1)),)
    counts = len(waiting), len(running)
    # what a live tick is after any admission or preemption (most ticks at this size): every
    # waiting job looked at again (its admissions are not carried out: the figures stand as before)
    t0 = time.perf_counter()
    p = cycle(tuple(waiting.values()), float(rounds + 1))
    t_again = time.perf_counter() - t0
    times.sort()
    p50 = statistics.median(times) * 1000
    p99 = times[min(len(times) - 1, int(0.99 * len(times)))] * 1000
    how = ", state kept from what the live controller reads" if live else ""
    log(f"incremental cycle ({new_jobs} new jobs into {counts[0]:,} waiting, {counts[1]:,} running{how}): p50 {p50:.1f} ms, p99 {p99:.1f} ms over {rounds} rounds")
    log(f"full cycle again over all {counts[0]:,} waiting, {counts[1]:,} running (a live tick after any admission or preemption): "
        f"{t_again * 1000:.0f} ms, {len(p.admissions)} admitted, {len(p.preemptions)} preempted")
    return {"admitted": admitted, "full_cycle_s": round(t_cycle, 3), "admissions_per_s": round(admitted / t_cycle), "build_s": round(t_build, 3),
            "incremental_p50_ms": round(p50, 2), "incremental_p99_ms": round(p99, 2), "full_again_s": round(t_again, 3),
            "waiting": counts[0], "running": counts[1], "live": live}
