"""The simulator and the live controller decide alike: one scenario, two shells, the same decisions.

Each scenario runs through `fedctl simulate`'s engine and through the live `Controller` on a fake
clock that ticks every second, with in-process sites that run each dispatched job for its
trace duration (jobs go in through `Controller.submit`, as the API passes them on). The
decisions (admissions with their placements, preemptions with their reasons, requeues,
finishes) are compared event by event: any difference is a failure. A shell that decided on its
own (a broken copy of a rule) fails here, as the last test shows.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from federation.config import parse
from federation.runtime.controller import Controller
from federation.runtime.sites import RaySite
from federation.simulation.engine import SimOptions, Simulator
from federation.simulation.traces import read_jsonl
from federation.store import Store

START = datetime(2026, 1, 5, 0, 0)  # the simulator's t = 0 (a Monday), in the federation's timezone

BASE = """
federation: {name: parity, timezone: UTC}
sites:
  - name: idc
    kind: idc
    ray_address: http://127.0.0.1:9
    node_groups:
      - {name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 4, racks: 2}
"""

SCENARIOS = {
    # two queues each deserving half; dev borrows all of it, prod comes back and reclaims
    "reclaim": (BASE + """
queues:
  - {name: prod, deserved: {gpu: 16}}
  - {name: dev, deserved: {gpu: 16}}
policies:
  preemption: {grace_s: 30}
""", [
        *[{"id": f"dev-{i}", "submit_s": i, "queue": "dev", "tasks": 1, "gpus_per_task": 4, "duration_s": 900 + 50 * i} for i in range(8)],
        {"id": "prod-a", "submit_s": 100, "queue": "prod", "tasks": 1, "gpus_per_task": 8, "duration_s": 400},
        {"id": "prod-b", "submit_s": 160, "queue": "prod", "tasks": 2, "gpus_per_task": 4, "duration_s": 300},
    ]),
    # gangs that need two nodes, small jobs that fragment, an elastic gang, priorities in one queue
    "gangs": (BASE + """
queues:
  - {name: research, deserved: {gpu: 32}}
policies:
  preemption: {grace_s: 20}
""", [
        {"id": "small-1", "submit_s": 0, "queue": "research", "tasks": 1, "gpus_per_task": 3, "duration_s": 500},
        {"id": "small-2", "submit_s": 0, "queue": "research", "tasks": 1, "gpus_per_task": 3, "duration_s": 700},
        {"id": "gang-1", "submit_s": 5, "queue": "research", "tasks": 2, "gpus_per_task": 8, "duration_s": 600},
        {"id": "gang-2", "submit_s": 6, "queue": "research", "tasks": 3, "gpus_per_task": 8, "duration_s": 300},
        {"id": "elastic", "submit_s": 7, "queue": "research", "tasks": 4, "min_tasks": 1, "gpus_per_task": 4, "duration_s": 400},
        {"id": "urgent", "submit_s": 50, "queue": "research", "tasks": 1, "gpus_per_task": 8, "duration_s": 200, "priority": "online"},
        {"id": "late", "submit_s": 620, "queue": "research", "tasks": 1, "gpus_per_task": 2, "duration_s": 100},
    ]),
    # a night window raises a queue's capability at 00:10; what waited for it starts then
    "tidal": (BASE + """
queues:
  - {name: train, deserved: {gpu: 8}, capability: {gpu: 8}}
  - {name: serve, deserved: {gpu: 24}}
policies:
  tidal:
    - name: night
      window: {start: "00:10", end: "06:00"}
      queues:
        train: {capability: {gpu: 32}}
""", [
        {"id": "t-1", "submit_s": 0, "queue": "train", "tasks": 1, "gpus_per_task": 8, "duration_s": 1200},
        {"id": "t-2", "submit_s": 10, "queue": "train", "tasks": 2, "gpus_per_task": 8, "duration_s": 600},
        {"id": "s-1", "submit_s": 20, "queue": "serve", "tasks": 1, "gpus_per_task": 4, "duration_s": 300},
        {"id": "t-3", "submit_s": 30, "queue": "train", "tasks": 1, "gpus_per_task": 4, "duration_s": 300},
    ]),
}
PRIORITIES = """
priority_classes:
  - {name: batch, value: 100, default: true}
  - {name: online, value: 1000, preemptible: false}
"""


class TimedSite(RaySite):
    """A site that runs each dispatched job for its trace duration (stretched, as the simulator
    does, when an elastic gang started with fewer tasks), on the test's clock."""

    def __init__(self, clock, jobs):
        super().__init__("idc", "http://127.0.0.1:9")
        self.clock, self.trace = clock, jobs
        self.runs: dict[str, tuple[float, str]] = {}  # dispatch id -> (ends at, state)

    def has_package(self, name):
        return True

    def submit(self, dispatch_id, entrypoint, runtime_env, allocation, metadata=None):
        job = self.trace[allocation["job"]]
        stretch = job["tasks"] / len(allocation["placements"])
        self.runs.setdefault(dispatch_id, (self.clock[0] + job["duration_s"] * stretch, "RUNNING"))

    def status(self, dispatch_id):
        if dispatch_id not in self.runs:
            return None
        ends, state = self.runs[dispatch_id]
        return "SUCCEEDED" if state == "RUNNING" and self.clock[0] >= ends else state

    def stop(self, dispatch_id):
        if dispatch_id in self.runs:
            self.runs[dispatch_id] = (self.runs[dispatch_id][0], "STOPPED")


def placements(ps) -> tuple:
    return tuple(sorted(json.dumps(p, sort_keys=True) for p in ps))


def simulated(config: str, jobs: list[dict], tmp_path) -> list[tuple]:
    fed = parse(config, "parity.yaml")
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    result = Simulator(fed, read_jsonl(path, fed), SimOptions(seed=1, start=START)).run()
    out = []
    for e in result.events:
        if e["type"] == "admit":
            out.append((e["t"], "admit", e["job"], e["site"], placements(e["placements"])))
        elif e["type"] in ("preempt", "requeue"):
            out.append((e["t"], e["type"], e["job"], e["reason"] if e["type"] == "preempt" else None))
        elif e["type"] == "finish":
            out.append((e["t"], "finish", e["job"]))
    return sorted(out, key=lambda e: (e[0], e[1], e[2]))


def live(config: str, jobs: list[dict], tmp_path, controller=Controller, horizon_s: float | None = None) -> list[tuple]:
    fed = parse(config, "parity.yaml")
    t0 = START.replace(tzinfo=ZoneInfo(fed.timezone)).timestamp()
    clock = [t0]
    trace = {j["id"]: j for j in jobs}
    site = TimedSite(clock, trace)
    ctl = controller(fed, Store(tmp_path / "live.db"), {"idc": site}, clock=lambda: clock[0])
    seen: dict[str, tuple] = {}
    out = []
    horizon = horizon_s or max(j["submit_s"] for j in jobs) + 4 * sum(j["duration_s"] for j in jobs)
    for t in range(int(horizon)):
        clock[0] = t0 + t
        for j in jobs:
            if j["submit_s"] == t:
                meta = {k: str(v) for k, v in j.items() if k not in ("id", "submit_s", "duration_s")}
                ctl.submit({"entrypoint": "python job.py", "submission_id": j["id"], "metadata": meta})
        ctl.tick()
        for row in ctl.store.jobs():
            state = (row.status, row.attempt, row.stop_at_s)
            before = seen.get(row.id)
            if state == before:
                continue
            seen[row.id] = state
            was_status, was_attempt, was_stop = before or ("PENDING", 0, None)
            if row.attempt != was_attempt:
                out.append((float(t), "requeue", row.id, None))
            if row.status in ("ADMITTED", "RUNNING") and (was_status == "PENDING" or row.attempt != was_attempt):
                out.append((float(t), "admit", row.id, row.site, placements(row.placements)))
            if row.stop_at_s is not None and was_stop is None:
                out.append((float(t), "preempt", row.id, re.match(r"preempted \((\w+)\)", row.message).group(1)))
            if row.status == "SUCCEEDED":
                out.append((float(t), "finish", row.id))
        if all(r.status == "SUCCEEDED" for r in ctl.store.jobs()) and len(seen) == len(jobs):
            break
    return sorted(out, key=lambda e: (e[0], e[1], e[2]))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_simulator_and_the_live_controller_make_the_same_decisions(name, tmp_path):
    config, jobs = SCENARIOS[name]
    config += PRIORITIES
    sim = simulated(config, jobs, tmp_path)
    assert sum(1 for e in sim if e[1] == "finish") == len(jobs)  # the scenario ran to its end
    got = live(config, jobs, tmp_path)
    assert got == sim


def test_the_scenarios_exercise_what_they_are_named_for(tmp_path):
    """Guards the parity test against scenarios that decide nothing interesting."""
    kinds = {name: {e[1] for e in simulated(cfg + PRIORITIES, jobs, tmp_path)} for name, (cfg, jobs) in SCENARIOS.items()}
    assert {"preempt", "requeue"} <= kinds["reclaim"] and {"preempt", "requeue"} <= kinds["gangs"]
    sim = simulated(SCENARIOS["tidal"][0] + PRIORITIES, SCENARIOS["tidal"][1], tmp_path)
    opened = (datetime(2026, 1, 5, 0, 10) - START) / timedelta(seconds=1)
    assert any(e[1] == "admit" and e[2] == "t-2" and e[0] == opened for e in sim)  # waited for the window


def test_a_shell_that_decides_on_its_own_is_caught(tmp_path):
    """A controller that keeps a rule of its own (here: it never looks at waiting jobs again
    after their first cycle, as a broken incremental rule would) differs, and the test sees it."""
    import federation.cycle as cycle

    class Broken(Controller):
        def tick(self):
            self.cycle.full_every_s = None
            self.cycle.fingerprint = None if self.cycle.last is None else self.cycle.fingerprint
            real = cycle.incremental_pending
            cycle.incremental_pending = lambda pending, new, reservations, full: real(pending, new, reservations, False)
            try:
                super().tick()
            finally:
                cycle.incremental_pending = real

    config, jobs = SCENARIOS["reclaim"]
    config += PRIORITIES
    sim = simulated(config, jobs, tmp_path)
    (tmp_path / "broken").mkdir()
    broken = live(config, jobs, tmp_path / "broken", Broken, horizon_s=sim[-1][0] + 1)
    assert broken != sim and [e for e in sim if e not in broken]  # decisions it missed, not only extra ones
