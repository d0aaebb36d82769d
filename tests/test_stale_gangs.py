"""Gangs that lost tasks (their node went away), decided in the one cycle both shells run: an
elastic gang still at its minimum goes on with the rest; one below it is stale (KAI's stale gang
eviction) and keeps the rest for stale_gang_grace_s, then is stopped and queued again, whole.
The shells' parts are tested with them (tests/test_controller_cloud.py, tests/test_simulation.py,
the spot scenario of tests/test_parity.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from federation.config import parse
from federation.cycle import DecisionCycle, Observation
from federation.inventory import config_nodes
from federation.jobs import make_job
from federation.model import RunningJob, TaskPlacement

FED = parse("""
federation: {name: stale, timezone: UTC}
sites:
  - name: idc
    kind: idc
    node_groups: [{name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 2}]
queues: [{name: q, deserved: {gpu: 16}}]
policies: {preemption: {stale_gang_grace_s: 60}}
""", "stale.yaml")
NODES = config_nodes(FED, ["idc"])


def observe(t: float, *running: RunningJob) -> Observation:
    return Observation(t, datetime.fromtimestamp(t, UTC), NODES[:1], (), running, {}, frozenset())


def gang(job_id: str, min_tasks: int | None = None) -> RunningJob:
    """A two-task gang that had a task on each node; the second node went away."""
    spec = make_job(FED, id=job_id, queue="q", submit_s=0.0, tasks=2, gpus_per_task=8, min_tasks=min_tasks)
    return RunningJob(spec, "idc", (TaskPlacement(NODES[0].name, tuple(range(8))),), 0.0, lost=1)


def test_an_elastic_gang_at_its_minimum_goes_on_with_the_tasks_it_has():
    d = DecisionCycle(FED).step(observe(100.0, gang("elastic", min_tasks=1)))
    assert d.shrink == ["elastic"] and d.evict == []


def test_a_gang_below_its_minimum_keeps_the_rest_for_its_grace_then_is_evicted():
    cycle = DecisionCycle(FED)
    first = cycle.step(observe(100.0, gang("rigid")))
    assert first.evict == [] and first.shrink == [] and first.wake_at == 160.0  # the simulator wakes for it
    assert cycle.step(observe(159.0, gang("rigid"))).evict == []
    [(job, reason, why)] = cycle.step(observe(160.0, gang("rigid"))).evict
    assert job == "rigid" and reason == "NodeLost" and "1 left of the 2 it needs" in why


def test_a_gang_made_whole_again_within_its_grace_starts_a_new_grace_if_it_loses_a_task_again():
    cycle = DecisionCycle(FED)
    cycle.step(observe(100.0, gang("rigid")))
    whole = RunningJob(gang("rigid").spec, "idc", gang("rigid").placements, 0.0)  # nothing lost (as the shells see it)
    assert cycle.step(observe(130.0, whole)).evict == []  # its node came back: not stale
    assert cycle.step(observe(170.0, gang("rigid"))).evict == []  # lost again at 170: a fresh grace, not the one from 100
    assert cycle.step(observe(230.0, gang("rigid"))).evict != []
