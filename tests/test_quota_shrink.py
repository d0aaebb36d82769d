"""A tidal window that lowers a queue's capability below its usage: the excess is given back
gradually (after a delay, one job at a time, never a non-preemptible one), in the core and in
the simulator."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from zoneinfo import ZoneInfo

from federation.config import parse
from federation.jobs import make_job
from federation.scheduler import schedule
from federation.simulation.engine import SimOptions, Simulator
from federation.simulation.invariants import check, tidal_queues
from federation.simulation.traces import Trace, TraceJob
from tests.builders import fed, job, mark_preempting, preempted, q, snapshot, start_all


def shrunk():
    """`a` runs four 2-GPU jobs (8 GPUs); the effective quotas now cap it at 4 (the delay is the
    default 300 s)."""
    f = fed([q("a", deserved=8, capability=8)])
    jobs = [job("low-1", "a", gpus=2, priority=10, submit=1), job("low-2", "a", gpus=2, priority=10, submit=2),
            job("keep", "a", gpus=2, priority=100, preemptible=False), job("mid", "a", gpus=2, priority=100)]
    running = start_all(f, jobs)
    running = [replace(r, started_s=float(i)) for i, r in enumerate(running)]
    lowered = (q("a", deserved=4, capability=4),)
    return f, running, lowered


def test_nothing_is_preempted_before_the_delay():
    f, running, lowered = shrunk()
    plan = schedule(snapshot(f, running=running, queues=lowered), now=100.0)
    assert preempted(plan) == set() and plan.over_capability_since == {"a": 100.0}
    plan = schedule(snapshot(f, running=running, queues=lowered, over_capability_since={"a": 100.0}), now=399.0)
    assert preempted(plan) == set()


def test_after_the_delay_one_job_at_a_time_lowest_priority_and_least_work_lost_first():
    f, running, lowered = shrunk()
    since = {"a": 0.0}
    plan = schedule(snapshot(f, running=running, queues=lowered, over_capability_since=since), now=300.0)
    assert [(p.job_id, p.reason) for p in plan.preemptions] == [("low-2", "QuotaShrink")]  # low-2 started later than low-1
    # while it stops, nobody else goes
    plan = schedule(snapshot(f, running=mark_preempting(running, {"low-2"}), queues=lowered, over_capability_since=since), now=301.0)
    assert preempted(plan) == set()
    gone = [r for r in running if r.spec.id != "low-2"]
    plan = schedule(snapshot(f, running=gone, queues=lowered, over_capability_since=since), now=400.0)
    assert preempted(plan) == {"low-1"}
    left = [r for r in gone if r.spec.id != "low-1"]
    plan = schedule(snapshot(f, running=left, queues=lowered, over_capability_since=since), now=500.0)
    assert preempted(plan) == set() and plan.over_capability_since == {}  # 4 GPUs: within the cap


def test_a_queue_of_non_preemptible_jobs_keeps_them():
    f = fed([q("a", deserved=8, capability=8)])
    running = start_all(f, [job("k1", "a", gpus=4, preemptible=False), job("k2", "a", gpus=4, preemptible=False)])
    plan = schedule(snapshot(f, running=running, queues=(q("a", deserved=4, capability=4),), over_capability_since={"a": 0.0}), now=1000.0)
    assert preempted(plan) == set() and "a" in plan.over_capability_since


CONFIG = """
federation: {name: shrink, timezone: UTC}
sites:
  - name: idc
    kind: idc
    provider: {kind: simulated}
    node_groups:
      - {name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 2}
queues:
  - {name: batch, deserved: {gpu: 16}, capability: {gpu: 16}}
policies:
  preemption: {grace_s: 60, quota_shrink_delay_s: 300}
  tidal:
    - name: day
      window: {start: "08:00", end: "20:00"}
      queues:
        batch: {deserved: {gpu: 4}, capability: {gpu: 4}}
"""


def test_in_the_simulator_the_day_window_takes_the_excess_back_gradually():
    f = parse(CONFIG)
    # eight 2-GPU jobs start at 07:00 and would run for 4 h; the window opens at 08:00
    trace = Trace([TraceJob(make_job(f, id=f"b{i}", queue="batch", submit_s=7 * 3600 + i, gpus_per_task=2), 4 * 3600) for i in range(8)])
    res = Simulator(f, trace, SimOptions(seed=1)).run()
    stops = [e for e in res.events if e["type"] == "preempt"]
    assert len(stops) == 6 and {e["reason"] for e in stops} == {"QuotaShrink"}  # 16 GPUs down to 4
    times = [e["t"] for e in stops]
    assert times[0] >= 8 * 3600 + 300  # not before the delay
    assert all(b - a >= 60 for a, b in zip(times, times[1:], strict=False))  # one at a time, each after the last one's grace
    assert all(r.finish_s is not None for r in res.jobs.values())
    inv = check(res.events, f, tidal_queues(f, datetime(2026, 1, 5, tzinfo=ZoneInfo("UTC"))))  # the simulator's default start
    assert inv["overcommitted_nodes"] == 0 and inv["partial_gang_starts"] == 0 and inv["capability_violations"] == 0
