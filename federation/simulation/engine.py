"""The discrete-event simulator: the real scheduling core and policies on a virtual clock.

Events (arrivals, finishes, grace-period stops, cloud nodes ready, spot interruptions,
provisioning failures and timeouts, timers) are processed in time order; after the events of
each instant, one scheduling cycle runs, exactly as the live controller would run it. All
randomness (boot jitter, failures, interruptions) comes from one seeded generator, so the same
inputs and seed give the same event stream, byte for byte.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from federation import garbage
from federation.cluster import ClusterState
from federation.cycle import DecisionCycle, Observation, ProvisionFailure
from federation.errors import FederationError
from federation.holds import free_gpu_milli
from federation.inventory import config_nodes
from federation.mig.manager import MigManager, with_layout
from federation.model import UNLIMITED, Federation, JobSpec, Node, RunningJob
from federation.quota import QuotaTree, reserve_of
from federation.retries import retry_after
from federation.scheduler import CycleState, node_capacity
from federation.showback import Ledger, held_milli
from federation.simulation.cloud import SimCloud
from federation.simulation.kept import Kept
from federation.simulation.traces import Trace
from policies import burst as burst_policy
from policies.placement import make_strategy
from policies.tidal import (
    active_policies,
    effective_queues,
    next_transition,
)

# what a site reports of a run: while the site does not answer, the federation learns none of it
SITE_REPORTS = frozenset({"finish", "run_failed", "stop"})
# forecast wake-ups closer than this to the one already set are the same instant (see _cycle)
WAKE_SLACK_S = 1e-3


@dataclass(frozen=True)
class Outage:
    """A site that does not answer the federation from `at_s` for `for_s` (its runs go on)."""

    site: str
    at_s: float
    for_s: float


def parse_outage(text: str, fed: Federation) -> Outage:
    """`SITE@AT_S+FOR_S`, as `fedctl simulate --outage` takes it."""
    m = re.fullmatch(r"([^@]+)@([^+]+)\+(.+)", text.strip())
    if m is None:
        raise FederationError(f"--outage {text!r}: expected SITE@AT_S+FOR_S, e.g. idc@3600+1800")
    site, at, length = m.groups()
    if site not in {s.name for s in fed.sites}:
        raise FederationError(f"--outage {text!r}: no site {site!r} in this federation")
    try:
        at_s, for_s = float(at), float(length)
    except ValueError:
        raise FederationError(f"--outage {text!r}: AT_S and FOR_S are seconds") from None
    if not (math.isfinite(at_s) and at_s >= 0 and math.isfinite(for_s) and for_s > 0):
        raise FederationError(f"--outage {text!r}: AT_S must be a finite number >= 0 and FOR_S a finite number > 0")
    return Outage(site, at_s, for_s)


@dataclass
class SimOptions:
    seed: int = 0
    start: datetime | None = None  # wall-clock time of t = 0 (default 2026-01-05T00:00, a Monday)
    samples: int = 240  # points of the time series in the report
    progress: Callable[[float, int, int], None] | None = None  # (t, done, total)
    boot_jitter: tuple[float, float] = (0.9, 1.25)  # a cloud node boots in boot_s x uniform(these)
    outages: tuple[Outage, ...] = ()  # sites that stop answering for a while
    # each event as it happens; set, events are not kept (a million-job replay's would not fit in memory)
    on_event: Callable[[dict], None] | None = None


@dataclass(slots=True)  # one per job of the trace: a million of them in a long replay
class JobRecord:
    spec: JobSpec
    duration_s: float
    checkpoint_s: float | None
    remaining_s: float
    first_start_s: float | None = None
    finish_s: float | None = None
    preemptions: int = 0
    attempt: int = 0
    fails_left: int = 0  # runs still to fail (the trace's failed_runs)
    fail_after_s: float = 60.0
    failures: int = 0  # failed runs so far
    last_reason: str | None = None
    reason_since: float | None = None  # while pending: since when it has waited for `last_reason`


@dataclass
class SimResult:
    events: list[dict]  # empty when SimOptions.on_event took them
    jobs: dict[str, JobRecord]
    ledger: Ledger
    samples: list[dict]
    cloud: dict
    skipped: int
    end_s: float
    queues: tuple[str, ...]
    sites: dict[str, bool]  # site -> is cloud
    mig: dict = field(default_factory=dict)
    openings: list[dict] = field(default_factory=list)  # per window opening that raised a reserve: how much was ready
    forecast: dict = field(default_factory=dict)  # per kind of demand, the profile's hourly error beside the last hour's
    wait_gpu_s: dict[str, float] = field(default_factory=dict)  # pending reason -> GPU-seconds of work that waited for it
    start: datetime | None = None  # the wall-clock time of t = 0, in the federation's time zone
    deserved_gpus: dict[str, float] = field(default_factory=dict)  # queue -> deserved GPUs (the config's; None: unlimited)
    budgets_usd_per_month: dict[str, float] = field(default_factory=dict)  # queue (or "" for the federation) -> its monthly cloud budget
    preemptions: list[tuple[float, str]] = field(default_factory=list)  # (when, reason) of each
    reslices: list[float] = field(default_factory=list)  # when each MIG GPU was re-sliced


class Simulator(SimCloud):
    def __init__(self, fed: Federation, trace: Trace, options: SimOptions | None = None):
        self.fed, self.trace = fed, trace
        self.opt = options or SimOptions()
        self.rng = random.Random(self.opt.seed)
        tz = ZoneInfo(fed.timezone)
        start = self.opt.start or datetime(2026, 1, 5, 0, 0)
        self.start = start.replace(tzinfo=tz) if start.tzinfo is None else start.astimezone(tz)
        self.heap: list = []
        self.seq = itertools.count()
        self.events: list[dict] = []
        self.sink = self.opt.on_event or self.events.append
        self.preemptions: list[tuple[float, str]] = []
        self.reslices: list[float] = []
        self.jobs = {j.spec.id: JobRecord(j.spec, j.duration_s, j.checkpoint_interval_s, j.duration_s, fails_left=j.failed_runs, fail_after_s=j.fail_after_s)
                     for j in trace.jobs}
        self.pending: dict[str, JobSpec] = {}
        self.pending_since: dict[str, float] = {}
        self.running: Kept[str, RunningJob] = Kept()
        self.flagged: dict[str, set[str]] = {"lost": set(), "stopping": set()}  # running jobs that lost tasks, or stop within their grace
        self.nodes: Kept[str, Node] = Kept()
        self.node_jobs: dict[str, set[str]] = {}
        self.cloud: dict[str, str] = {}  # cloud node -> the request that made it
        self.bought_for: dict[str, tuple[str, ...]] = {}  # cloud node -> the jobs its request was made for
        self.in_flight: dict[str, burst_policy.InFlight] = {}
        self.heads: dict[str, float] = {}  # cluster site (provider.cluster) -> when its head is (or will be) up
        self.failed: list[ProvisionFailure] = []  # since the last cycle
        self.ledger = Ledger()
        self.samples: list[dict] = []
        self.cloud_stats = {"peak_nodes": 0, "scale_ups": 0, "scale_downs": 0}
        self.req_ids = itertools.count(1)
        self.openings: list[dict] = []
        span = max((j.spec.submit_s + j.duration_s for j in trace.jobs), default=3600.0)
        self.sample_every = max(60.0, span / max(1, self.opt.samples))
        self.next_sample = 0.0
        self.queues = fed.queues
        self.state: CycleState | None = None
        self.month, self.month_base_usd, self.month_base_queue = (self.start.year, self.start.month), 0.0, {}
        self.arrived: set[str] = set()  # waiting now, not at the last cycle
        self.submitted: list[JobSpec] = []  # first arrivals since the last cycle
        self.capacity_waiting: list[JobSpec] = []  # what the MIG managers may slice for (the cycle says)
        self.finished = 0
        self.decide_at: float | None = None  # the wake-up the cycle last asked for
        self.wait_gpu_s: dict[str, float] = {}  # pending reason -> GPU-seconds of work that waited for it
        self.last_progress_s = 0.0  # the last start or finish
        self.mig = {s.name: m for s in fed.sites if (m := MigManager(fed, s.name)).active}
        self.mig_stats = {"reconfigurations": 0, "drains": 0, "drain_gpu_s": 0.0, "warm_starts": 0, "cold_starts": 0}
        self.instance_ready: dict[tuple[str, int, str, int], float] = {}  # (node, gpu, profile, start) -> since
        self.drain_since: dict[str, float] = {}
        self.mig_forecast: dict[str, dict[str, int]] | None = None  # the cycle says
        self.learn_at: float | None = None  # the forecast's wake-up the cycle last asked for
        self.unreachable: dict[str, float] = {}  # site -> since when it has not answered
        self.unheard: dict[str, list[tuple[str, tuple]]] = {}  # site -> what it reported while it did not answer
        self.down_count: dict[str, int] = {}  # site -> outages under way

    # ---- plumbing ----

    def push(self, t: float, kind: str, *payload) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), kind, payload))

    def emit(self, t: float, type_: str, **fields) -> None:
        self.sink({"t": round(t, 3), "type": type_, **fields})

    def local(self, t: float) -> datetime:
        return self.start + timedelta(seconds=t)

    # ---- the run ----

    def run(self) -> SimResult:
        for node in config_nodes(self.fed):
            self._node_up(0.0, node)
        self.queues = effective_queues(self.fed, self.local(0.0))
        self.state = CycleState(ClusterState(self.nodes.values()), QuotaTree(self.queues, node_capacity(self.nodes.values())),
                                make_strategy(self.fed.policies.placement.strategy))  # the cycle sets the one it weighs by
        self.cycle = DecisionCycle(self.fed, self.state, full_every_s=None)  # every change here is an event: no safety net
        for j in self.trace.jobs:
            self.push(j.spec.submit_s, "arrive", j.spec.id)
        for o in sorted(self.opt.outages, key=lambda o: (o.site, o.at_s)):
            self.push(o.at_s, "site_down", o.site)
            self.push(o.at_s + o.for_s, "site_up", o.site)
        self._push_window_timer(0.0)
        total, done, t = len(self.jobs), 0, 0.0
        while self.heap:
            t = self.heap[0][0]
            self._sample_until(t)
            while self.heap and self.heap[0][0] == t:
                _, _, kind, payload = heapq.heappop(self.heap)
                if self.unreachable and kind in SITE_REPORTS and (run := self.running.get(payload[0])) and run.site in self.unreachable:
                    self.unheard[run.site].append((kind, payload))  # learnt when the site answers again
                    continue
                getattr(self, f"_on_{kind}")(t, *payload)
            self._cycle(t)
            self._mig_step(t)
            if self.opt.progress and self.finished != done:  # counted as jobs finish: a scan here was 2x the run
                done = self.finished
                self.opt.progress(t, done, total)
        for job_id in self.pending:
            self._reason(t, job_id, None)  # what never started waited until the end
        self.ledger.close(t)
        self._sample_until(t + self.sample_every)
        scored = self.cycle.forecast.scores() if self.cycle.forecast is not None else {}
        mig = {**self.mig_stats, "drain_gpu_s": round(self.mig_stats["drain_gpu_s"], 3),
               **({"forecast": scored["mig_instances"]} if "mig_instances" in scored else {})}
        return SimResult(self.events, self.jobs, self.ledger, self.samples,
                         {**self.cloud_stats, "nodes_at_end": len(self.cloud)}, len(self.trace.skipped), t,
                         tuple(q.name for q in self.fed.queues), {s.name: s.is_cloud for s in self.fed.sites},
                         mig if self.mig else {}, self.openings, scored, self.wait_gpu_s, self.start,
                         {q.name: q.deserved.gpu for q in self.fed.queues if q.deserved.gpu_milli < UNLIMITED},
                         {**{q.name: q.burst_budget_usd_per_month for q in self.fed.queues if q.burst_budget_usd_per_month is not None},
                          **({"": self.fed.policies.burst.budget_usd_per_month} if self.fed.policies.burst.budget_usd_per_month is not None else {})},
                         self.preemptions, self.reslices)

    # ---- event handlers ----

    def _on_arrive(self, t: float, job_id: str) -> None:
        spec = self.jobs[job_id].spec
        r = spec.per_task
        self.emit(t, "submit", job=job_id, queue=spec.queue, tasks=spec.tasks, min_tasks=spec.min_tasks,
                  gpu_milli_per_task=r.gpu_milli, cpu_milli_per_task=r.cpu_milli, memory_mib_per_task=r.memory_mib,
                  mig_profile=spec.mig_profile, priority=spec.priority_class)
        self.pending[job_id] = spec
        self.pending_since[job_id] = t
        self.arrived.add(job_id)
        self.submitted.append(spec)

    def _on_finish(self, t: float, job_id: str, attempt: int, failed: str | None = None) -> None:
        rec = self.jobs[job_id]
        if rec.attempt != attempt or job_id not in self.running:
            return  # a stale finish of a run that was preempted
        run = self.running[job_id]
        if run.lost and run.tasks < (run.spec.min_tasks or run.spec.tasks) and not failed:
            return  # a gang below its minimum cannot get its work done: the cycle queues it again
        self._release(t, job_id)
        rec.finish_s = t
        rec.remaining_s = 0.0
        self.finished += 1
        self.last_progress_s = t
        self.emit(t, "finish", job=job_id, **({"failed": failed} if failed else {}))

    def _on_run_failed(self, t: float, job_id: str, attempt: int) -> None:
        """The run failed (as a site reports FAILED live): queued again after the back-off of
        federation.retries while the job has retries left, else it ends failed."""
        rec = self.jobs[job_id]
        if rec.attempt != attempt or job_id not in self.running:
            return
        rec.fails_left -= 1
        rec.failures += 1
        wait = retry_after(rec.failures, rec.spec.max_retries)
        if wait is None:
            self._on_finish(t, job_id, attempt, failed="Failed")
            return
        self._requeue(t, job_id, "Failed")
        self.pending[job_id] = replace(rec.spec, not_before_s=t + wait)

    def _on_stop(self, t: float, job_id: str, attempt: int, reason: str) -> None:
        rec = self.jobs[job_id]
        if rec.attempt != attempt or job_id not in self.running:
            return
        self._requeue(t, job_id, reason)

    def _requeue(self, t: float, job_id: str, reason: str) -> None:
        rec = self.jobs[job_id]
        run = self.running[job_id]
        ran = t - run.started_s
        saved = (ran // rec.checkpoint_s) * rec.checkpoint_s if rec.checkpoint_s else 0.0
        rec.remaining_s = max(0.0, rec.remaining_s - saved)
        rec.attempt += 1
        self._release(t, job_id)
        self.emit(t, "requeue", job=job_id, reason=reason, lost_s=round(ran - saved, 3))
        self.pending[job_id] = rec.spec
        self.pending_since[job_id] = t
        self.arrived.add(job_id)

    def _on_site_down(self, t: float, site: str) -> None:
        if site not in self.unreachable:  # outages of one site that overlap are one
            self.unreachable[site] = t
            self.unheard[site] = []
            self.emit(t, "site_unreachable", site=site)
        self.down_count[site] = self.down_count.get(site, 0) + 1

    def _on_site_up(self, t: float, site: str) -> None:
        self.down_count[site] -= 1
        if self.down_count[site]:
            return
        self.emit(t, "site_answers", site=site, after_s=round(t - self.unreachable.pop(site), 3))
        for kind, payload in self.unheard.pop(site):  # a run lost meanwhile (SiteLost) was stopped: its reports are stale
            self.push(t, kind, *payload)

    def _lose(self, t: float, node: str) -> None:
        """The tasks on a node that goes away are gone: each job keeps its other tasks, counted
        as having lost these (the cycle decides whether it goes on, or is queued again)."""
        for job_id in sorted(self.node_jobs.get(node, ())):
            run = self.running[job_id]
            gone = [p for p in run.placements if p.node == node]
            self.state.cluster.apply(run.spec, gone, -1)
            self.state.quota.add(run.spec.queue, run.spec.per_task.times(len(gone)), -1, run.spec.preemptible)
            for p in gone:
                self.ledger.change(t, p.node, run.spec.queue, held_milli(run.spec, p), run.spec.per_task.cpu_milli, -1)
            self.running[job_id] = replace(run, placements=tuple(p for p in run.placements if p.node != node), lost=run.lost + len(gone))
            self.flagged["lost"].add(job_id)
            self.emit(t, "tasks_lost", job=job_id, node=node, tasks=len(gone))

    def _moving(self, t: float) -> bool:
        """Whether work can still move: windows and the forecast recur forever, so they are
        followed only while it can, which a window's quota may allow for a week after the last
        other event (then what is left waits for good)."""
        return self.finished < len(self.jobs) and bool(
            self.running or self.in_flight or any(k != "timer" for _, _, k, _ in self.heap) or t - self.last_progress_s < 8 * 86400)

    def _on_timer(self, t: float, what: str) -> None:
        if what == "window":
            self._record_opening(t)
            if self._moving(t):
                self._push_window_timer(t)

    def _record_opening(self, t: float) -> None:
        """At a window's opening, how much of each reserve it raised is ready: used by its queue or idle on its sites."""
        was = {p.name for p in active_policies(self.fed, self.local(t - 1))}
        opened = [p.name for p in active_policies(self.fed, self.local(t)) if p.name not in was]
        if not opened:
            return
        before = {q.name: reserve_of(q).gpu_milli for q in effective_queues(self.fed, self.local(t - 1))}
        for q in effective_queues(self.fed, self.local(t)):
            want = reserve_of(q).gpu_milli
            if want <= before[q.name]:
                continue
            sites = frozenset(q.sites) if q.sites is not None else frozenset(s.name for s in self.fed.sites)
            ready = min(want, self.state.quota.usage[q.name].gpu_milli + free_gpu_milli(self.state.cluster, sites))
            self.openings.append({"t": t, "windows": opened, "queue": q.name, "reserve_gpus": want / 1000, "ready_gpus": ready / 1000})

    def _push_window_timer(self, t: float) -> None:
        if not any(p.window for p in self.fed.policies.tidal):
            return
        nxt = next_transition(self.fed, self.local(t), prepare=True)
        if nxt is not None:
            self.push(max(t + 1, (nxt - self.start).total_seconds()), "timer", "window")

    # ---- nodes and jobs ----

    def _node_up(self, t: float, node: Node, request: burst_policy.InFlight | None = None) -> None:
        self.nodes[node.name] = node
        self.node_jobs[node.name] = set()
        g = self.fed.site(node.site).node_group(node.node_group)
        trigger = None
        if request is not None:
            trigger = self.jobs[request.jobs[0]].spec.queue if request.jobs else None
            self.cloud[node.name] = request.request_id
            if request.jobs:
                self.bought_for[node.name] = request.jobs
            self.cloud_stats["peak_nodes"] = max(self.cloud_stats["peak_nodes"], len(self.cloud))
        self.ledger.node_up(t, node.name, node.site, node.gpus, request is not None, g.price_usd_per_hour, trigger,
                            paid_since=request.requested_s if request else None)
        self.emit(t, "node_up", site=node.site, node=node.name, gpus=node.gpus, gpu_model=node.gpu_model,
                  cpu_milli=node.cpu_milli, memory_mib=node.memory_mib)

    def _node_down(self, t: float, name: str) -> None:
        node = self.nodes.pop(name)
        self.node_jobs.pop(name, None)
        self.cloud.pop(name, None)
        self.bought_for.pop(name, None)
        self.state.cluster.remove_node(name)
        self.state.quota.capacity = node_capacity(self.nodes.values())
        self.ledger.node_down(t, name)
        self.emit(t, "node_down", site=node.site, node=name)

    def _release(self, t: float, job_id: str) -> None:
        run = self.running.pop(job_id)
        for ids in self.flagged.values():
            ids.discard(job_id)
        self.state.cluster.apply(run.spec, run.placements, -1)
        self.state.quota.add(run.spec.queue, run.usage, -1, run.spec.preemptible)
        for p in run.placements:
            self.ledger.change(t, p.node, run.spec.queue, held_milli(run.spec, p), run.spec.per_task.cpu_milli, -1)
            jobs = self.node_jobs.get(p.node)
            if jobs is not None:
                jobs.discard(job_id)

    def _reason(self, t: float, job_id: str, code: str | None) -> None:
        """A pending job's reason now (None: it started). A change is an event, and the GPUs it
        asks for are counted as waiting for the reason it had until now, so a report can say why
        work waited (while GPUs stood idle, say)."""
        rec = self.jobs[job_id]
        if code == rec.last_reason and code is not None:
            return
        if rec.last_reason is not None and rec.reason_since is not None:
            gpus = rec.spec.request(rec.spec.min_tasks or rec.spec.tasks).gpu
            self.wait_gpu_s[rec.last_reason] = self.wait_gpu_s.get(rec.last_reason, 0.0) + gpus * (t - rec.reason_since)
        rec.reason_since = t if code is not None else None
        if code is not None:
            rec.last_reason = code
            self.emit(t, "pending", job=job_id, reason=code)

    def _start(self, t: float, a) -> None:
        self._reason(t, a.job_id, None)
        spec = self.pending.pop(a.job_id)
        waited_from = self.pending_since.pop(a.job_id, t)
        if spec.mig_profile is not None and self.mig:
            # warm: every instance it got was ready before it began to wait
            warm = all(self.instance_ready.get((p.node, *p.mig), 0.0) <= waited_from for p in a.placements if p.mig)
            self.mig_stats["warm_starts" if warm else "cold_starts"] += 1
        rec = self.jobs[a.job_id]
        self.last_progress_s = t
        run = RunningJob(spec, a.site, a.placements, t)
        self.running[a.job_id] = run
        rec.first_start_s = t if rec.first_start_s is None else rec.first_start_s
        for p in a.placements:
            self.ledger.change(t, p.node, spec.queue, held_milli(spec, p), spec.per_task.cpu_milli, 1)
            self.node_jobs[p.node].add(a.job_id)
        self.emit(t, "admit", job=a.job_id, site=a.site, placements=[p.to_dict() for p in a.placements])
        self.emit(t, "start", job=a.job_id)
        # an elastic gang that started smaller runs proportionally longer
        scale = spec.tasks / len(a.placements)
        self.push(t + rec.remaining_s * scale, "finish", a.job_id, rec.attempt)
        if rec.fails_left:
            self.push(t + rec.fail_after_s, "run_failed", a.job_id, rec.attempt)

    # ---- MIG ----

    def _mig_step(self, t: float) -> None:
        if not self.mig:
            return
        local = self.local(t)
        waiting = self.capacity_waiting
        for site, manager in self.mig.items():
            nodes = [n for n in self.nodes.values() if n.site == site]
            running = [r for r in self.running.values() if r.site == site]
            d = manager.decide(t, local, nodes, running, waiting, self.mig_forecast.get(site) if self.mig_forecast is not None else None)
            for r in d.reconfigure:
                self._replace_node(with_layout(self.nodes[r.node], r.gpu, r.kept, reconfiguring=True))
                self.mig_stats["reconfigurations"] += 1
                self.reslices.append(t)
                self.emit(t, "mig_reconfigure", site=site, node=r.node, gpu=r.gpu, layout=[{"profile": p, "start": s} for p, s in r.layout])
                self.push(t + self.fed.policies.mig.reconfigure_s, "mig_ready", r.node, r.gpu, r.layout)
            for name in d.cordon:
                self._replace_node(replace(self.nodes[name], schedulable=False))
                self.drain_since[name] = t
                self.mig_stats["drains"] += 1
                self.emit(t, "mig_drain", site=site, node=name)
                self.push(t + self.fed.policies.mig.reconfigure_drain_s, "timer", "mig")
            for name in d.uncordon:
                node = self.nodes[name]
                self._replace_node(replace(node, schedulable=True))
                self.mig_stats["drain_gpu_s"] += (t - self.drain_since.pop(name)) * node.gpus
                self.emit(t, "mig_drain_end", site=site, node=name)

    def _on_mig_ready(self, t: float, name: str, gpu: int, layout) -> None:
        node = self.nodes.get(name)
        if node is None:
            return
        before = {(g, p, s) for g, p, s in node.mig_layout if g == gpu}
        self._replace_node(with_layout(node, gpu, layout, reconfiguring=False))
        for p, s in layout:
            if (gpu, p, s) not in before:
                self.instance_ready[(name, gpu, p, s)] = t
        self.emit(t, "mig_ready", site=node.site, node=name, gpu=gpu)

    def _replace_node(self, node: Node) -> None:
        self.nodes[node.name] = node
        self.state.cluster.replace_node(node, [self.running[j] for j in self.node_jobs.get(node.name, ())])

    # ---- the cycle ----

    def _cycle(self, t: float) -> None:
        """Observe, let the one decision cycle decide, and carry its decisions out on the virtual clock."""
        local = self.local(t)
        costs, _ = self.ledger.cloud_costs(t)  # spend up to now, as the live meter has it
        if (local.year, local.month) != self.month:
            self.month, self.month_base_usd, self.month_base_queue = (local.year, local.month), self.ledger.total_cost, costs
        obs = Observation(t, local, self.nodes.view(), tuple(self.nodes[n] for n in self.cloud), self.running.view(), self.pending, self.arrived,
                          tuple(self.submitted), tuple(self.in_flight.values()), tuple(self.failed),
                          self.ledger.total_cost - self.month_base_usd, self.bought_for,
                          queue_month_spend_usd={q: usd - self.month_base_queue.get(q, 0.0) for q, usd in costs.items()},
                          heads=frozenset(self.heads), lost=tuple(self.running[j] for j in sorted(self.flagged["lost"])),
                          stopping=tuple(self.running[j] for j in sorted(self.flagged["stopping"])), unreachable=dict(self.unreachable))
        self.arrived, self.submitted, self.failed = set(), [], []
        garbage.settle()  # the world out of the collector's walks while the cycle runs (federation.garbage)
        d = self.cycle.step(obs)
        for rid, why in d.cancel:
            f = self.in_flight[rid]
            self.emit(t, "provision_timeout", site=f.site, node_group=f.group, count=f.count, reason=why)
            self._give_up(t, rid)
        for a in d.plan.admissions:
            self._start(t, a)
        grace = self.fed.policies.preemption.grace_s
        for p in d.plan.preemptions:
            run = self.running[p.job_id]
            self.running[p.job_id] = replace(run, preempting=True, preempted_for=p.for_job)
            self.flagged["stopping"].add(p.job_id)
            self.jobs[p.job_id].preemptions += 1
            self.preemptions.append((t, p.reason))
            self.emit(t, "preempt", job=p.job_id, reason=p.reason, for_job=p.for_job)
            self.push(t + grace, "stop", p.job_id, self.jobs[p.job_id].attempt, p.reason)
        for job_id, reason in d.reasons.items():
            self._reason(t, job_id, reason.code)
        for up in d.scale_up:
            self._scale_up(t, up)
        for name in d.release:
            self.cloud_stats["scale_downs"] += 1
            self._node_down(t, name)
        for site in d.teardown:
            del self.heads[site]
            self.ledger.set_heads(t, {s: self.fed.site(s).head_price_usd_per_hour for s in self.heads})
            self.emit(t, "cluster_down", site=site)
        for job_id, reason, _why in d.evict:  # the live controller says why in the job's message; here the events say what went
            self._requeue(t, job_id, reason)
        overran = [job for job, started, _ in d.overrun if job in self.running and self.running[job].started_s == started]
        for job_id in overran:  # stopped at its max_runtime_s: it fails
            self._on_finish(t, job_id, self.jobs[job_id].attempt, failed="MaxRuntimeExceeded")
        for job_id in d.shrink:  # an elastic gang goes on with the tasks it has
            self.running[job_id] = replace(self.running[job_id], lost=0)
            self.flagged["lost"].discard(job_id)
        if d.release or d.cancel or d.evict or overran:
            self.push(t, "timer", "decide")  # capacity (or what waits) changed: decide again at once, as the next live tick would
        if d.wake_at is not None and d.wake_at != self.decide_at:
            self.decide_at = d.wake_at
            self.push(d.wake_at, "timer", "decide")  # e.g. a borrower old enough to reclaim, an idle node to give back
        # One forecast timer at a time. Its instants come from the local clock, which datetime keeps
        # to the microsecond, so cycles between two instants ask for the next one a few tenths of a
        # microsecond apart: compared exactly, each cycle started a timer chain of its own that
        # recurred every instant (25,000 cycles for a 1,000-job, 10-day replay instead of ~3,000).
        if d.learn_at is not None and (self.learn_at is None or self.learn_at <= t or d.learn_at < self.learn_at - WAKE_SLACK_S) and self._moving(t):
            self.learn_at = d.learn_at
            self.push(d.learn_at, "timer", "decide")  # the forecast learns an hour, or gets ready for the next
        self.capacity_waiting, self.mig_forecast = d.capacity_waiting, d.mig_forecast

    def _sample_until(self, t: float) -> None:
        while self.next_sample <= t:
            self.samples.append(self._sample(self.next_sample))
            self.next_sample += self.sample_every

    def _sample(self, t: float) -> dict:
        site_gpus: dict[str, int] = {}
        for n in self.nodes.values():
            site_gpus[n.site] = site_gpus.get(n.site, 0) + n.gpus * 1000
        site_alloc: dict[str, int] = {}
        used: dict[str, float] = {}
        for r in self.running.values():
            site_alloc[r.site] = site_alloc.get(r.site, 0) + r.usage.gpu_milli
            used[r.spec.queue] = used.get(r.spec.queue, 0.0) + r.usage.gpu
        pend: dict[str, float] = {}
        why: dict[str, float] = {}  # pending reason -> GPUs waiting for it
        for j in self.pending.values():
            gpus = j.request().gpu
            pend[j.queue] = pend.get(j.queue, 0.0) + gpus
            reason = self.jobs[j.id].last_reason or "New"
            why[reason] = why.get(reason, 0.0) + gpus
        stranded: dict[str, float] = {}  # free GPUs on partly used nodes, which a whole-node gang cannot use
        for st in self.state.cluster.nodes.values():
            free = st.free_gpu_milli
            if 0 < free < st.node.gpus * 1000:
                stranded[st.node.site] = stranded.get(st.node.site, 0.0) + free / 1000
        return {
            "t": t,
            "util": {s: site_alloc.get(s, 0) / g for s, g in site_gpus.items() if g},
            "stranded_gpus": stranded,
            "site_spend_usd": dict(self.ledger.site_cost),
            "queue_spend_usd": dict(self.ledger.cost),
            "pending_gpus": pend,
            "used_gpus": used,
            "pending_by_reason": why,
            "windows": [p.name for p in active_policies(self.fed, self.local(t))],
            "cloud_nodes": len(self.cloud),
            "spend_usd": self.ledger.total_cost,
        }

