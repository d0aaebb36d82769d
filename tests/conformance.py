"""The conformance suite's harness. Scheduling scenarios of other projects' suites are re-created
as our own (tests/test_conformance_kai.py, _kueue.py, _ours.py) and run through the real cycle
(the simulator: config, trace, virtual clock). Each case names its source (KAI Scheduler's action
tests by their `Name:`, Kueue's preemption and fair-sharing tables, Volcano's gang e2e cases);
its outcome is derived from our contract (README, "Quotas, as the scheduler reads them"), and
`differs` says where that contract differs from the source's and why.

KAI's job kinds map to priority classes: `build` (100, not preemptible), `interactive` (75),
`train` (50); `urgent` (90, preemptible) is a high priority that may borrow, as Kueue's are.
Every node has 64 CPUs and 512 GiB unless a case says otherwise; jobs ask for GPUs alone unless
they say otherwise (as most users write them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from federation.config import parse
from federation.jobs import make_job
from federation.simulation.engine import SimOptions, Simulator
from federation.simulation.traces import Trace, TraceJob

CLASSES = """
priority_classes:
  - {name: build, value: 100, preemptible: false}
  - {name: urgent, value: 90}
  - {name: interactive, value: 75}
  - {name: train, value: 50, default: true}
"""


@dataclass
class J:
    id: str
    queue: str
    at: float = 0.0
    gpus: float = 1.0
    tasks: int = 1
    kind: str = "train"
    dur: float = 10_000.0
    cpus: float = 0.0
    milli: int | None = None
    mig: str | None = None
    min_tasks: int | None = None
    max_runtime: float | None = None


@dataclass
class Case:
    name: str
    source: str
    queues: str
    jobs: list[J]
    nodes: list[tuple[int, int]] = field(default_factory=lambda: [(1, 4)])  # (count, GPUs per node)
    group: str = ""  # more node-group fields, e.g. "racks: 2" or "mig: {enabled: true}"
    expect: object = None  # (events helper) -> None, asserting
    differs: str = ""
    policies: str = "preemption: {grace_s: 10}"
    invalid: str = ""  # the config is refused, with this message


class Run:
    def __init__(self, events: list[dict]):
        self.events = events

    def start(self, job: str) -> float | None:
        return next((e["t"] for e in self.events if e["type"] == "start" and e["job"] == job), None)

    def starts(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for e in self.events:
            if e["type"] == "start":
                out.setdefault(e["job"], e["t"])
        return out

    def nodes(self, job: str, nth: int = 0) -> set[str]:
        """The nodes of the job's `nth` admission."""
        admits = [e for e in self.events if e["type"] == "admit" and e["job"] == job]
        return {p["node"] for p in admits[nth]["placements"]} if len(admits) > nth else set()

    def preempted(self) -> dict[str, str]:
        return {e["job"]: e["reason"] for e in self.events if e["type"] == "preempt"}

    def running_at(self, t: float) -> set[str]:
        on: set[str] = set()
        for e in self.events:
            if e["t"] > t:
                break
            if e["type"] == "start":
                on.add(e["job"])
            elif e["type"] in ("finish", "preempt"):
                on.discard(e["job"])
        return on


def simulate(case: Case) -> Run:
    extra = f", {case.group}" if case.group else ""
    groups = "\n".join(f"      - {{name: g{i}, gpu_model: A100-80GB, gpus_per_node: {g}, cpus_per_node: 64, memory_gib_per_node: 512, count: {n}{extra}}}"
                       for i, (n, g) in enumerate(case.nodes))
    text = f"""federation: {{name: conformance, timezone: UTC}}
{CLASSES}
sites:
  - name: idc
    kind: idc
    provider: {{kind: simulated}}
    node_groups:
{groups}
queues:
{case.queues}
policies: {{{case.policies}}}
"""
    fed = parse(text)
    jobs = []
    for j in case.jobs:
        gpu = {"gpu_milli_per_task": j.milli} if j.milli is not None else {"mig_profile": j.mig} if j.mig else {"gpus_per_task": j.gpus}
        spec = make_job(fed, id=j.id, queue=j.queue, submit_s=j.at, tasks=j.tasks, cpus_per_task=j.cpus, priority=j.kind, min_tasks=j.min_tasks,
                        max_runtime_s=j.max_runtime, **gpu)
        jobs.append(TraceJob(spec, j.dur))
    return Run(Simulator(fed, Trace(sorted(jobs, key=lambda t: (t.spec.submit_s, t.spec.id))), SimOptions()).run().events)


GRACE = 10  # + a cycle
SOON = 100 + GRACE + 5  # a job submitted at 100 that preempts starts by then


def expect_starts(**when):
    """Each named job starts at that time (None: never)."""
    def check(r: Run):
        for job, t in when.items():
            got = r.start(job)
            assert (got is None) if t is None else (got is not None and got <= t), f"{job} started at {got}, expected {'never' if t is None else f'by {t}'}"
    return check


def expect_preempted(*victims, reason=None, then=None):
    def check(r: Run):
        got = r.preempted()
        assert set(got) == set(victims), f"preempted {sorted(got)}, expected {sorted(victims)}"
        if reason:
            assert set(got.values()) <= {reason}, got
        if then:
            then(r)
    return check


def expect_consolidated(gang: str, *movers: str, by: float):
    """The movers alone are preempted, for consolidation, and start again on other nodes; the gang
    starts by `by` on nodes a mover left."""
    def check(r: Run):
        expect_preempted(*movers, reason="Consolidation")(r)
        for m in movers:
            assert r.nodes(m, 1) and not (r.nodes(m, 1) & r.nodes(m, 0)), f"{m} ran on {r.nodes(m, 0)}, then {r.nodes(m, 1)}"
        assert r.start(gang) is not None and r.start(gang) <= by, f"{gang} started at {r.start(gang)}"
        assert r.nodes(gang) & set().union(*(r.nodes(m, 0) for m in movers)), f"{gang} on {r.nodes(gang)}"
    return check


def restarts(r: Run, *jobs: str) -> list[float]:
    """When each of `jobs` started again after it was first stopped, earliest first."""
    return sorted(next((e["t"] for e in r.events if e["type"] == "start" and e["job"] == j and e["t"] > r.start(j)), float("inf")) for j in jobs)


def expect_waits(*jobs, until=10_000.0, reason=None):
    """The jobs do not start before `until` (when the jobs holding the cluster end); with
    `reason`, each waits for that reason (its last pending reason)."""
    def check(r: Run):
        for job in jobs:
            assert r.start(job) is None or r.start(job) >= until, f"{job} started at {r.start(job)}"
            if reason:
                got = [e["reason"] for e in r.events if e["type"] == "pending" and e["job"] == job]
                assert got and got[-1] == reason, f"{job} waited for {got}"
    return check


def both(*checks):
    def check(r: Run):
        for c in checks:
            c(r)
    return check


Q2 = "  - {name: q0, deserved: {gpu: 2}}\n  - {name: q1, deserved: {gpu: 2}}"


def run(case: Case) -> None:
    """Simulate the case and check its expectation (or, for an invalid one, the config error)."""
    if case.invalid:
        from federation.errors import ConfigError

        with pytest.raises(ConfigError, match=re.escape(case.invalid)):
            simulate(case)
        return
    case.expect(simulate(case))


def ids(cases: list[Case]) -> list[str]:
    return [f"{c.source.split()[0]}: {c.name}" for c in cases]
