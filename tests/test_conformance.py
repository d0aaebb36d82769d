"""Scheduling scenarios of other projects' suites, re-created as our own and run through the real
cycle (the simulator: config, trace, virtual clock). Each case names its source (KAI Scheduler's
action tests by their `Name:`, Kueue's preemption and fair-sharing tables, Volcano's gang e2e
cases); its outcome is derived from our contract (README, "Quotas, as the scheduler reads
them"), and `differs` says where that contract differs from the source's and why.

KAI's job kinds map to priority classes: `build` (100, not preemptible), `interactive` (75),
`train` (50); `urgent` (90, preemptible) is a high priority that may borrow, as Kueue's are. Every node has 64 CPUs and 512 GiB unless a case says otherwise; jobs ask for GPUs
alone unless they say otherwise (as most users write them).
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

CASES = [
    # ---- allocate (KAI allocate_test.go) ----
    Case("allocate job but does not allow to project to go over allowance", "KAI allocate_test.go",
         "  - {name: q0, deserved: {gpu: 1}, capability: {gpu: 2}}",
         [J("a", "q0", gpus=2, dur=100), J("b", "q0", gpus=1)],
         expect=expect_starts(a=0, b=100)),
    Case("allocate job but does not allow to department to go over allowance", "KAI allocate_test.go",
         "  - {name: d0, capability: {gpu: 2}}\n  - {name: q0, parent: d0, deserved: {gpu: 2}}\n  - {name: q1, parent: d0, deserved: {gpu: 2}}",
         [J("a", "q0", gpus=2, dur=100), J("b", "q1", gpus=1)],
         expect=expect_starts(a=0, b=100)),
    Case("allocate according to creation time when share is equal", "KAI allocate_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("late", "q0", at=1, gpus=4, dur=100), J("early", "q0", at=0.5, gpus=4, dur=100)],
         expect=expect_starts(early=0.5, late=100.5)),
    Case("allocate according to priority", "KAI allocate_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("blocker", "q0", gpus=4, dur=50, kind="build"), J("low", "q0", at=1, gpus=4, dur=100), J("high", "q0", at=2, gpus=4, dur=100, kind="interactive")],
         expect=expect_starts(high=50, low=150)),
    Case("1 build job pending for each queue with different share - allocate the second", "KAI allocate_test.go",
         "  - {name: q0, deserved: {gpu: 1}}\n  - {name: q1, deserved: {gpu: 1}}",
         [J("q0-running", "q0", gpus=2, dur=10_000, kind="interactive"), J("q0-next", "q0", at=1, gpus=1, kind="build"),
          J("q1-next", "q1", at=1, gpus=1, kind="build")],
         nodes=[(1, 3)], expect=lambda r: (r.start("q1-next") == 1 and r.start("q0-next") == 1 + GRACE
                                           and r.preempted() == {"q0-running": "Priority"}) or pytest.fail(str(r.starts())),
         differs="KAI starts with a build job running above q0's deserved, which its own rule (and ours) would never have "
                 "admitted, so here it is an interactive job; and where KAI's allocate test stops, our cycle goes on: q0-next, "
                 "a build job, takes its own queue's place by priority (KAI's preempt action) and runs within deserved"),
    Case("6 pending train jobs - allocate the 1st 2 of each queue (verify the share is being updated during the allocation)", "KAI allocate_test.go", Q2,
         [J(f"{q}-{i}", q, gpus=1) for i in range(3) for q in ("q0", "q1")],
         expect=lambda r: (r.running_at(0) == {"q0-0", "q0-1", "q1-0", "q1-1"}) or pytest.fail(f"running {sorted(r.running_at(0))}")),
    Case("Over provisioning with over quota, many queues to few GPUs - verify queue share is updated during the same allocation round", "KAI allocate_test.go",
         "\n".join(f"  - {{name: q{i}, deserved: {{gpu: 1}}}}" for i in range(4)),
         [J(f"q{i}-{k}", f"q{i}", gpus=1) for i in range(4) for k in range(2)], nodes=[(1, 2)],
         expect=lambda r: (len({j.split('-')[0] for j in r.running_at(0)}) == 2) or pytest.fail(f"running {r.running_at(0)}")),
    Case("Allocate Departments with smaller ratio 1st", "KAI allocate_test.go",
         "  - {name: d0, deserved: {gpu: 1}}\n  - {name: q0, parent: d0, deserved: {gpu: 1}}\n  - {name: d1, deserved: {gpu: 3}}\n  - {name: q1, parent: d1, deserved: {gpu: 3}}",
         [J("q0-a", "q0", gpus=1), J("q0-b", "q0", gpus=1), J("q1-a", "q1", gpus=1), J("q1-b", "q1", gpus=1), J("q1-c", "q1", gpus=1)],
         expect=lambda r: (r.running_at(0) >= {"q0-a", "q1-a", "q1-b", "q1-c"}) or pytest.fail(f"running {r.running_at(0)}")),
    Case("Don't allow allocation of interactive jobs above the department's deserved GPUs", "KAI allocate_test.go",
         "  - {name: d0, deserved: {gpu: 2}, capability: {gpu: 2}}\n  - {name: q0, parent: d0, deserved: {gpu: 2}}",
         [J("a", "q0", gpus=2, kind="interactive", dur=100), J("b", "q0", gpus=1, kind="interactive")],
         expect=expect_starts(a=0, b=100),
         differs="KAI caps interactive (non-preemptible-like) work at deserved; ours caps every job at capability, so the department names capability: 2"),
    Case("try to allocate interactive after train when over-quota - train should be preempted for interactive to run", "KAI allocate_test.go",
         "  - {name: q0, deserved: {gpu: 1}}", [J("train", "q0", gpus=4), J("inter", "q0", at=100, gpus=2, kind="interactive")],
         expect=expect_preempted("train", reason="Priority", then=expect_starts(inter=SOON))),
    Case("try to allocate train after interactive when over-quota - train should not run", "KAI allocate_test.go",
         "  - {name: q0, deserved: {gpu: 1}}", [J("inter", "q0", gpus=4, kind="interactive"), J("train", "q0", at=100, gpus=2)],
         expect=both(expect_preempted(), expect_starts(train=10_000))),
    Case("don't allow job over QUEUE deserved CPU", "KAI allocate_test.go",
         "  - {name: q0, deserved: {gpu: 4, cpu: 8}, capability: {cpu: 8}}", [J("a", "q0", gpus=1, cpus=8, dur=100), J("b", "q0", gpus=1, cpus=4)],
         expect=expect_starts(a=0, b=100),
         differs="deserved is an entitlement, not a cap (Kueue's nominal quota): a queue that must not pass 8 CPUs names capability: {cpu: 8}"),
    Case("don't allow job over DEPARTMENT deserved CPU", "KAI allocate_test.go",
         "  - {name: d0, capability: {cpu: 8}}\n  - {name: q0, parent: d0, deserved: {gpu: 4}}",
         [J("a", "q0", gpus=1, cpus=6, dur=100), J("b", "q0", gpus=1, cpus=4)], expect=expect_starts(a=0, b=100),
         differs="as above, with the department's capability"),
    Case("a GPU-only quota does not hold back a job for the CPUs it asks", "ours (issue 19)",
         "  - {name: q0, deserved: {gpu: 4}}", [J("a", "q0", gpus=1, cpus=48), J("b", "q0", gpus=1, cpus=8)], expect=expect_starts(a=0, b=0)),
    Case("single level queue hierarchy - allocate job", "KAI allocate_test.go", "  - {name: q0, deserved: {gpu: 2}}", [J("a", "q0", gpus=2)],
         expect=expect_starts(a=0)),
    Case("three level queue hierarchy - allocate jobs across teams", "KAI allocate_test.go",
         "  - {name: org}\n  - {name: dept, parent: org}\n  - {name: t0, parent: dept, deserved: {gpu: 2}}\n  - {name: t1, parent: dept, deserved: {gpu: 2}}",
         [J("a", "t0", gpus=2), J("b", "t1", gpus=2)], expect=expect_starts(a=0, b=0)),
    Case("four level queue hierarchy - allocate job at deepest level", "KAI allocate_test.go",
         "  - {name: l0}\n  - {name: l1, parent: l0}\n  - {name: l2, parent: l1}\n  - {name: l3, parent: l2, deserved: {gpu: 1}}",
         [J("a", "l3", gpus=3)], expect=expect_starts(a=0)),
    # ---- preempt (KAI preempt_test.go, preemptGang_test.go, preemptMIG_test.go) ----
    Case("1 train job running, 1 build job pending - preempt", "KAI preempt_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("train", "q0", gpus=4), J("build", "q0", at=100, gpus=2, kind="build")],
         expect=expect_preempted("train", reason="Priority", then=expect_starts(build=SOON))),
    Case("3 train job running, 1 build job pending - no need to preempt two jobs", "KAI preempt_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("t0", "q0", gpus=2), J("t1", "q0", gpus=1), J("t2", "q0", gpus=1), J("build", "q0", at=100, gpus=1, kind="build")],
         expect=lambda r: (len(r.preempted()) == 1 and set(r.preempted()) <= {"t1", "t2"}) or pytest.fail(f"preempted {r.preempted()}"),
         differs="all three started together, so the least work lost is the smallest job: one 1-GPU job goes"),
    Case("3 jobs running for queue0 on 4 GPUs, 1 pending build job for queue0, deserved of queue1 is 4 - preempt", "KAI preempt_test.go",
         "  - {name: q0, deserved: {gpu: 4}}\n  - {name: q1, deserved: {gpu: 4}}",
         [J("t0", "q0", gpus=2), J("t1", "q0", gpus=1), J("t2", "q0", gpus=1), J("build", "q0", at=100, gpus=2, kind="build")],
         expect=lambda r: (len(r.preempted()) >= 1 and set(r.preempted().values()) == {"Priority"} and r.start("build") <= SOON) or pytest.fail(str(r.preempted()))),
    Case("No jobs pending - don't preempt", "KAI preempt_test.go", "  - {name: q0, deserved: {gpu: 4}}", [J("a", "q0", gpus=4)],
         expect=expect_preempted()),
    Case("Lower priority job should not preempt", "KAI preemptMIG_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("inter", "q0", gpus=4, kind="interactive"), J("train", "q0", at=100, gpus=1)], expect=expect_preempted()),
    Case("Train job runs in a different queue - should not preempt", "KAI preemptMIG_test.go", Q2,
         [J("train", "q1", gpus=2), J("other", "q0", gpus=2), J("build", "q0", at=100, gpus=1, kind="build")],
         expect=lambda r: ("train" not in r.preempted()) or pytest.fail(str(r.preempted())),
         differs="the build job may still preempt its own queue's train job (priority inside a queue); q1's job, within its deserved, is never taken"),
    Case("Several jobs with different priorities preempt one", "KAI preemptMIG_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("train", "q0", gpus=4), J("inter", "q0", at=100, gpus=2, kind="interactive"), J("build", "q0", at=100, gpus=2, kind="build")],
         expect=expect_preempted("train", reason="Priority", then=expect_starts(inter=SOON, build=SOON))),
    Case("Classic gang preempt", "KAI preemptGang_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("t0", "q0", gpus=2), J("t1", "q0", gpus=2), J("gang", "q0", at=100, gpus=2, tasks=2, kind="build")], nodes=[(2, 2)],
         expect=expect_preempted("t0", "t1", reason="Priority", then=expect_starts(gang=SOON))),
    Case("preempt gang job", "KAI preemptGang_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("gang", "q0", gpus=1, tasks=4), J("build", "q0", at=100, gpus=1, kind="build")], nodes=[(2, 2)],
         expect=expect_preempted("gang", reason="Priority", then=expect_starts(build=SOON)),
         differs="a gang is preempted whole (Volcano and KAI may evict only the pods above minMember; ours has min_tasks for elastic gangs)"),
    Case("3 jobs running for queue0 on 4 GPUs, 1 pending build job for queue0, no node can contain build job - don't preempt", "KAI preempt_test.go",
         "  - {name: q0, deserved: {gpu: 8}}", [J("t0", "q0", gpus=2), J("t1", "q0", gpus=1), J("t2", "q0", gpus=1), J("big", "q0", at=100, gpus=2, tasks=3, kind="build")],
         nodes=[(1, 4)], expect=both(expect_preempted(), expect_starts(big=None)),
         differs="our trace reader refuses such a job outright (no site can ever hold it); the core, given it, preempts nothing"),
    # ---- reclaim (KAI reclaim_test.go, Kueue preemption table) ----
    Case("1 train job running for queue0, 1 train job pending for queue1 - reclaim", "KAI reclaim_test.go", Q2,
         [J("q0-big", "q0", gpus=4), J("q1-a", "q1", at=100, gpus=2)],
         expect=expect_preempted("q0-big", reason="Reclaim", then=expect_starts(**{"q1-a": SOON}))),
    Case("queue0 is under fair share, queue1 is over fair share - reclaim", "KAI reclaim_test.go", Q2,
         [J("q1-a", "q1", gpus=1), J("q1-b", "q1", gpus=1), J("q1-c", "q1", gpus=1), J("q1-d", "q1", gpus=1), J("q0-a", "q0", at=100, gpus=2)],
         expect=lambda r: (len(r.preempted()) == 2 and set(r.preempted().values()) == {"Reclaim"} and r.start("q0-a") <= SOON) or pytest.fail(str(r.preempted()))),
    Case("2 jobs running for queue0 on 3 GPUs, 1 job running for queue1 on 1 GPU, 1 pending job for queue1 - reclaim", "KAI reclaim_test.go", Q2,
         [J("q0-a", "q0", gpus=2), J("q0-b", "q0", gpus=1), J("q1-a", "q1", gpus=1), J("q1-b", "q1", at=100, gpus=1)],
         expect=expect_preempted("q0-b", reason="Reclaim", then=expect_starts(**{"q1-b": SOON})),
         differs="the least work lost goes: q0-b (1 GPU, enough) rather than q0-a"),
    Case("2 jobs running for queue0 on 3 GPUs, 1 job running for queue1 on 1 GPU, 1 pending job for queue1, deserved of queue1 is 1 -  don't reclaim", "KAI reclaim_test.go",
         "  - {name: q0, deserved: {gpu: 3}}\n  - {name: q1, deserved: {gpu: 1}}",
         [J("q0-a", "q0", gpus=2), J("q0-b", "q0", gpus=1), J("q1-a", "q1", gpus=1), J("q1-b", "q1", at=100, gpus=1)],
         expect=both(expect_preempted(), expect_starts(**{"q1-b": 10_000}))),
    Case("Don't reclaim if department will be overquota", "KAI reclaim_test.go",
         "  - {name: d0, deserved: {gpu: 1}}\n  - {name: q0, parent: d0, deserved: {gpu: 2}}\n  - {name: d1, deserved: {gpu: 3}}\n  - {name: q1, parent: d1, deserved: {gpu: 3}}",
         [J("q1-a", "q1", gpus=4), J("q0-a", "q0", at=100, gpus=2)], invalid="the children's deserved sum to 2, above this queue's 1",
         differs="our contract refuses a department whose children deserve more than it does (so a leaf within its share never takes "
                 "its department over); KAI accepts the config and declines the reclaim"),
    Case("Don't reclaim for a queue whose department is over its share through a borrowing sibling", "KAI reclaim_test.go (department variant)",
         "  - {name: d0, deserved: {gpu: 2}}\n  - {name: q0, parent: d0, deserved: {gpu: 1}}\n  - {name: q0b, parent: d0, deserved: {gpu: 1}}\n"
         "  - {name: d1, deserved: {gpu: 2}}\n  - {name: q1, parent: d1, deserved: {gpu: 2}}",
         [J("q1-a", "q1", gpus=2), J("q0b-a", "q0b", gpus=2), J("q0-a", "q0", at=100, gpus=2)],
         expect=both(expect_preempted(), expect_starts(**{"q0-a": 10_000})),
         differs="q0 asks above its own deserved, so it is not entitled to reclaim at all"),
    Case("Classic reclaim for train jobs between departments", "KAI reclaim_test.go",
         "  - {name: d0, deserved: {gpu: 2}}\n  - {name: q0, parent: d0, deserved: {gpu: 2}}\n  - {name: d1, deserved: {gpu: 2}}\n  - {name: q1, parent: d1, deserved: {gpu: 2}}",
         [J("q1-a", "q1", gpus=2), J("q1-b", "q1", gpus=2), J("q0-a", "q0", at=100, gpus=2)],
         expect=lambda r: (len(r.preempted()) == 1 and set(r.preempted()) <= {"q1-a", "q1-b"} and r.start("q0-a") <= SOON) or pytest.fail(str(r.preempted()))),
    Case("Classic interactive job reclaim train job from different department", "KAI reclaim_test.go",
         "  - {name: d0, deserved: {gpu: 2}}\n  - {name: q0, parent: d0, deserved: {gpu: 2}}\n  - {name: d1, deserved: {gpu: 2}}\n  - {name: q1, parent: d1, deserved: {gpu: 2}}",
         [J("q1-a", "q1", gpus=4), J("q0-a", "q0", at=100, gpus=1, kind="interactive")],
         expect=expect_preempted("q1-a", reason="Reclaim", then=expect_starts(**{"q0-a": SOON}))),
    Case("Reclaim trains according to priority", "KAI reclaim_test.go", Q2,
         [J("q1-train", "q1", gpus=2), J("q1-inter", "q1", gpus=2, kind="interactive"), J("q0-a", "q0", at=100, gpus=2)],
         expect=expect_preempted("q1-train", reason="Reclaim")),
    Case("Reclaim from different department and same department", "KAI reclaim_test.go",
         "  - {name: d0, deserved: {gpu: 2}}\n  - {name: q0, parent: d0, deserved: {gpu: 1}}\n  - {name: q0b, parent: d0, deserved: {gpu: 1}}\n"
         "  - {name: d1, deserved: {gpu: 2}}\n  - {name: q1, parent: d1, deserved: {gpu: 2}}",
         [J("q0b-a", "q0b", gpus=2), J("q1-a", "q1", gpus=2), J("q0-a", "q0", at=100, gpus=1)],
         expect=expect_preempted("q0b-a", reason="Reclaim", then=expect_starts(**{"q0-a": SOON})),
         differs="the sibling that borrows inside the department gives back; the other department, within its deserved, keeps its job"),
    Case("both departments are under deserved quota - should not reclaim", "KAI reclaim_test.go",
         "  - {name: d0, deserved: {gpu: 2}}\n  - {name: q0, parent: d0, deserved: {gpu: 2}}\n  - {name: d1, deserved: {gpu: 2}}\n  - {name: q1, parent: d1, deserved: {gpu: 2}}",
         [J("q1-a", "q1", gpus=2), J("q0-a", "q0", gpus=1), J("q0-b", "q0", at=100, gpus=2)],
         expect=expect_preempted()),
    Case("reclaim fractional train by whole GPU job", "KAI reclaimFractional_test.go", Q2,
         [J(f"q1-f{i}", "q1", milli=500) for i in range(8)] + [J("q0-whole", "q0", at=100, gpus=1)],
         expect=lambda r: (len(r.preempted()) == 2 and set(r.preempted().values()) == {"Reclaim"} and r.start("q0-whole") <= SOON) or pytest.fail(str(r.preempted()))),
    Case("a queue with no quota borrows all it uses and gives it back first", "Kueue preemption: reclaim quota from borrower",
         "  - {name: q0, deserved: {gpu: 4}}\n  - {name: scavenger}", [J("s", "scavenger", gpus=4), J("q0-a", "q0", at=100, gpus=4)],
         expect=expect_preempted("s", reason="Reclaim", then=expect_starts(**{"q0-a": SOON}))),
    Case("a borrower within its limit is not reclaimed when the lender is over its own share", "Kueue preemption: don't reclaim when lender is above nominal",
         Q2, [J("q0-a", "q0", gpus=2), J("q1-a", "q1", gpus=2), J("q0-b", "q0", at=100, gpus=1)], expect=expect_preempted()),
    Case("non-preemptible work is never a victim", "Kueue preemption: workloads without preemption",
         Q2, [J("q1-build", "q1", gpus=4, kind="build"), J("q0-a", "q0", at=100, gpus=2)],
         expect=both(expect_preempted(), expect_starts(**{"q0-a": 10_000}))),
    # ---- Kueue's preemption table (pkg/scheduler/preemption/preemption_test.go), in GPUs: two queues of 6 in one cohort ----
    Case("reclaim quota from borrower", "Kueue preemption_test.go", "  - {name: c1, deserved: {gpu: 6}}\n  - {name: c2, deserved: {gpu: 6}}",
         [J("c1-low", "c1", gpus=3), J("c2-mid", "c2", gpus=3, kind="interactive"), J("c2-high", "c2", gpus=6, kind="build"), J("in", "c1", at=100, gpus=3)],
         nodes=[(2, 6)], expect=expect_preempted("c2-mid", reason="Reclaim", then=expect_starts(**{"in": SOON}))),
    Case("no workloads borrowing", "Kueue preemption_test.go", "  - {name: c1, deserved: {gpu: 6}}\n  - {name: c2, deserved: {gpu: 6}}",
         [J("c1-high", "c1", gpus=4, kind="interactive"), J("c2-low-1", "c2", gpus=4), J("in", "c1", at=100, gpus=4, kind="interactive")],
         nodes=[(2, 4)], expect=both(expect_preempted(), expect_starts(**{"in": 10_000})),
         differs="nothing borrows, so reclaim has no victim; the incoming job waits for c1's own job (it is not of a higher class than it)"),
    Case("not enough workloads borrowing", "Kueue preemption_test.go", "  - {name: c1, deserved: {gpu: 6}}\n  - {name: c2, deserved: {gpu: 6}}",
         [J("c1-high", "c1", gpus=4, kind="interactive"), J("c2-low-1", "c2", gpus=4), J("c2-low-2", "c2", gpus=4), J("in", "c1", at=100, gpus=4, kind="interactive")],
         nodes=[(3, 4)], expect=both(expect_preempted(), expect_starts(**{"in": 10_000})),
         differs="c1 would go to 8 of its 6: it is not entitled to reclaim, so it waits"),
    Case("preempting locally and borrowing same resource in cohort", "Kueue preemption_test.go", "  - {name: c1, deserved: {gpu: 6}}\n  - {name: c2, deserved: {gpu: 6}}",
         [J("c1-med", "c1", gpus=4, kind="interactive"), J("c1-low", "c1", gpus=4), J("c2-low-1", "c2", gpus=4), J("in", "c1", at=100, gpus=4, kind="urgent")],
         nodes=[(3, 4)], expect=expect_preempted("c1-low", reason="Priority", then=expect_starts(**{"in": SOON}))),
    Case("do not reclaim borrowed quota from the same priority when the lender is above its share", "Kueue preemption_test.go",
         "  - {name: c1, deserved: {gpu: 6}}\n  - {name: c2, deserved: {gpu: 6}}",
         [J("c1", "c1", gpus=2), J("c2-1", "c2", gpus=4), J("c2-2", "c2", gpus=4), J("in", "c1", at=100, gpus=2, tasks=3)],
         nodes=[(3, 4)], expect=both(expect_preempted(), expect_starts(**{"in": 10_000})),
         differs="c1 asks for 8 of its 6, so no reclaim; Kueue's case turns on its withinCohort policy, which we do not have"),
    Case("preempting while borrowing: a higher priority takes another queue's borrowed lower priority", "Kueue preemption_test.go (borrowWithinCohort)",
         "  - {name: c1, deserved: {gpu: 4}}\n  - {name: c2, deserved: {gpu: 4}}",
         [J("c1-own", "c1", gpus=4, kind="build"), J("c2-a", "c2", gpus=4, kind="interactive"), J("c2-low", "c2", gpus=4), J("in", "c1", at=100, gpus=4, kind="urgent")],
         nodes=[(3, 4)], policies="preemption: {grace_s: 10, borrow_within_cohort_max_priority: 75}",
         expect=expect_preempted("c2-low", reason="ReclaimWhileBorrowing", then=expect_starts(**{"in": SOON}))),
    Case("preempting while borrowing spares work above the priority threshold", "Kueue preemption_test.go (borrowWithinCohort maxPriorityThreshold)",
         "  - {name: c1, deserved: {gpu: 4}}\n  - {name: c2, deserved: {gpu: 4}}",
         [J("c1-own", "c1", gpus=4, kind="build"), J("c2-a", "c2", gpus=4, kind="interactive"), J("c2-b", "c2", gpus=4, kind="interactive"), J("in", "c1", at=100, gpus=4, kind="urgent")],
         nodes=[(3, 4)], policies="preemption: {grace_s: 10, borrow_within_cohort_max_priority: 50}",
         expect=both(expect_preempted(), expect_starts(**{"in": 10_000}))),
    Case("preempting while borrowing never puts the other queue below its deserved share", "Kueue preemption_test.go (borrowWithinCohort)",
         "  - {name: c1, deserved: {gpu: 4}}\n  - {name: c2, deserved: {gpu: 4}}",
         [J("c1-own", "c1", gpus=4, kind="build"), J("c2-a", "c2", gpus=2, kind="interactive"), J("c2-big", "c2", gpus=4), J("in", "c1", at=100, gpus=4, kind="urgent")],
         nodes=[(3, 4)], policies="preemption: {grace_s: 10, borrow_within_cohort_max_priority: 50}",
         expect=both(expect_preempted(), expect_starts(**{"in": 10_000})),
         differs="Kueue takes c2-big, as c2 borrows before; it would leave c2 at 2 of its 4, entitled to reclaim from c1 "
                 "(now borrowing) at once: capacity would thrash between them, so nothing is taken"),
    Case("without borrowWithinCohort a job that borrows does not preempt other queues", "Kueue preemption_test.go",
         "  - {name: c1, deserved: {gpu: 4}}\n  - {name: c2, deserved: {gpu: 4}}",
         [J("c1-own", "c1", gpus=4, kind="build"), J("c2-a", "c2", gpus=4, kind="interactive"), J("c2-low", "c2", gpus=4), J("in", "c1", at=100, gpus=4, kind="urgent")],
         nodes=[(3, 4)], expect=both(expect_preempted(), expect_starts(**{"in": 10_000}))),
    Case("reclaim where the free GPUs are another queue's idle guarantee", "ours (found by benchmarks/tidal_week.py)",
         "  - {name: q0, deserved: {gpu: 4}}\n  - {name: q1, guarantee: {gpu: 2}, deserved: {gpu: 2}}\n  - {name: q2, deserved: {gpu: 2}}",
         [J(f"q2-{i}", "q2", gpus=2) for i in range(3)] + [J("in", "q0", at=100, gpus=2)], nodes=[(2, 4)],
         expect=lambda r: (len(r.preempted()) == 1 and set(r.preempted().values()) == {"Reclaim"} and r.start("in") <= SOON)
         or pytest.fail(f"{r.preempted()} {r.starts()}")),
    Case("a queue reclaimed from may not borrow again until its back-off ends", "Kueue KEP-14468 (reclaim backoff)",
         "  - {name: q0, deserved: {gpu: 4}}\n  - {name: q1, deserved: {gpu: 4}}",
         [J(f"q1-{i}", "q1", gpus=1) for i in range(8)] + [J("short", "q0", at=100, gpus=1, dur=50), J("long", "q0", at=100, gpus=1)],
         nodes=[(8, 1)], policies="preemption: {grace_s: 10, reclaim_backoff_s: 600}",
         expect=lambda r: (len(r.preempted()) == 2 and restarts(r, *r.preempted()) == [700.0, 10_000.0]) or pytest.fail(f"{r.preempted()} {r.events}")),
    Case("a queue reclaimed from again after its back-off waits twice as long", "Kueue KEP-14468 (reclaim backoff)",
         "  - {name: q0, deserved: {gpu: 4}}\n  - {name: q1, deserved: {gpu: 4}}",
         [J(f"q1-{i}", "q1", gpus=1) for i in range(8)] + [J("short", "q0", at=100, gpus=1, dur=50), J("long", "q0", at=100, gpus=1),
                                                           J("again", "q0", at=800, gpus=1, dur=50)],
         nodes=[(8, 1)], policies="preemption: {grace_s: 10, reclaim_backoff_s: 600}",
         expect=lambda r: (restarts(r, "q1-0") == [700.0] and r.preempted().get("q1-0") == "Reclaim"
                           and [e["t"] for e in r.events if e["type"] == "start" and e["job"] == "q1-0"][-1] == 800 + 1200)
         or pytest.fail(f"{[(e['t'], e['type'], e.get('job')) for e in r.events if e.get('job') in ('q1-0', 'again')]}")),
    Case("without a reclaim back-off a reclaimed queue borrows again at once", "Kueue KEP-14468 (the spin it is for)",
         "  - {name: q0, deserved: {gpu: 4}}\n  - {name: q1, deserved: {gpu: 4}}",
         [J(f"q1-{i}", "q1", gpus=1) for i in range(8)] + [J("short", "q0", at=100, gpus=1, dur=50), J("long", "q0", at=100, gpus=1)],
         nodes=[(8, 1)], expect=lambda r: (restarts(r, *r.preempted()) == [r.start("short") + 50, 10_000.0]) or pytest.fail(f"{r.preempted()}")),
    Case("reclaim borrowed quota from the same priority", "Kueue preemption_test.go", "  - {name: c1, deserved: {gpu: 6}}\n  - {name: c2, deserved: {gpu: 6}}",
         [J("c1-1", "c1", gpus=2), J("c2-1", "c2", gpus=2, tasks=2), J("c2-2", "c2", gpus=2, tasks=2), J("in", "c1", at=100, gpus=2)],
         nodes=[(5, 2)], expect=lambda r: (len(r.preempted()) == 1 and set(r.preempted()) <= {"c2-1", "c2-2"} and r.start("in") <= SOON) or pytest.fail(str(r.preempted())),
         differs="reclaim takes borrowed work of any priority (Kueue's ReclaimFromAny)"),
    Case("preempt newer workloads with the same priority first", "Kueue preemption_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("old", "q0", gpus=2), J("new", "q0", at=50, gpus=2), J("high", "q0", at=100, gpus=2, kind="build")],
         expect=expect_preempted("new", reason="Priority")),
    Case("preempt lowest priority first", "Kueue preemption_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("low", "q0", gpus=2), J("mid", "q0", gpus=2, kind="interactive"), J("high", "q0", at=100, gpus=2, kind="build")],
         expect=expect_preempted("low", reason="Priority")),
    Case("preempt several low to fit one high", "Kueue preemption_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("l1", "q0", gpus=1), J("l2", "q0", gpus=1), J("l3", "q0", gpus=1), J("l4", "q0", gpus=1), J("high", "q0", at=100, gpus=3, kind="build")],
         expect=lambda r: (len(r.preempted()) == 3 and r.start("high") <= SOON) or pytest.fail(str(r.preempted()))),
    Case("do not preempt when the incoming job cannot fit even then", "Kueue preemption_test.go", "  - {name: q0, deserved: {gpu: 4}, capability: {gpu: 4}}",
         [J("build", "q0", gpus=2, kind="build"), J("low", "q0", gpus=2), J("in", "q0", at=100, gpus=4, kind="interactive")],
         expect=expect_preempted()),
    Case("a preempted job runs again once capacity frees", "Kueue scheduler (requeue after eviction)", "  - {name: q0, deserved: {gpu: 4}}",
         [J("low", "q0", gpus=4, dur=500), J("high", "q0", at=100, gpus=4, dur=200, kind="build")],
         expect=lambda r: (r.start("high") <= SOON and [e["t"] for e in r.events if e["type"] == "start" and e["job"] == "low"][-1] >= 300) or pytest.fail(str(r.starts()))),
    # ---- fair sharing (Kueue fair sharing; KAI DRF across queues) ----
    Case("surplus goes to the queue with the lower share of it", "Kueue fair sharing: lowest share first", Q2,
         [J("q0-a", "q0", gpus=3), J("q1-a", "q1", gpus=2), J("q0-b", "q0", gpus=1, at=1), J("q1-b", "q1", gpus=1, at=1)],
         nodes=[(1, 6)], expect=lambda r: (r.start("q1-b") == 1 and r.start("q0-b") >= 10_000) or pytest.fail(str(r.starts()))),
    Case("weights split the surplus", "Kueue fair sharing: weights", "  - {name: q0, weight: 3}\n  - {name: q1, weight: 1}",
         [J(f"q0-{i}", "q0", gpus=1) for i in range(4)] + [J(f"q1-{i}", "q1", gpus=1) for i in range(4)],
         expect=lambda r: (sum(1 for j in r.running_at(0) if j.startswith("q0")) == 3) or pytest.fail(str(r.running_at(0)))),
    Case("a queue within its share is admitted before borrowers", "Kueue fair sharing: nominal first", Q2,
         [J("q1-a", "q1", gpus=2), J("q1-b", "q1", gpus=1, at=5), J("q0-a", "q0", gpus=2, at=5)], nodes=[(1, 4)],
         expect=lambda r: (r.start("q0-a") == 5 and r.start("q1-b") >= 10_000 and not r.preempted()) or pytest.fail(str(r.starts()))),
    # ---- tidal and guarantees (ours) ----
    Case("a guarantee is held idle for its queue; others' jobs wait rather than take it", "ours (guarantee)",
         "  - {name: online, guarantee: {gpu: 2}, deserved: {gpu: 2}, sites: [idc]}\n  - {name: batch, deserved: {gpu: 2}}",
         [J("b1", "batch", gpus=2), J("b2", "batch", gpus=2, at=1)], expect=expect_starts(b1=0, b2=10_000)),
    Case("a queue borrows up to its borrowing limit and no further", "Kueue: borrowingLimit",
         "  - {name: q0, deserved: {gpu: 1}, borrowing_limit: {gpu: 1}}\n  - {name: q1, deserved: {gpu: 3}}",
         [J("a", "q0", gpus=2), J("b", "q0", gpus=1, at=1)], expect=expect_starts(a=0, b=10_000)),
    Case("a lending limit keeps part of an idle queue's share from others", "Kueue: lendingLimit",
         "  - {name: q0, deserved: {gpu: 2}, lending_limit: {gpu: 1}}\n  - {name: q1, deserved: {gpu: 2}}",
         [J("a", "q1", gpus=3), J("b", "q1", gpus=1, at=1)], expect=expect_starts(a=0, b=10_000)),
    # ---- fractional GPUs (KAI allocateFractionalGpu_test.go, reclaimFractional_test.go) ----
    Case("1 shared gpu job running, 1 pending shared gpu job - allocate", "KAI allocateFractionalGpu_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("f1", "q0", milli=500), J("f2", "q0", at=1, milli=500)], expect=expect_starts(f1=0, f2=1)),
    Case("1 whole gpu job running, 1 pending shared gpu job - allocate", "KAI allocateFractionalGpu_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("whole", "q0", gpus=1), J("frac", "q0", at=1, milli=500)], nodes=[(1, 2)], expect=expect_starts(whole=0, frac=1)),
    Case("1 interactive shared gpu job running, 4 pending shared gpus - allocate 3 of the shared GPUs jobs", "KAI allocateFractionalGpu_test.go",
         "  - {name: q0, deserved: {gpu: 2}}", [J("f0", "q0", milli=500, kind="interactive")] + [J(f"p{i}", "q0", at=1, milli=500) for i in range(4)],
         nodes=[(1, 2)], expect=lambda r: (len(r.running_at(1)) == 4) or pytest.fail(str(r.running_at(1)))),
    Case("shared jobs pack onto a GPU already shared, leaving whole GPUs whole", "KAI allocateFractionalGpu_test.go (gpuSharingOrder)",
         "  - {name: q0, deserved: {gpu: 2}}", [J("f1", "q0", milli=400), J("f2", "q0", at=1, milli=400), J("whole", "q0", at=2, gpus=1)],
         nodes=[(1, 2)], expect=expect_starts(f1=0, f2=1, whole=2)),
    Case("reclaim fractional train by fractional GPU job - reclaim only part of fractional jobs", "KAI reclaimFractional_test.go", Q2,
         [J(f"q1-f{i}", "q1", milli=500) for i in range(8)] + [J("q0-f", "q0", at=100, milli=500)],
         expect=lambda r: (len(r.preempted()) == 1 and r.start("q0-f") <= SOON) or pytest.fail(str(r.preempted()))),
    Case("reclaim fractional train by fractional GPU job will go over quota - don't reclaim", "KAI reclaimFractional_test.go",
         "  - {name: q0, deserved: {gpu: 0.5}}\n  - {name: q1, deserved: {gpu: 3.5}}",
         [J("q0-f", "q0", milli=500)] + [J(f"q1-f{i}", "q1", milli=500) for i in range(7)] + [J("q0-g", "q0", at=100, milli=500)],
         expect=expect_preempted()),
    # ---- MIG (KAI allocateMIG_test.go, preemptMIG_test.go, reclaimMIG_test.go) ----
    Case("MIG job requesting single MIG device", "KAI allocateMIG_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("m", "q0", mig="1g.10gb")], group="mig: {enabled: true}",
         expect=lambda r: (r.start("m") is not None and r.start("m") <= 120) or pytest.fail(str(r.starts())),
         differs="the GPU is sliced first (reconfigure_s, 60 s by default), then the job starts; KAI's nodes come pre-sliced"),
    Case("MIG job with multiple tasks requesting MIG device", "KAI allocateMIG_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("m", "q0", mig="1g.10gb", tasks=3)], group="mig: {enabled: true}",
         expect=lambda r: (r.start("m") is not None and r.start("m") <= 120) or pytest.fail(str(r.starts()))),
    Case("MIG job requesting unavailable MIG device", "KAI allocateMIG_test.go", "  - {name: q0, deserved: {gpu: 4}}",
         [J("m", "q0", mig="1g.10gb")], expect=lambda r: r.start("m") is None or pytest.fail("a MIG job ran on a node group without MIG"),
         differs="our trace reader refuses it outright (no node of the queue's sites has that profile); the core leaves it pending"),
    # ---- topology (KAI allocate_topology_test.go) ----
    Case("Topology constraint - job cannot fit in single domain, stays pending", "KAI allocate_topology_test.go", "  - {name: q0, deserved: {gpu: 8}}",
         [J("g", "q0", gpus=2, tasks=3)], nodes=[(4, 2)], group="racks: 2", policies="preemption: {grace_s: 10}, placement: {gang_topology: require-same-rack}",
         expect=expect_starts(g=None)),
    Case("Preferred topology only - still allocates when preferred level cannot be satisfied", "KAI allocate_topology_test.go", "  - {name: q0, deserved: {gpu: 8}}",
         [J("g", "q0", gpus=2, tasks=3)], nodes=[(4, 2)], group="racks: 2", policies="preemption: {grace_s: 10}, placement: {gang_topology: prefer-same-rack}",
         expect=expect_starts(g=0)),
    Case("Multi-level topology - pack job in single rack with preferred level", "KAI allocate_topology_test.go", "  - {name: q0, deserved: {gpu: 8}}",
         [J("g", "q0", gpus=2, tasks=2)], nodes=[(4, 2)], group="racks: 2",
         expect=lambda r: (len({p["node"] for e in r.events if e["type"] == "admit" for p in e["placements"]}) == 2 and
                           len({int(p["node"].rsplit("-", 1)[1]) % 2 for e in r.events if e["type"] == "admit" for p in e["placements"]}) == 1)
         or pytest.fail("the gang spans racks")),
    # ---- elastic gangs ----
    Case("an elastic gang starts with its minimum when that is all there is", "Volcano minAvailable / KAI elastic", "  - {name: q0, deserved: {gpu: 4}}",
         [J("e", "q0", gpus=1, tasks=6, min_tasks=3)], expect=expect_starts(e=0)),
    Case("Reclaim only over quota task from elastic Job", "KAI reclaim_test.go", Q2,
         [J("q1-e", "q1", gpus=1, tasks=4, min_tasks=2), J("q0-a", "q0", at=100, gpus=2)],
         expect=both(expect_preempted(), expect_starts(**{"q0-a": 100}),
                     lambda r: (len(next(e for e in r.events if e["type"] == "admit" and e["job"] == "q1-e")["placements"]) == 2) or pytest.fail("grew")),
         differs="an elastic gang grows past its minimum only within its queue's deserved share (it is preempted whole), so there is "
                 "nothing over quota to reclaim: q1-e runs 2 tasks and q0-a starts at once. Before, it grew to 4 on borrowed GPUs, "
                 "was reclaimed, came back at 4 and was reclaimed again, forever"),
    Case("an elastic gang grows into its queue's free share", "Volcano minAvailable", "  - {name: q0, deserved: {gpu: 4}}\n  - {name: q1, deserved: {gpu: 4}}",
         [J("e", "q0", gpus=1, tasks=6, min_tasks=2)], nodes=[(2, 4)],
         expect=lambda r: (len(next(e for e in r.events if e["type"] == "admit")["placements"]) == 4) or pytest.fail("did not grow to its share")),
    # ---- more of KAI's reclaim_test.go and allocate_test.go ----
    Case("allocate pending jobs, allow over quota for train jobs (with interactive jobs)", "KAI allocate_test.go", "  - {name: q0, deserved: {gpu: 1}}",
         [J("t1", "q0"), J("t2", "q0"), J("i1", "q0", kind="interactive")], expect=expect_starts(t1=0, t2=0, i1=0)),
    Case("don't allocate over quota build jobs", "KAI allocate_test.go", "  - {name: q0, deserved: {gpu: 1}}\n  - {name: q1, deserved: {gpu: 1}}",
         [J("build", "q0", gpus=2, kind="build")], expect=expect_waits("build", reason="NonPreemptibleOverQuota")),
    Case("a non-preemptible job reclaims what its queue deserves and runs within it", "KAI reclaim_test.go (build job under quota)",
         "  - {name: q0, deserved: {gpu: 2}}\n  - {name: q1, deserved: {gpu: 2}}",
         [J("a", "q1", gpus=2), J("b", "q1", gpus=2), J("build", "q0", at=100, gpus=2, kind="build")],
         expect=lambda r: (len(r.preempted()) == 1 and set(r.preempted().values()) == {"Reclaim"} and r.start("build") == 100 + GRACE)
         or pytest.fail(f"{r.preempted()} {r.starts()}")),
    Case("a non-preemptible job waits while its queue runs its deserved share of non-preemptible work, and not for preemptible borrowing",
         "KAI allocate_test.go (build job over quota, on non-preemptible allocation)", "  - {name: q0, deserved: {gpu: 2}}\n  - {name: q1, deserved: {gpu: 2}}",
         [J("in", "q0", gpus=2, kind="build", dur=100), J("over", "q0", gpus=1, kind="build"), J("train", "q0", gpus=2)],
         expect=both(expect_preempted(), expect_starts(**{"in": 0, "train": 0, "over": 100})),
         differs="over waits for in (q0's non-preemptible work is at its deserved 2), not for train: q0 borrows for train, "
                 "and reclaim could take train back; preempting train would not let over in"),
    Case("Reclaim trains according to deserved quota", "KAI reclaim_test.go", "  - {name: q0, deserved: {gpu: 3}}\n  - {name: q1, deserved: {gpu: 1}}",
         [J(f"q1-{i}", "q1") for i in range(4)] + [J("q0-a", "q0", at=100, gpus=3)],
         expect=lambda r: (len(r.preempted()) == 3 and r.start("q0-a") <= SOON) or pytest.fail(str(r.preempted()))),
    Case("d2 is under deserved quota and d1 is over quota - reclaim", "KAI reclaim_test.go", "  - {name: d1, deserved: {gpu: 2}}\n  - {name: q1, parent: d1, deserved: {gpu: 2}}\n  - {name: d2, deserved: {gpu: 2}}\n  - {name: q2a, parent: d2, deserved: {gpu: 1}}\n  - {name: q2b, parent: d2, deserved: {gpu: 1}}",
         [J("q1-a", "q1", gpus=2), J("q1-b", "q1", gpus=2), J("q2a-a", "q2a", at=100)],
         expect=lambda r: (len(r.preempted()) == 1 and set(r.preempted().values()) == {"Reclaim"} and r.start("q2a-a") <= SOON) or pytest.fail(str(r.preempted()))),
    Case("both departments got deserved quota, a queue within d2 is under quota - reclaim from another queue", "KAI reclaim_test.go", "  - {name: d1, deserved: {gpu: 2}}\n  - {name: q1, parent: d1, deserved: {gpu: 2}}\n  - {name: d2, deserved: {gpu: 2}}\n  - {name: q2a, parent: d2, deserved: {gpu: 1}}\n  - {name: q2b, parent: d2, deserved: {gpu: 1}}",
         [J("q1-a", "q1", gpus=2), J("q2a-a", "q2a"), J("q2a-b", "q2a"), J("q2b-a", "q2b", at=100)],
         expect=lambda r: (len(r.preempted()) == 1 and set(r.preempted()) <= {"q2a-a", "q2a-b"} and r.start("q2b-a") <= SOON) or pytest.fail(str(r.preempted()))),
    Case("departments and queues are over deserved quota and within fair share - should not reclaim", "KAI reclaim_test.go", "  - {name: d1, deserved: {gpu: 2}}\n  - {name: q1, parent: d1, deserved: {gpu: 2}}\n  - {name: d2, deserved: {gpu: 2}}\n  - {name: q2a, parent: d2, deserved: {gpu: 1}}\n  - {name: q2b, parent: d2, deserved: {gpu: 1}}",
         [J("q1-a", "q1", gpus=2), J("q2a-a", "q2a", gpus=2), J("q1-b", "q1", at=100), J("q2a-b", "q2a", at=100)],
         expect=expect_preempted(), differs="q2a already holds d2's whole share, so neither waiting job is entitled to reclaim"),
    Case("a borrower is reclaimed only as far as it borrows", "Kueue preemption: minimal set", Q2,
         [J(f"q1-{i}", "q1") for i in range(4)] + [J("q0-a", "q0", at=100, gpus=2)],
         expect=lambda r: (len(r.preempted()) == 2 and r.start("q0-a") <= SOON) or pytest.fail(str(r.preempted()))),
    Case("reclaim takes the lowest-priority borrower first across queues", "KAI reclaim_test.go (priority across queues)",
         "  - {name: q0, deserved: {gpu: 2}}\n  - {name: q1, deserved: {gpu: 1}}\n  - {name: q2, deserved: {gpu: 1}}",
         [J("q1-a", "q1"), J("q1-b", "q1", kind="interactive"), J("q2-a", "q2"), J("q2-b", "q2"), J("q0-a", "q0", at=100)],
         expect=lambda r: (len(r.preempted()) == 1 and set(r.preempted()) <= {"q1-a", "q2-a", "q2-b"}) or pytest.fail(str(r.preempted()))),
    Case("of equal borrowers, the one that started last goes first", "Kueue preemption: newest first", Q2,
         [J("q1-old", "q1", gpus=2), J("q1-new", "q1", gpus=2, at=50), J("q0-a", "q0", at=100, gpus=2)],
         expect=expect_preempted("q1-new", reason="Reclaim")),
    # ---- ours: capabilities users asked for (issue 19) ----
    Case("reclaim waits until the borrower has run its minimum", "ours (reclaim_min_runtime_s; Kueue KEP-14468)", Q2,
         [J("q1-a", "q1", gpus=4), J("q0-a", "q0", at=100, gpus=2)], policies="preemption: {grace_s: 10, reclaim_min_runtime_s: 600}",
         expect=lambda r: (r.preempted() == {"q1-a": "Reclaim"} and 600 <= r.start("q0-a") <= 600 + GRACE + 5) or pytest.fail(str(r.starts()))),
    Case("a queue runs at most max_running_jobs at once", "ours (max_running_jobs; Armada/YuniKorn max applications)",
         "  - {name: q0, deserved: {gpu: 4}, max_running_jobs: 2}", [J(f"j{i}", "q0", dur=100) for i in range(4)],
         expect=lambda r: (len(r.running_at(0)) == 2 and len(r.running_at(100)) == 2) or pytest.fail(str(r.starts()))),
    Case("a parent's max_running_jobs bounds its children together", "ours (max_running_jobs)",
         "  - {name: d0, max_running_jobs: 3}\n  - {name: q0, parent: d0, deserved: {gpu: 2}}\n  - {name: q1, parent: d0, deserved: {gpu: 2}}",
         [J(f"q0-{i}", "q0", dur=100) for i in range(2)] + [J(f"q1-{i}", "q1", dur=100) for i in range(2)],
         expect=lambda r: (len(r.running_at(0)) == 3) or pytest.fail(str(r.running_at(0)))),
    Case("a run past its max_runtime_s is stopped and frees its GPUs", "ours (max_runtime_s; Kueue maximumExecutionTimeSeconds)", "  - {name: q0, deserved: {gpu: 4}}",
         [J("long", "q0", gpus=4, dur=10_000, max_runtime=300), J("next", "q0", at=1, gpus=4, dur=10)],
         expect=lambda r: (r.start("next") == 300 and any(e["type"] == "finish" and e.get("failed") == "MaxRuntimeExceeded" for e in r.events))
         or pytest.fail(str(r.starts()))),
    Case("a window raises a capability, and what waited for it starts when it opens", "ours (tidal windows)",
         "  - {name: q0, deserved: {gpu: 2}, capability: {gpu: 2}}", [J("a", "q0", gpus=2), J("b", "q0", gpus=2, at=1)],
         policies='preemption: {grace_s: 10}, tidal: [{name: day, window: {start: "08:00", end: "20:00"}, queues: {q0: {capability: {gpu: 4}}}}]',
         expect=expect_starts(a=0, b=8 * 3600)),
    Case("a window that lowers a capability gives the excess back one job at a time", "ours (QuotaShrink; YuniKorn quota preemption)",
         "  - {name: q0, deserved: {gpu: 4}}", [J("a", "q0", gpus=2, dur=100_000), J("b", "q0", gpus=2, at=1, dur=100_000)],
         policies='preemption: {grace_s: 10, quota_shrink_delay_s: 300}, tidal: [{name: day, window: {start: "08:00", end: "20:00"}, queues: {q0: {deserved: {gpu: 2}, capability: {gpu: 2}}}}]',
         expect=lambda r: (r.preempted() == {"b": "QuotaShrink"} and 8 * 3600 + 300 <= next(e["t"] for e in r.events if e["type"] == "preempt") <= 8 * 3600 + 320)
         or pytest.fail(str(r.preempted()))),
    Case("fractional jobs of two queues share one GPU", "KAI allocateFractionalGpu_test.go (across queues)", Q2,
         [J("q0-f", "q0", milli=500), J("q1-f", "q1", milli=500)], nodes=[(1, 1)], expect=expect_starts(**{"q0-f": 0, "q1-f": 0})),
    Case("a gang needing more than one node's GPUs spans nodes of one site", "Volcano gang: multi-node", "  - {name: q0, deserved: {gpu: 8}}",
         [J("g", "q0", gpus=4, tasks=2)], nodes=[(2, 4)],
         expect=lambda r: (len({p["node"] for p in next(e for e in r.events if e["type"] == "admit")["placements"]}) == 2) or pytest.fail("one node")),
    Case("a gang is placed whole or waits: one task too many waits for all", "Volcano gang: minMember", "  - {name: q0, deserved: {gpu: 8}}",
         [J("hold", "q0", gpus=1, dur=100), J("g", "q0", at=1, gpus=1, tasks=4)], nodes=[(1, 4)], expect=expect_starts(g=100)),
    Case("a higher class waiting in its queue goes before a lower one that came first", "KAI allocate_test.go (priority within a queue)",
         "  - {name: q0, deserved: {gpu: 2}}", [J("hold", "q0", gpus=2, dur=100, kind="build"), J("low", "q0", at=1, gpus=2), J("high", "q0", at=2, gpus=2, kind="build")],
         nodes=[(1, 2)], expect=lambda r: (r.start("high") == 100 and r.start("low") >= 10_100) or pytest.fail(str(r.starts()))),
    Case("Inference preempts train", "KAI preemptMIG_test.go (whole GPUs here)", "  - {name: q0, deserved: {gpu: 4}}",
         [J("train", "q0", gpus=4), J("infer", "q0", at=100, gpus=1, kind="interactive")],
         expect=expect_preempted("train", reason="Priority", then=expect_starts(infer=SOON))),
    Case("queues of equal share are served in turn", "Kueue fair sharing: round robin of equal shares", "  - {name: q0}\n  - {name: q1}",
         [J(f"q0-{i}", "q0") for i in range(3)] + [J(f"q1-{i}", "q1") for i in range(3)], nodes=[(1, 4)],
         expect=lambda r: (sorted(j[:2] for j in r.running_at(0)) == ["q0", "q0", "q1", "q1"]) or pytest.fail(str(r.running_at(0)))),
    Case("capacity freed by a finished job goes to the longest-waiting within a queue", "KAI allocate_test.go (creation time)", "  - {name: q0, deserved: {gpu: 4}}",
         [J("hold", "q0", gpus=4, dur=100, kind="build"), J("w1", "q0", at=1, gpus=4), J("w2", "q0", at=2, gpus=4)],
         expect=expect_starts(w1=100)),
    Case("a borrowing queue's job waits when the cluster is full of others' work within their shares", "Kueue: borrowing needs free quota", Q2,
         [J("q0-a", "q0", gpus=2), J("q1-a", "q1", gpus=2), J("q0-b", "q0", at=1)], expect=both(expect_preempted(), expect_starts(**{"q0-b": 10_000}))),
    # ---- consolidation (KAI consolidation_test.go): r0 and f fill node0, r1 (and r2) go to node1,
    # then f ends, leaving the free GPUs split between the two 4-GPU nodes ----
    Case("2 jobs of 1 task running on different GPUs, two pending jobs, only first can be consolidated", "KAI consolidation_test.go",
         "  - {name: q0, deserved: {gpu: 8}}",
         [J("r0", "q0", gpus=2), J("f", "q0", gpus=2, dur=50), J("r1", "q0", at=1, gpus=2), J("p0", "q0", at=60, gpus=3), J("p1", "q0", at=61, gpus=2)],
         nodes=[(2, 4)], expect=both(expect_consolidated("p0", "r1", by=60 + GRACE + 5), expect_waits("p1")),
         differs="KAI pipelines the move within one session; ours preempts r1 (grace_s) and holds the node it leaves for p0 until r1 restarts elsewhere"),
    Case("2 jobs of 2 & 1 GPUs running, two pending jobs, only second can be consolidated", "KAI consolidation_test.go",
         "  - {name: q0, deserved: {gpu: 8}}",
         [J("r0", "q0", gpus=2), J("f", "q0", gpus=2, dur=50), J("r1", "q0", at=1, gpus=1), J("r2", "q0", at=1, gpus=2),
          J("p0", "q0", at=60, gpus=2, tasks=2), J("p1", "q0", at=61, gpus=3)],
         nodes=[(2, 4)], expect=both(expect_preempted(), expect_waits("p0", "p1")),
         differs="p0, first in line, cannot start even consolidated (3 GPUs free of its 4) and reserves the nodes it will get, "
                 "so p1 does not overtake it (our gangs are not starved by smaller jobs); KAI consolidates for p1"),
    Case("2 jobs of 1 task running on different GPUs, 2 pending jobs, only second can be consolidated", "KAI consolidation_test.go",
         "  - {name: q0, deserved: {gpu: 8}}",
         [J("r0", "q0", gpus=2), J("f", "q0", gpus=2, dur=50), J("r1", "q0", at=1, gpus=2), J("p0", "q0", at=60, gpus=5), J("p1", "q0", at=61, gpus=3)],
         nodes=[(2, 4)], expect=both(expect_consolidated("p1", "r1", by=61 + GRACE + 5), expect_waits("p0")),
         differs="p0 can never fit a 4-GPU node: our trace reader would refuse it; given to the core, it waits"),
    Case("2 jobs of 1 task running on different GPUs, two pending jobs - can't Consolidate", "KAI consolidation_test.go",
         "  - {name: q0, deserved: {gpu: 8}}",
         [J("r0", "q0", gpus=3), J("r1", "q0", gpus=3), J("p0", "q0", at=1, gpus=2), J("p1", "q0", at=1, gpus=2)],
         nodes=[(2, 4)], expect=both(expect_preempted(), expect_waits("p0", "p1"))),
    Case("2 jobs of 1 task running on different GPUs, 1 job of 3 gpus is pending - can't Consolidate", "KAI consolidation_test.go",
         "  - {name: q0, deserved: {gpu: 8}}",
         [J("r0", "q0", gpus=3), J("r1", "q0", gpus=3), J("p0", "q0", at=1, gpus=3)],
         nodes=[(2, 4)], expect=both(expect_preempted(), expect_waits("p0"))),
    Case("a non-preemptible job is never moved to consolidate", "KAI consolidation_test.go (non-preemptible)",
         "  - {name: q0, deserved: {gpu: 8}}",
         [J("r0", "q0", gpus=2), J("f", "q0", gpus=2, dur=50), J("r1", "q0", at=1, gpus=2, kind="build"), J("p0", "q0", at=60, gpus=3)],
         nodes=[(2, 4)], expect=both(expect_preempted("r0", reason="Consolidation"), expect_starts(p0=60 + GRACE + 5)),
         differs="the preemptible r0 moves instead (KAI would move it as well)"),
    Case("consolidation off: a gang waits for scattered GPUs to free", "KAI consolidation (action disabled)",
         "  - {name: q0, deserved: {gpu: 8}}",
         [J("r0", "q0", gpus=2), J("f", "q0", gpus=2, dur=50), J("r1", "q0", at=1, gpus=2), J("p0", "q0", at=60, gpus=3)],
         nodes=[(2, 4)], policies="preemption: {grace_s: 10, consolidation: false}", expect=both(expect_preempted(), expect_waits("p0"))),
    # ---- gangs (Volcano gang e2e) ----
    Case("a gang starts all its tasks at once or none", "Volcano gang: gang scheduling", "  - {name: q0, deserved: {gpu: 8}}",
         [J("small", "q0", gpus=1, dur=100), J("gang", "q0", at=1, gpus=1, tasks=4)], nodes=[(4, 1)],
         expect=lambda r: ([e for e in r.events if e["type"] == "admit" and e["job"] == "gang"][0]["t"] >= 100 and
                           len([e for e in r.events if e["type"] == "admit" and e["job"] == "gang"][0]["placements"]) == 4) or pytest.fail("partial")),
    Case("a stream of small jobs does not starve a waiting gang", "Volcano gang: starvation (reserved nodes)", "  - {name: q0, deserved: {gpu: 4}}",
         [J(f"s{i}", "q0", at=i * 20, gpus=1, dur=100) for i in range(40)] + [J("gang", "q0", at=30, gpus=1, tasks=4, dur=50)],
         expect=lambda r: (r.start("gang") is not None and r.start("gang") <= 300) or pytest.fail(f"gang started at {r.start('gang')}")),
    Case("two gangs that together overfill the cluster do not deadlock holding halves", "Volcano gang: no deadlock", "  - {name: q0, deserved: {gpu: 4}}",
         [J("g1", "q0", gpus=1, tasks=3, dur=100), J("g2", "q0", gpus=1, tasks=3, dur=100)], nodes=[(4, 1)],
         expect=expect_starts(g1=0, g2=100)),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.source.split()[0]}: {c.name}" for c in CASES])
def test_scenario(case: Case):
    if case.invalid:
        from federation.errors import ConfigError

        with pytest.raises(ConfigError, match=re.escape(case.invalid)):
            simulate(case)
        return
    case.expect(simulate(case))


def test_the_suite_names_its_sources():
    assert all(c.source for c in CASES) and len(CASES) >= 100
