"""The simulator and the live controller decide alike: one scenario, two shells, the same decisions.

Each scenario runs through `fedctl simulate`'s engine and through the live `Controller` on a fake
clock that ticks every second, with in-process sites that run each dispatched job for its
trace duration (jobs go in through `Controller.submit`, as the API passes them on). Cloud sites
are fake providers on the same clock (`TimedCloud`), MIG backends likewise (`TimedSlicer`). The
decisions (admissions with their placements, preemptions with their reasons, requeues,
finishes, cloud scale-ups and releases) are compared event by event: any difference is a failure. A shell that decided on its
own (a broken copy of a rule) fails here, as the last test shows.
"""

from __future__ import annotations

import itertools
import json
import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from federation.config import parse
from federation.runtime.controller import Controller
from federation.runtime.mig import LiveMig
from federation.runtime.sites import RaySite, SiteUnavailable
from federation.simulation.engine import Outage, SimOptions, Simulator
from federation.simulation.traces import read_jsonl
from federation.store import Store
from providers.base import ProvidedNode, Provider, ProviderError
from providers.errors import CAPACITY
from providers.mig_backends import ApplyState

START = datetime(2026, 1, 5, 0, 0)  # the simulator's t = 0 (a Monday), in the federation's timezone



def idc(nodes: str) -> str:
    """The federation and its IDC site, whose A100 node group is `nodes` (count, racks); other sites may follow."""
    return "\nfederation: {name: parity, timezone: UTC}\nsites:\n" + site("idc", nodes)


def site(name: str, nodes: str) -> str:
    """An IDC site with one A100 node group of `nodes` (count, racks)."""
    return f"""  - name: {name}
    kind: idc
    ray_address: http://127.0.0.1:9
    node_groups:
      - {{name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, {nodes}}}
"""


BASE = idc("count: 4, racks: 2")

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
    # four lenders reclaim from one borrower at once: each chooses its own victims in one cycle
    # (pipelined onto what is being freed), and three start one grace period later; the
    # fourth waits, since dev keeps the 8 GPUs it deserves (those stopping count as gone)
    "reclaim-many": (BASE + """
queues:
  - {name: dev, deserved: {gpu: 8}}
""" + "".join(f"  - {{name: team{i}, deserved: {{gpu: 8}}}}\n" for i in range(4)) + """policies:
  preemption: {grace_s: 30}
""", [
        *[{"id": f"dev-{i}", "submit_s": i, "queue": "dev", "tasks": 1, "gpus_per_task": 4, "duration_s": 2000} for i in range(8)],
        *[{"id": f"team{i}-a", "submit_s": 100, "queue": f"team{i}", "tasks": 1, "gpus_per_task": 8, "duration_s": 300} for i in range(4)],
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
# A gang that does not fit the IDC bursts; the cloud has no spot capacity (every spot request
# fails), so the next cycle asks the spot group's on-demand fallback. While its nodes boot, a
# burst queue's small jobs arrive: the nodes bought for the gang are the gang's, so the small
# jobs buy their own instead of taking one of them. Idle nodes are given back afterwards.
BURST = idc("count: 2") + """  - name: cloud
    kind: simulated
    provider: {kind: simulated, group_failure_rates: {spot: 1.0}}
    node_groups:
      - {name: spot, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, min_nodes: 0, max_nodes: 4,
         spot: true, price_usd_per_hour: 10, fallback: ondemand, boot_s: 60}
      - {name: ondemand, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, min_nodes: 0, max_nodes: 4,
         price_usd_per_hour: 30, boot_s: 60}
queues:
  - {name: train, deserved: {gpu: 16}, burst: true}
  - {name: batch, deserved: {gpu: 16}, burst: true}
policies:
  burst: {enabled: true, pending_wait_s: 20, budget_usd_per_hour: 200, scale_in_idle_s: 120, provisioning_timeout_s: 600}
"""
SCENARIOS["burst"] = (BURST, [
    {"id": "fill-1", "submit_s": 0, "queue": "train", "tasks": 1, "gpus_per_task": 8, "duration_s": 1500},
    {"id": "fill-2", "submit_s": 0, "queue": "train", "tasks": 1, "gpus_per_task": 8, "duration_s": 1500},
    {"id": "gang", "submit_s": 10, "queue": "train", "tasks": 2, "gpus_per_task": 8, "duration_s": 600},
    *[{"id": f"small-{i}", "submit_s": 100 + i, "queue": "batch", "tasks": 1, "gpus_per_task": 2, "duration_s": 300} for i in range(3)],
])
# A MIG site: inference services of two profiles arrive; the MIG manager slices GPUs for them
# (each re-slice takes reconfigure_s), and a whole-GPU job takes what is left unsliced.
MIG = """
federation: {name: parity, timezone: UTC}
sites:
  - name: idc
    kind: idc
    ray_address: http://127.0.0.1:9
    node_groups:
      - {name: a100, gpu_model: A100-80GB, gpus_per_node: 4, cpus_per_node: 64, memory_gib_per_node: 512, count: 1,
         mig: {enabled: true, backend: none}}
queues:
  - {name: serve, deserved: {gpu: 4}}
policies:
  mig: {reconfigure_s: 30, reconfigure_drain_s: 60}
"""
SCENARIOS["mig"] = (MIG, [
    *[{"id": f"small-{i}", "submit_s": 5 * i, "queue": "serve", "tasks": 1, "mig_profile": "1g.10gb", "duration_s": 600} for i in range(3)],
    *[{"id": f"mid-{i}", "submit_s": 20 + i, "queue": "serve", "tasks": 1, "mig_profile": "3g.40gb", "duration_s": 400} for i in range(2)],
    {"id": "whole", "submit_s": 40, "queue": "serve", "tasks": 1, "gpus_per_task": 1, "duration_s": 300},
    {"id": "late", "submit_s": 900, "queue": "serve", "tasks": 1, "mig_profile": "3g.40gb", "duration_s": 200},
])
# Time-aware fair share: queue a used the whole cluster for ten minutes, so when it frees, b's
# job goes first above deserved, though a's waited longer.
SCENARIOS["fairshare"] = (BASE + """
queues:
  - {name: a, deserved: {gpu: 0}}
  - {name: b, deserved: {gpu: 0}}
policies:
  fair_share: {usage_half_life_s: 120}
""", [
    {"id": "a-1", "submit_s": 0, "queue": "a", "tasks": 4, "gpus_per_task": 8, "duration_s": 600},
    {"id": "a-2", "submit_s": 10, "queue": "a", "tasks": 4, "gpus_per_task": 8, "duration_s": 100},
    {"id": "b-1", "submit_s": 500, "queue": "b", "tasks": 4, "gpus_per_task": 8, "duration_s": 100},
])
# Spot nodes that live 400 s (a replay's known reclaims): job b starts on the node job a left
# idle, loses it to the interruption, is queued again whole and bursts anew.
SCENARIOS["spot"] = (idc("count: 1") + """  - name: cloud
    kind: simulated
    provider: {kind: simulated, group_lifetimes_s: {spot: 400}}
    node_groups:
      - {name: spot, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, min_nodes: 0, max_nodes: 2,
         spot: true, price_usd_per_hour: 10, boot_s: 30}
queues:
  - {name: train, deserved: {gpu: 8}, burst: true}
policies:
  burst: {enabled: true, pending_wait_s: 20, budget_usd_per_hour: 100, scale_in_idle_s: 300, provisioning_timeout_s: 600}
""", [
    {"id": "fill", "submit_s": 0, "queue": "train", "tasks": 1, "gpus_per_task": 8, "duration_s": 2000},
    {"id": "a", "submit_s": 10, "queue": "train", "tasks": 1, "gpus_per_task": 8, "duration_s": 200},
    {"id": "b", "submit_s": 300, "queue": "train", "tasks": 1, "gpus_per_task": 8, "duration_s": 200},
])
# Two IDCs; idc2 stops answering twice. A short outage (120 s) is waited out: what finished there
# meanwhile is learnt when it answers. A long one passes site_lost_timeout_s: its job is queued
# again (SiteLost), nothing new is sent there while it is silent, and work waits for it to answer.
SCENARIOS["outage"] = (idc("count: 2") + site("idc2", "count: 2") + """queues:
  - {name: research, deserved: {gpu: 32}}
policies:
  preemption: {site_lost_timeout_s: 300}
""", [
    {"id": "a1", "submit_s": 0, "queue": "research", "tasks": 2, "gpus_per_task": 8, "duration_s": 2000},
    {"id": "b1", "submit_s": 1, "queue": "research", "tasks": 1, "gpus_per_task": 8, "duration_s": 2000},
    {"id": "b2", "submit_s": 2, "queue": "research", "tasks": 1, "gpus_per_task": 4, "duration_s": 150},
    {"id": "c1", "submit_s": 1100, "queue": "research", "tasks": 1, "gpus_per_task": 4, "duration_s": 200},
], (("idc2", 100, 120), ("idc2", 1000, 600)))
# Runs capped by max_runtime_s: the long one is stopped at 300 s (it fails) and what waited for
# its GPUs starts then; a capped run that ends first is not stopped; a capped job started again
# after a preemption gets a new deadline from its new start.
SCENARIOS["runtime"] = (idc("count: 1") + """queues:
  - {name: research, deserved: {gpu: 8}}
policies:
  preemption: {grace_s: 20}
""", [
    {"id": "long", "submit_s": 0, "queue": "research", "tasks": 1, "gpus_per_task": 4, "duration_s": 5000, "max_runtime_s": 300},
    {"id": "short", "submit_s": 0, "queue": "research", "tasks": 1, "gpus_per_task": 4, "duration_s": 100, "max_runtime_s": 250},
    {"id": "next", "submit_s": 5, "queue": "research", "tasks": 1, "gpus_per_task": 4, "duration_s": 600, "max_runtime_s": 400},
    {"id": "urgent", "submit_s": 200, "queue": "research", "tasks": 1, "gpus_per_task": 8, "duration_s": 50, "priority": "online"},
    {"id": "after", "submit_s": 310, "queue": "research", "tasks": 1, "gpus_per_task": 4, "duration_s": 100},
])
FAIL_AFTER_S = 30  # the simulator's: a failed request reports back after this long

PRIORITIES = """
priority_classes:
  - {name: batch, value: 100, default: true}
  - {name: online, value: 1000, preemptible: false}
"""


class TimedSite(RaySite):
    """A site that runs each dispatched job for its trace duration (stretched, as the simulator
    does, when an elastic gang started with fewer tasks), on the test's clock."""

    def __init__(self, clock, jobs, name="idc", cloud=None, down=()):
        super().__init__(name, "http://127.0.0.1:9")
        self.clock, self.trace, self.cloud, self.down = clock, jobs, cloud, down  # down: (from, until) clock times it does not answer
        self.runs: dict[str, tuple[float, str]] = {}  # dispatch id -> (ends at, state)
        self.nodes_of: dict[str, set[str]] = {}  # dispatch id -> the nodes it runs on

    def has_package(self, name):
        return True

    def joined(self):  # a cloud node joins its site's cluster as soon as its machine is up
        return {n.name for n in self.cloud.list_nodes()} if self.cloud is not None else set()

    def answers(self):
        return not any(a <= self.clock[0] < b for a, b in self.down)

    def _answer(self):
        if not self.answers():
            raise SiteUnavailable(f"site {self.name}: connection refused")

    def submit(self, dispatch_id, entrypoint, runtime_env, allocation, metadata=None):
        self._answer()
        job = self.trace[allocation["job"]]
        stretch = job["tasks"] / len(allocation["placements"])
        self.runs.setdefault(dispatch_id, (self.clock[0] + job["duration_s"] * stretch, "RUNNING"))
        self.nodes_of[dispatch_id] = {p["node"] for p in allocation["placements"]}

    def status(self, dispatch_id):
        self._answer()
        if dispatch_id not in self.runs:
            return None
        ends, state = self.runs[dispatch_id]
        if self.cloud is not None and self.nodes_of[dispatch_id] & self.cloud.released:
            return state  # a node of it went away: its work cannot get done (the federation stops it)
        return "SUCCEEDED" if state == "RUNNING" and self.clock[0] >= ends else state

    def stop(self, dispatch_id):
        self._answer()
        if dispatch_id in self.runs:
            self.runs[dispatch_id] = (self.runs[dispatch_id][0], "STOPPED")


class TimedCloud(Provider):
    """A simulated site's cloud on the test's clock, as the simulator models it (without boot
    jitter): a request's nodes are listed `boot_s` after it, or, in a group whose failure rate
    is 1, it fails FAIL_AFTER_S after it. Nodes are named as the simulator names them (requests
    numbered 1, 2, ... in the order they are made)."""

    def __init__(self, fed, site, clock, numbers):
        self.fed, self.site, self.clock, self.numbers = fed, site, clock, numbers
        self.requests: dict[str, tuple] = {}  # id -> (group, count, asked at, number)
        self.released: set[str] = set()
        self.releases: list[tuple[float, str]] = []  # (when, node) of each node given back
        self.reported: set[str] = set()

    def request(self, request_id, group, count):
        self.requests.setdefault(request_id, (group, count, self.clock[0], next(self.numbers)))

    def _fails(self, group) -> bool:
        return self.fed.site(self.site).provider.rate_for(group.name) >= 1.0

    def list_nodes(self):
        lifetime = self.fed.site(self.site).provider.group_lifetimes_s
        out = []
        for rid, (g, count, at, n) in self.requests.items():
            up = at + g.boot_s
            if self._fails(g) or self.clock[0] < up:
                continue
            for name in (f"{self.site}/{g.name}-r{n}-{i}" for i in range(count)):
                if name in self.released:
                    continue
                if g.name in lifetime and self.clock[0] >= up + lifetime[g.name]:  # interrupted: gone for good
                    self.released.add(name)
                    self.releases.append((up + lifetime[g.name], name))
                    continue
                out.append(ProvidedNode(name, self.site, g.name, rid))
        return out

    def errors(self):
        out = []
        for rid, (g, _, at, _) in self.requests.items():
            if self._fails(g) and self.clock[0] >= at + FAIL_AFTER_S and rid not in self.reported:
                self.reported.add(rid)
                out.append(ProviderError(rid, CAPACITY, "InsufficientCapacity"))
        return out

    def release(self, names):
        listed = {n.name for n in self.list_nodes()}
        self.releases += [(self.clock[0], n) for n in sorted(names) if n in listed]
        self.released.update(names)


class TimedSlicer:
    """A MIG backend on the test's clock: a node's new layout is applied `reconfigure_s` after it
    is asked for, as the simulator models it."""

    def __init__(self, clock, reconfigure_s):
        self.clock, self.delay, self.asked = clock, reconfigure_s, {}

    def apply(self, node, layouts):
        self.asked[node] = self.clock[0]

    def state(self, node, layouts):
        return ApplyState("success" if self.clock[0] >= self.asked[node] + self.delay else "pending")


def placements(ps) -> tuple:
    return tuple(sorted(json.dumps(p, sort_keys=True) for p in ps))


def simulated(config: str, jobs: list[dict], tmp_path, outages=()) -> list[tuple]:
    fed = parse(config, "parity.yaml")
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    result = Simulator(fed, read_jsonl(path, fed), SimOptions(seed=1, start=START, boot_jitter=(1.0, 1.0),
                                                              outages=tuple(Outage(*o) for o in outages))).run()
    out = []
    for e in result.events:
        if e["type"] == "admit":
            out.append((e["t"], "admit", e["job"], e["site"], placements(e["placements"])))
        elif e["type"] in ("preempt", "requeue"):
            out.append((e["t"], e["type"], e["job"], e["reason"] if e["type"] == "preempt" else None))
        elif e["type"] == "finish":
            out.append((e["t"], "finish", e["job"], e.get("failed")))
        elif e["type"] == "scale_up":
            out.append((e["t"], "scale_up", e["site"], e["node_group"], e["count"], tuple(e["jobs"])))
        elif e["type"] == "node_down":
            out.append((e["t"], "node_down", e["node"]))
    return sorted(out, key=lambda e: (e[0], e[1], e[2])) + [showback(result.ledger.per_queue(result.end_s, [q.name for q in fed.queues]))]


def showback(books: dict) -> tuple:
    """GPU-hours per queue, on any node and on cloud nodes. (Cloud cost is not compared: the
    simulator pays a node from its request, the live controller from when it is listed.)"""
    return (float("inf"), "showback", tuple(sorted((q, b["gpu_hours"], b["cloud_gpu_hours"]) for q, b in books.items())))


def live(config: str, jobs: list[dict], tmp_path, controller=Controller, horizon_s: float | None = None, outages=()) -> list[tuple]:
    fed = parse(config, "parity.yaml")
    t0 = START.replace(tzinfo=ZoneInfo(fed.timezone)).timestamp()
    clock = [t0]
    trace = {j["id"]: j for j in jobs}
    numbers = itertools.count(1)
    clouds = {s.name: TimedCloud(fed, s.name, clock, numbers) for s in fed.sites if s.is_cloud}
    sites = {s.name: TimedSite(clock, trace, s.name, clouds.get(s.name), [(t0 + at, t0 + at + n) for site, at, n in outages if site == s.name])
             for s in fed.sites}
    store = Store(tmp_path / "live.db")
    slicers = {s.name: LiveMig(fed, s.name, store, TimedSlicer(clock, fed.policies.mig.reconfigure_s)) for s in fed.sites
               if any(g.mig_enabled for g in s.node_groups)}
    ctl = controller(fed, store, sites, clock=lambda: clock[0], providers=clouds, mig=slicers)
    seen: dict[str, tuple] = {}
    asked: set[str] = set()
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
                out.append((float(t), "finish", row.id, None))
            elif row.status == "FAILED":
                out.append((float(t), "finish", row.id, row.message.split(":")[0]))
        for r in ctl.ledger.requests():
            if r.id not in asked:
                asked.add(r.id)
                out.append((float(t), "scale_up", r.site, r.group, r.count, tuple(r.jobs or ())))
        if all(r.status in ("SUCCEEDED", "FAILED") for r in ctl.store.jobs()) and len(seen) == len(jobs) and not ctl.cloud_nodes:
            break
    out += [(when - t0, "node_down", name) for c in clouds.values() for when, name in c.releases]
    return sorted(out, key=lambda e: (e[0], e[1], e[2])) + [showback(ctl.status()["showback"]["queues"])]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_simulator_and_the_live_controller_make_the_same_decisions(name, tmp_path):
    config, jobs, *outages = SCENARIOS[name]
    config += PRIORITIES
    sim = simulated(config, jobs, tmp_path, *outages)
    assert sum(1 for e in sim if e[1] == "finish") == len(jobs)  # the scenario ran to its end
    got = live(config, jobs, tmp_path, outages=outages[0] if outages else ())
    assert got == sim


def test_the_scenarios_exercise_what_they_are_named_for(tmp_path):
    """Guards the parity test against scenarios that decide nothing interesting."""
    kinds = {name: {e[1] for e in simulated(cfg + PRIORITIES, jobs, tmp_path, *rest)} for name, (cfg, jobs, *rest) in SCENARIOS.items()}
    assert {"preempt", "requeue"} <= kinds["reclaim"] and {"preempt", "requeue"} <= kinds["gangs"]
    sim = simulated(SCENARIOS["tidal"][0] + PRIORITIES, SCENARIOS["tidal"][1], tmp_path)
    opened = (datetime(2026, 1, 5, 0, 10) - START) / timedelta(seconds=1)
    assert any(e[1] == "admit" and e[2] == "t-2" and e[0] == opened for e in sim)  # waited for the window
    fair = simulated(SCENARIOS["fairshare"][0] + PRIORITIES, SCENARIOS["fairshare"][1], tmp_path)
    assert [e[2] for e in fair if e[1] == "admit"] == ["a-1", "b-1", "a-2"]
    burst = simulated(SCENARIOS["burst"][0] + PRIORITIES, SCENARIOS["burst"][1], tmp_path)
    asked = [e[3] for e in burst if e[1] == "scale_up"]
    assert asked[:2] == ["spot", "ondemand"]  # the spot request failed; the next cycle asked its fallback
    assert any(e[1] == "admit" and e[2] == "gang" and e[3] == "cloud" for e in burst) and any(e[1] == "node_down" for e in burst)
    spot = simulated(SCENARIOS["spot"][0] + PRIORITIES, SCENARIOS["spot"][1], tmp_path)
    assert [e[2] for e in spot if e[1] == "requeue"] == ["b"] and sum(1 for e in spot if e[1] == "scale_up") == 2
    cfg, jobs, outages = SCENARIOS["outage"]
    out = simulated(cfg + PRIORITIES, jobs, tmp_path, outages)
    assert (220, "finish", "b2", None) in out  # ended at 152 while idc2 was silent: learnt when it answered
    assert [e[:3] for e in out if e[1] == "requeue"] == [(1300.0, "requeue", "b1")]  # 300 s into the second outage
    assert {e[2]: e[0] for e in out if e[1] == "admit" and e[0] > 2} == {"b1": 1600, "c1": 1600}  # nothing went to idc2 while it was silent
    runs = simulated(SCENARIOS["runtime"][0] + PRIORITIES, SCENARIOS["runtime"][1], tmp_path)
    assert {e[2]: (e[0], e[3]) for e in runs if e[1] == "finish"} == {  # deadlines from each run's own start
        "short": (100, None), "urgent": (270, None), "long": (570, "MaxRuntimeExceeded"), "next": (670, "MaxRuntimeExceeded"), "after": (670, None)}
    mig = simulated(SCENARIOS["mig"][0] + PRIORITIES, SCENARIOS["mig"][1], tmp_path)
    assert {json.loads(p)["mig"]["profile"] for e in mig if e[1] == "admit" for p in e[4] if "mig" in json.loads(p)} == {"1g.10gb", "3g.40gb"}


def test_a_shell_that_decides_on_its_own_is_caught(tmp_path):
    """A controller that keeps a rule of its own (here: it never looks at waiting jobs again
    after their first cycle, as a broken incremental rule would) differs, and the test sees it."""
    import federation.cycle as cycle

    class Broken(Controller):
        def tick(self):
            self.cycle.full_every_s = None
            self.cycle.fingerprint = None if self.cycle.last is None else self.cycle.fingerprint
            real = cycle.incremental_pending
            cycle.incremental_pending = lambda pending, new, reservations, full, stopping: real(pending, new, reservations, False, stopping)
            try:
                super().tick()
            finally:
                cycle.incremental_pending = real

    config, jobs = SCENARIOS["reclaim"]
    config += PRIORITIES
    sim = simulated(config, jobs, tmp_path)
    (tmp_path / "broken").mkdir()
    broken = live(config, jobs, tmp_path / "broken", Broken, horizon_s=sim[-2][0] + 1)  # the last decision (the showback comes after)
    assert broken != sim and [e for e in sim if e not in broken]  # decisions it missed, not only extra ones
