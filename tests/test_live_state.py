"""The live decision cycle keeps its state and brings it up to date from each observation
(`federation.live_state`). Whatever the observations do (jobs start, end, move, are preempted,
are seen as new objects; admissions that never started; nodes and quotas that change; snapshots
the state cannot take), the state must be what building it afresh gives, and the cycle must
decide as it decided when it built its state each cycle."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from federation.cycle import DecisionCycle, Observation
from federation.errors import SnapshotError
from federation.live_state import LiveState
from federation.model import Admission, Plan, RunningJob, TaskPlacement
from federation.scheduler import CycleState, Snapshot, schedule
from policies.placement import make_strategy

from .builders import cluster_contents, fed, job, nodes_of, q, quota_contents, site

QUEUES = [q("org", deserved=24), q("a", parent="org", deserved=8), q("b", parent="org", deserved=16), q("c", deserved=8)]
FED = fed(QUEUES, [site("idc", count=4, gpus=4), site("east", count=2, gpus=8)], strategy="fragmentation-aware")
NODES = tuple(n for s in FED.sites for n in nodes_of(s))


def _copy(r: RunningJob) -> RunningJob:
    """The same running job as the live controller sees it next cycle: new objects, equal."""
    return RunningJob(r.spec, r.site, tuple(TaskPlacement.from_dict(p.to_dict()) for p in r.placements), r.started_s, r.preempting,
                      r.preempted_for, r.lost)


def _same_as_built(live: LiveState, snap: Snapshot, strategy) -> None:
    st = live.sync(snap, strategy)
    fresh = CycleState.build(snap, strategy)
    assert cluster_contents(st.cluster) == cluster_contents(fresh.cluster)
    assert quota_contents(st.quota) == quota_contents(fresh.quota)


@pytest.mark.parametrize("seed", range(15))
def test_the_kept_state_is_what_a_fresh_build_gives_whatever_the_observations_do(seed):
    rng = random.Random(seed)
    strategy = make_strategy("fragmentation-aware")
    live, running, nodes, queues, n = LiveState(), [], NODES, tuple(QUEUES), 0
    for step in range(12):
        pending = []
        for _ in range(rng.randint(0, 6)):
            n += 1
            pending.append(job(f"j{n}", rng.choice("abc"), tasks=rng.choice([1, 1, 2]), gpus=rng.choice([0.5, 1, 2, 4]), cpu=1,
                               preemptible=rng.random() < 0.8))
        snap = Snapshot(FED, nodes, tuple(running), tuple(pending), queues)
        _same_as_built(live, snap, strategy)
        plan = schedule(snap, float(step), live.state)
        live.started(plan, {j.id: j for j in pending}, float(step))
        by_id = {j.id: j for j in pending}
        started = [RunningJob(by_id[a.job_id], a.site, a.placements, float(step)) for a in plan.admissions]
        # what the next observation shows: some admissions never started, some jobs ended,
        # some are being preempted, and every job is a new object
        running = [r for r in running if rng.random() > 0.2] + [r for r in started if rng.random() > 0.15]
        running = [replace(_copy(r), preempting=r.preempting or rng.random() < 0.1) for r in running]
        if rng.random() < 0.15 and running:  # a gang shrank: one task's node went away
            i = rng.randrange(len(running))
            if len(running[i].placements) > 1:
                running[i] = replace(running[i], placements=running[i].placements[1:], lost=1)
        if rng.random() < 0.1:  # a node went (and its jobs with it)
            gone = rng.choice(nodes).name
            nodes = tuple(x for x in nodes if x.name != gone)
            running = [r for r in running if all(p.node != gone for p in r.placements)]
        if rng.random() < 0.1:  # the tide reshaped the quotas
            queues = tuple(replace(x, deserved=replace(x.deserved, gpu_milli=x.deserved.gpu_milli + 1000)) if x.name == "c" else x for x in queues)
    _same_as_built(live, Snapshot(FED, nodes, tuple(running), (), queues), strategy)


def test_a_snapshot_the_state_cannot_take_is_refused_as_a_fresh_build_refuses_it_and_the_next_one_starts_clean():
    strategy = make_strategy("bestfit")
    live = LiveState()
    a = RunningJob(job("a", "a", gpus=4), "idc", (TaskPlacement("idc-0", (0, 1, 2, 3)),), 0.0)
    live.sync(Snapshot(FED, NODES, (a,), (), tuple(QUEUES)), strategy)
    twice = RunningJob(job("b", "b", gpus=1), "idc", (TaskPlacement("idc-0", (0,)),), 0.0)  # on a GPU `a` holds
    for bad, message in (((a, twice), "overcommitted"), ((replace(a, spec=replace(a.spec, queue="zz")),), "unknown queue"),
                         ((a, RunningJob(job("g", "a"), "idc", (TaskPlacement("ghost", (0,)),), 0.0)), "ghost")):
        with pytest.raises(SnapshotError, match=message):
            live.sync(Snapshot(FED, NODES, bad, (), tuple(QUEUES)), strategy)
        _same_as_built(live, Snapshot(FED, NODES, (a,), (), tuple(QUEUES)), strategy)


def _observe(t: float, running, pending, arrived) -> Observation:
    return Observation(t, datetime.fromtimestamp(t, UTC), NODES, (), tuple(running), dict(pending), frozenset(arrived), submitted=tuple(pending[j] for j in arrived))


def test_the_cycle_decides_as_it_did_when_it_built_its_state_every_cycle():
    runs = [_parity_run(seed) for seed in range(6)]
    # the runs preempt, and have cycles where the running jobs were handed on as the last tuple
    assert sum(p for p, _ in runs) and sum(u for _, u in runs)


def _parity_run(seed: int) -> tuple[int, int]:
    rng = random.Random(seed)
    kept, built = DecisionCycle(FED), DecisionCycle(FED)
    preemptions = unchanged = 0
    running: dict[str, RunningJob] = {}
    pending, n = {}, 0
    for step in range(15):
        t = 10.0 * step
        arrived = set()
        for _ in range(rng.randint(0, 5)):
            n += 1
            pending[f"j{n}"] = job(f"j{n}", rng.choice("abc"), tasks=rng.choice([1, 2]), gpus=rng.choice([0.5, 1, 2, 4]), cpu=1, submit=t,
                                   priority=rng.choice([10, 100, 1000]))
            arrived.add(f"j{n}")
        obs = _observe(t, [_copy(r) for r in running.values()], pending, arrived)
        built.live.forget()  # as the cycle did before it kept its state: built from the observation
        held = kept.live._running
        a, b = kept.step(obs), built.step(obs)
        assert (a.full, a.plan.admissions, a.plan.preemptions, a.reasons) == (b.full, b.plan.admissions, b.plan.preemptions, b.reasons)
        preemptions += len(a.plan.preemptions)
        unchanged += held is not None and kept.live._running is held
        for adm in a.plan.admissions:
            running[adm.job_id] = RunningJob(pending.pop(adm.job_id), adm.site, adm.placements, t)
        for j in [j for j, r in running.items() if r.preempting or rng.random() < 0.1]:  # stopped, or ended
            r = running.pop(j)
            if r.preempting:
                pending[j] = r.spec  # queued again
        for p in a.plan.preemptions:  # within its grace until the next cycle
            if p.job_id in running:
                running[p.job_id] = replace(running[p.job_id], preempting=True, preempted_for=p.for_job)
    return preemptions, unchanged


def test_running_jobs_as_they_were_are_handed_on_as_the_last_cycles_tuple_and_a_changed_flag_is_not():
    strategy = make_strategy("bestfit")
    live = LiveState()
    first = (RunningJob(job("a", "a", gpus=4), "idc", (TaskPlacement("idc-0", (0, 1, 2, 3)),), 0.0),
             RunningJob(job("b", "b", gpus=1), "east", (TaskPlacement("east-0", (0,)),), 0.0))
    live.sync(Snapshot(FED, NODES, first, (), tuple(QUEUES)), strategy)
    assert live.observe(tuple(_copy(r) for r in first)) is first  # equal, new objects: the last tuple
    flagged = (replace(_copy(first[0]), preempting=True), _copy(first[1]))
    seen = live.observe(flagged)
    assert seen is flagged  # a job being preempted is no longer the job it was: the index must see the flag
    live.sync(Snapshot(FED, NODES, seen, (), tuple(QUEUES)), strategy)
    assert live.observe(tuple(_copy(r) for r in flagged)) is flagged
    assert live.observe(first[:1]) is not flagged  # one ended


def test_an_admission_of_a_job_not_handed_in_makes_the_next_cycle_build_its_state():
    strategy = make_strategy("bestfit")
    live = LiveState()
    live.sync(Snapshot(FED, NODES, (), (), tuple(QUEUES)), strategy)
    live.started(Plan(admissions=(Admission("ghost", "idc", (TaskPlacement("idc-0", (0,)),)),)), {}, 0.0)
    assert live.state is None
    _same_as_built(live, Snapshot(FED, NODES, (), (), tuple(QUEUES)), strategy)
