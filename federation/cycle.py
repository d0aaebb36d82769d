"""One decision cycle, the same for the simulator and the live controller.

The two shells only observe and execute. Each cycle they pass what they see now (an
`Observation`: nodes, running and waiting jobs, cloud requests in flight and the ones that failed,
the time, the month's spend) and act on what comes back (`Decisions`: admissions, preemptions,
reasons, cloud scale-ups, releases and cancellations, when to decide again). Everything between
lives here or below: the tidal quotas of the moment, the full-or-incremental rule, the scheduling
core, the blocking of cloud options that failed (failover is a decision of the next cycle, not a
provider's), who cloud nodes were bought for, burst and scale-in, the demand forecast (learned
hour by hour; pre-warm and MIG instances wanted ahead), and which waiting jobs want capacity (for
the MIG managers).

It keeps what a decision needs from the last cycle (reservations, since-when a queue is over its
capability, blocked options, since-when a cloud node is idle) and nothing that a shell must
observe. It does no I/O, so the simulator's replay and production decide alike.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import chain

from federation.live_state import LiveState
from federation.mig.manager import CAPACITY_REASONS, MigManager
from federation.model import (
    Federation,
    JobSpec,
    Node,
    PendingReason,
    Plan,
    Queue,
    Resources,
    RunningJob,
)
from federation.quota import PastUsage, QuotaTree
from federation.reasons import Reason
from federation.scheduler import CycleState, Snapshot, incremental_pending, node_capacity, schedule
from policies import burst as burst_policy
from policies.forecast import Forecaster, hour_of_week, live_demand
from policies.placement import MixTally, make_strategy
from policies.tidal import effective_burst, effective_queues, upcoming_reserves
from providers.errors import AUTH, CAPACITY, INVALID, QUOTA

TIMEOUT = "Timeout"  # a request not delivered within provisioning_timeout_s

#: What a provisioning error blocks, and for how long, as SkyPilot's provisioner blocks by scope:
#: no capacity is the node group's (its instance type in its zones); a quota or credentials
#: problem is the site's (account and region); a request the cloud calls invalid stays invalid
#: until someone fixes the config. A transient error (throttled, 5xx after retries) blocks
#: nothing: the next cycle may ask again.
BLOCKS: dict[str, tuple[str, float]] = {
    CAPACITY: ("group", 600.0),
    TIMEOUT: ("group", 600.0),
    QUOTA: ("site", 1800.0),
    AUTH: ("site", 3600.0),
    INVALID: ("group", 3600.0),
}


@dataclass(frozen=True)
class ProvisionFailure:
    """A cloud request that ended without its nodes (the shell saw it since the last cycle)."""

    request_id: str
    site: str
    group: str
    kind: str  # providers.errors kinds
    message: str = ""


@dataclass(frozen=True)
class Observation:
    now: float  # seconds: virtual in the simulator, epoch live
    local: datetime  # the same instant in the federation's timezone (tidal windows)
    nodes: tuple[Node, ...]  # every node that exists now, MIG layouts and cordons as they are
    cloud: tuple[Node, ...]  # those of `nodes` at cloud sites (the shells know them; finding them here cost a replay 8x its time)
    running: tuple[RunningJob, ...]
    pending: dict[str, JobSpec]  # every waiting job
    arrived: frozenset[str] | set[str]  # of `pending`, those that were not waiting at the last cycle
    submitted: tuple[JobSpec, ...] = ()  # jobs first seen since the last cycle (at start: every job known), for the workload mix
    in_flight: tuple[burst_policy.InFlight, ...] = ()  # cloud requests still to deliver (count: nodes not up yet)
    failed: tuple[ProvisionFailure, ...] = ()
    month_spend_usd: float = 0.0
    bought_for: dict[str, tuple[str, ...]] = field(default_factory=dict)  # cloud node -> the jobs its request was made for
    stopped: dict[str, str] = field(default_factory=dict)  # queue -> "pause" or "drain", as an operator set it (live only)
    queue_month_spend_usd: dict[str, float] = field(default_factory=dict)  # this month's cloud spend per queue (showback)
    heads: frozenset[str] = frozenset()  # sites whose own cluster the federation made (provider.cluster) and which are up
    # of `running`, the gangs that lost tasks and those within a preemption's grace; None: found
    # by scanning `running`, which, every cycle, cost a 10,000-node replay a quarter of its time
    lost: tuple[RunningJob, ...] | None = None
    stopping: tuple[RunningJob, ...] | None = None
    unreachable: dict[str, float] = field(default_factory=dict)  # site -> since when it has not answered the shell


@dataclass
class Decisions:
    full: bool = False  # whether every waiting job was looked at
    queues: tuple[Queue, ...] = ()  # the effective quotas this cycle decided under
    plan: Plan = field(default_factory=Plan)  # admissions and preemptions
    reasons: dict[str, PendingReason] = field(default_factory=dict)  # waiting jobs looked at, and why they wait
    scale_up: list[burst_policy.ScaleUp] = field(default_factory=list)
    release: list[str] = field(default_factory=list)  # idle cloud nodes to give back
    cancel: list[tuple[str, str]] = field(default_factory=list)  # (request id, why): give up, keep nothing it made
    teardown: list[str] = field(default_factory=list)  # sites whose whole cluster to take down (nothing there for scale_in_idle_s)
    evict: list[tuple[str, str, str]] = field(default_factory=list)  # (job, reason, why) to stop and queue again, whole: a stale gang (NodeLost), a lost site's (SiteLost)
    shrink: list[str] = field(default_factory=list)  # elastic gangs that lost tasks but not their minimum: they go on with the rest
    # (job, the start of its run, why): runs past their max_runtime_s, to stop; the job fails. A
    # run that ended, or a job that started again since, is not meant: the shells check the start
    overrun: list[tuple[str, float, str]] = field(default_factory=list)
    blocked: list[tuple[str, str, str]] = field(default_factory=list)  # (site, group, why) newly blocked
    capacity_waiting: list[JobSpec] = field(default_factory=list)  # what the MIG managers may slice for
    prewarm_gpus: float = 0.0  # cloud GPUs the forecast wants up one lead time from now
    mig_forecast: dict[str, dict[str, int]] | None = None  # site -> profile -> MIG instances predicted one lead time ahead
    learn_at: float | None = None  # when the forecast next needs a cycle (an hour's end, a lead time before it)
    wake_at: float | None = None  # decide again by then, even if nothing happens


class DecisionCycle:
    #: the longest a live cycle goes without looking at every waiting job (a safety net: the
    #: rule below says when anything else than arrivals changed; the simulator, whose every
    #: change is an event, needs none and passes None)
    FULL_EVERY_S = 5.0

    def __init__(self, fed: Federation, state: CycleState | None = None, full_every_s: float | None = FULL_EVERY_S):
        self.fed = fed
        self.state = state  # the simulator's, which it keeps up to date with its own events
        self.live = LiveState() if state is None else None  # live: kept here, brought up to date from each observation
        self.full_every_s = full_every_s
        self.queues: tuple[Queue, ...] | None = None
        self.last: Plan | None = None
        self.scaled = False
        self.fingerprint: tuple | None = None
        self.pending_count = 0
        self.last_full_s = -math.inf
        self.wake: float | None = None
        self.blocked: dict[tuple[str, str], float] = {}
        self.idle_since: dict[str, float] = {}
        self.empty_since: dict[str, float] = {}  # cluster site with a head and nothing else -> since when
        self.stale_since: dict[str, float] = {}  # gang below its minimum of tasks (a node went away) -> since when
        self.unclaimed: set[str] = set()  # jobs that gave their claim up (see Plan.unclaimed)
        self.up_since: dict[str, float] = {}  # cloud node made for jobs -> when this cycle first saw it
        self.codes: dict[str, str] = {}  # waiting job -> its reason code (incremental cycles do not look at all)
        self.reclaimed: dict[str, tuple[int, float]] = {}  # queue -> (reclaims in a row, until when it may not borrow)
        self.deadlines: list[tuple[float, str, float]] | None = None  # heap of (when, job, its run's start) for max_runtime_s; None: not seeded yet
        # placement weighs fragmentation by the mix of the jobs submitted so far (FGD's target workload)
        self.tally = MixTally()
        self.strategy = make_strategy(fed.policies.placement.strategy)
        if state is not None:
            state.strategy = self.strategy
        self.bursting = any(s.is_cloud for s in fed.sites)
        mig_sites = [s.name for s in fed.sites if MigManager(fed, s.name).active]
        self.mig = bool(mig_sites)
        fs = fed.policies.fair_share
        self.past = PastUsage(fs.usage_half_life_s, fs.usage_weight) if fs.usage_half_life_s > 0 else None
        fc = next((t.forecast for t in fed.policies.tidal if t.forecast is not None), None)
        self.forecast = Forecaster(fc.lead_s, fc.history_days, mig_sites) if fc else None

    def step(self, obs: Observation) -> Decisions:
        now, fed = obs.now, self.fed
        out = Decisions()
        if self.tally.add(obs.submitted):
            self.strategy = make_strategy(fed.policies.placement.strategy, self.tally.mix)
            if self.state is not None:
                self.state.strategy = self.strategy
        self._expire_and_block(obs, out)
        queues = effective_queues(fed, obs.local)
        reshaped = queues != self.queues
        if reshaped and self.state is not None and self.queues is not None:
            self.state.quota = _quota(queues, obs)
        self.queues = out.queues = queues
        upcoming = upcoming_reserves(fed, obs.local) if fed.policies.tidal else {}
        cloud = obs.cloud
        claims = self._claims(obs, cloud)
        over = self.last.over_capability_since if self.last else {}
        if self.forecast is not None:
            out.learn_at = self._forecast(obs, out)
        past = self._past(obs, queues) if self.past is not None else {}
        head_wake = self._teardown(obs, out) if obs.heads or self.empty_since else None
        lost = obs.lost if obs.lost is not None else tuple(r for r in obs.running if r.lost)
        lost_wake = self._lost(lost, obs.now, out) if self.stale_since or lost else None
        site_wake = self._site_lost(obs, out) if obs.unreachable else None
        run_wake = self._overrun(obs, out)
        shell_wakes = [w for w in (head_wake, lost_wake, site_wake, run_wake) if w is not None]
        if not (obs.pending or cloud or obs.in_flight or over or reshaped or upcoming or out.prewarm_gpus):
            out.wake_at = min(shell_wakes, default=None)
            return out  # nothing else could change
        # Full, or only the new arrivals: when, since the last cycle, jobs only arrived, what
        # waited then would wait the same way now (see incremental_pending).
        in_flight = tuple(f for f in obs.in_flight if f.request_id not in {rid for rid, _ in out.cancel})
        covered = frozenset(j for f in in_flight for j in f.jobs)
        # live, the last cycle's tuple when no running job changed: compared by identity, and
        # what the cycle kept from it (reclaim's victims) holds
        running = self.live.observe(obs.running) if self.live is not None else obs.running
        fingerprint = (running, obs.nodes, queues, covered, tuple(sorted(upcoming.items())), tuple(sorted(obs.stopped.items())),
                       tuple(sorted(obs.unreachable)))
        last = self.last
        out.full = full = (last is None or bool(last.admissions or last.preemptions) or self.scaled or fingerprint != self.fingerprint
                           or (self.wake is not None and now >= self.wake) or len(obs.pending) != self.pending_count + len(obs.arrived)
                           or (self.full_every_s is not None and now - self.last_full_s >= self.full_every_s))
        reservations = last.reservations if last else {}
        stopping = obs.stopping if obs.stopping is not None else tuple(r for r in obs.running if r.preempting)
        claimants = set(last.pipelined) if last else set()  # they start first where they claimed: looked at, as reservation holders
        snap = Snapshot(fed, obs.nodes, running, incremental_pending(obs.pending, set(obs.arrived) | claimants, reservations, full, stopping),
                        queues, covered, reservations, over, upcoming, claims, obs.stopped,
                        last.consolidating if last else {}, last.moving if last else {},
                        {q: until for q, (_, until) in self.reclaimed.items() if until > now}, stopping, frozenset(obs.unreachable),
                        last.pipelined if last else {})
        state = self.state or self.live.sync(snap, self.strategy)
        state.quota.past = past
        try:
            plan = out.plan = schedule(snap, now, state)
        except Exception:
            if self.live is not None:
                self.live.forget()
            raise
        if self.live is not None:
            self.live.started(plan, obs.pending, now)
        out.reasons = dict(plan.pending)
        if fed.policies.preemption.reclaim_backoff_s and plan.preemptions:
            self._back_off(obs, plan)
        self.unclaimed = (self.unclaimed | set(plan.unclaimed)) & obs.pending.keys()
        wakes = [plan.wake_at_s] if plan.wake_at_s is not None else []
        shrink = fed.policies.preemption.quota_shrink_delay_s
        wakes += [since + shrink for since in plan.over_capability_since.values()]
        if self.bursting:
            wakes += self._burst(obs, plan, state, cloud, in_flight, claims, out)
        wakes += shell_wakes
        for a in plan.admissions:
            if (limit := obs.pending[a.job_id].max_runtime_s) is not None:
                heapq.heappush(self.deadlines, (now + limit, a.job_id, now))
                wakes.append(now + limit)
        if out.teardown and out.scale_up:  # wanted again this very cycle: it stays
            wanted = {u.site for u in out.scale_up}
            self.empty_since.update({s: now for s in out.teardown if s in wanted})
            out.teardown = [s for s in out.teardown if s not in wanted]
        self.last, self.scaled, self.fingerprint = plan, bool(out.scale_up), fingerprint
        self.pending_count = len(obs.pending) - len(plan.admissions)
        if full:
            self.last_full_s = now
        self._remember_reasons(obs, out)
        later = [w for w in wakes if w > now]
        if not full and self.wake is not None and self.wake > now:
            later.append(self.wake)  # an incremental cycle looked at too little to drop what a full one asked for
        out.wake_at = self.wake = min(later) if later else None
        return out

    def _lost(self, lost: tuple[RunningJob, ...], now: float, out: Decisions) -> float | None:
        """A gang that lost tasks (their node went away) goes on if what is left is at least its
        minimum (an elastic gang shrinks). Below it, it is stale (KAI's word): it keeps the rest
        for `stale_gang_grace_s`, since a node that comes back makes it whole, and is then stopped
        and queued again, whole. Returns when the next stale gang's grace ends."""
        grace = self.fed.policies.preemption.stale_gang_grace_s
        stale = {}
        for r in lost:
            if r.preempting:
                continue
            least = r.spec.min_tasks or r.spec.tasks
            if r.tasks >= least:
                out.shrink.append(r.spec.id)
                continue
            since = self.stale_since.get(r.spec.id, now)
            if now >= since + grace - 1e-6:
                out.evict.append((r.spec.id, "NodeLost", f"{r.lost} of its tasks lost their node; {r.tasks} left of the {least} it needs, for {now - since:g} s"))
            else:
                stale[r.spec.id] = since
        self.stale_since = stale
        return min((since + grace for since in stale.values()), default=None)

    def _overrun(self, obs: Observation, out: Decisions) -> float | None:
        """Runs that reach their max_runtime_s are stopped and their jobs fail (as Ray's own
        job timeouts end them). Deadlines are kept in a heap from this cycle's admissions, seeded
        once from what runs at its first step (after a restart): no scan of every running job
        each cycle. Returns the next deadline."""
        if self.deadlines is None:
            self.deadlines = [(r.started_s + r.spec.max_runtime_s, r.spec.id, r.started_s) for r in obs.running if r.spec.max_runtime_s is not None]
            heapq.heapify(self.deadlines)
        while self.deadlines and self.deadlines[0][0] <= obs.now + 1e-6:
            at, job, started = heapq.heappop(self.deadlines)
            out.overrun.append((job, started, f"MaxRuntimeExceeded: stopped after max_runtime_s {at - started:g} s"))
        return self.deadlines[0][0] if self.deadlines else None

    def _site_lost(self, obs: Observation, out: Decisions) -> float | None:
        """What runs at a site that has not answered for site_lost_timeout_s is queued again,
        whole, to run elsewhere (Kueue MultiKueue's workerLostTimeout): a passing outage is
        waited out, a long one must not hold work hostage. Returns when the next site is due."""
        timeout = self.fed.policies.preemption.site_lost_timeout_s
        evicted = {job for job, _, _ in out.evict}
        due = []
        for r in obs.running:
            since = obs.unreachable.get(r.site)
            if since is None or r.spec.id in evicted:
                continue
            if obs.now >= since + timeout - 1e-6:
                out.evict.append((r.spec.id, "SiteLost", f"its site {r.site} has not answered for {obs.now - since:.0f} s"))
            else:
                due.append(since + timeout)
        return min(due, default=None)

    def _back_off(self, obs: Observation, plan: Plan) -> None:
        """Kueue KEP-14468's reclaim back-off: a queue reclaim took from may not borrow again for
        reclaim_backoff_s, doubled for each reclaim in a row (one within reclaim_backoff_max_s
        of the last back-off's end), at most reclaim_backoff_max_s. Reclaims during a back-off
        are of the same episode (the queue could not have borrowed again): they do not double it."""
        pol = self.fed.policies.preemption
        queue_of = {r.spec.id: r.spec.queue for r in obs.running}
        for q in {queue_of[p.job_id] for p in plan.preemptions if p.reason in ("Reclaim", "ReclaimWhileBorrowing") and p.job_id in queue_of}:
            n, until = self.reclaimed.get(q, (0, -math.inf))
            if obs.now < until:
                continue
            n = n + 1 if obs.now - until < pol.reclaim_backoff_max_s else 1
            self.reclaimed[q] = (n, obs.now + min(pol.reclaim_backoff_s * 2 ** (n - 1), pol.reclaim_backoff_max_s))

    def _teardown(self, obs: Observation, out: Decisions) -> float | None:
        """A site whose whole cluster the federation made goes down after `scale_in_idle_s` with
        no cloud node and no request in flight there (its head costs money and is an open door);
        its next scale-up brings it up again. Returns when the next one is due."""
        busy = {n.site for n in obs.cloud} | {f.site for f in obs.in_flight}
        idle_s = self.fed.policies.burst.scale_in_idle_s
        self.empty_since = {s: self.empty_since.get(s, obs.now) for s in obs.heads if s not in busy}
        out.teardown = sorted(s for s, since in self.empty_since.items() if obs.now >= since + idle_s - 1e-6)
        for s in out.teardown:
            del self.empty_since[s]
        return min((since + idle_s for since in self.empty_since.values()), default=None)

    def _past(self, obs: Observation, queues: tuple[Queue, ...]) -> dict[str, float]:
        """Each queue's weighted past share of the GPUs (time-aware fair share), kept every cycle."""
        parent = {q.name: q.parent for q in queues}
        held: dict[str, float] = {}
        for r in obs.running:
            q, gpus = r.spec.queue, r.usage.gpu
            while q is not None:
                held[q] = held.get(q, 0.0) + gpus
                q = parent.get(q)
        return self.past.advance(obs.now, held, float(sum(n.gpus for n in obs.nodes)))

    def _forecast(self, obs: Observation, out: Decisions) -> float:
        """Learn this cycle's demand; what the forecast wants ready one lead time from now (cloud
        GPUs, MIG instances); when it needs the next cycle."""
        fc, fed = self.forecast, self.fed
        demand = live_demand(chain(((r.spec, r.site) for r in obs.running), ((j, None) for j in obs.pending.values())), fc.mig_sites)
        fc.observe(obs.local, demand)
        ahead = obs.local + timedelta(seconds=fc.lead_s)
        if self.bursting:
            predicted = fc.profile.queue_gpus(fed.leaf_queues, hour_of_week(ahead))
            fixed = sum(n.gpus for n in obs.nodes) - sum(n.gpus for n in obs.cloud)
            out.prewarm_gpus = burst_policy.prewarm_gpus(fed, predicted, fixed, effective_queues(fed, ahead))
        out.mig_forecast = {site: fc.profile.mig_instances(site, hour_of_week(ahead)) for site in fc.mig_sites}
        return obs.now + min(fc.wakes(obs.local))

    def _expire_and_block(self, obs: Observation, out: Decisions) -> None:
        """Failed and overdue requests block their option (by the scope their error names); old blocks expire."""
        timeout = self.fed.policies.burst.provisioning_timeout_s
        ended = [(f.site, f.group, f.kind, f.message) for f in obs.failed]
        for f in obs.in_flight:
            if obs.now - f.requested_s >= timeout:
                why = f"{f.count} x {f.group} not ready in {timeout:g} s"
                out.cancel.append((f.request_id, why))
                ended.append((f.site, f.group, TIMEOUT, why))
        for site, group, kind, message in ended:
            scope = BLOCKS.get(kind)
            if scope is None:
                continue
            what, block_s = scope
            groups = [g.name for g in self.fed.site(site).node_groups] if what == "site" else [group]
            for g in groups:
                self.blocked[(site, g)] = obs.now + block_s
                out.blocked.append((site, g, f"{kind}: {message}" if message else kind))
        self.blocked = {k: until for k, until in self.blocked.items() if until > obs.now}

    def _claims(self, obs: Observation, cloud: list[Node]) -> dict[str, tuple[str, ...]]:
        """Cloud nodes bought for a gang are its own (Kueue's provisioning request books them
        likewise): until it starts, other work may not take them and they are not given back. A
        job whose quota no longer lets it start gives its claim up (the scheduler says so in
        `Plan.unclaimed`); any claim lapses `provisioning_timeout_s` after the node came up."""
        claims, up_since = {}, {}
        lapse = self.fed.policies.burst.provisioning_timeout_s
        for n in cloud:
            waiting = tuple(j for j in obs.bought_for.get(n.name, ()) if j in obs.pending and j not in self.unclaimed)
            if not waiting:
                continue
            since = up_since[n.name] = self.up_since.get(n.name, obs.now)
            if obs.now < since + lapse:
                claims[n.name] = waiting
        self.up_since = up_since
        return claims

    def _burst(self, obs: Observation, plan: Plan, state: CycleState, cloud: list[Node], in_flight, claims, out: Decisions) -> list[float]:
        """Cloud scale-up for what waits, scale-in of what idles; returns when to look again."""
        now, fed = obs.now, self.fed
        nodes = []
        for n in cloud:
            st = state.cluster.nodes[n.name]
            busy = bool(st.tasks) or n.name in claims
            if busy:
                self.idle_since.pop(n.name, None)
            else:
                self.idle_since.setdefault(n.name, now)
            # a claimed node's free capacity is its gang's, not for others' plans
            free = Resources() if n.name in claims else Resources(st.free_gpu_milli, st.cpu_free, st.mem_free)
            nodes.append(burst_policy.CloudNode(n.name, n.site, n.node_group, busy, self.idle_since.get(n.name), free))
        present = {n.name for n in cloud}
        self.idle_since = {k: v for k, v in self.idle_since.items() if k in present}
        enabled, budget = effective_burst(fed, obs.local)
        d = burst_policy.decide(fed, now, burst_policy.BurstInputs(
            plan.capacity_requests, tuple(nodes), in_flight, frozenset(self.blocked), enabled, budget, obs.month_spend_usd, out.prewarm_gpus,
            frozenset(j for jobs in claims.values() for j in jobs), obs.queue_month_spend_usd, obs.heads))
        for job_id, (code, message) in d.reasons.items():
            out.reasons[job_id] = PendingReason(code, message)
        for up in d.scale_up:
            for j in up.jobs:
                out.reasons[j] = PendingReason(Reason.WaitingForBurst, f"{up.count} node(s) of {up.site}/{up.group} requested")
        out.scale_up, out.release = d.scale_up, d.release
        for name in d.release:
            self.idle_since.pop(name, None)
        idle_s = fed.policies.burst.scale_in_idle_s
        wakes = [since + idle_s for name, since in self.idle_since.items()]
        wakes += [f.requested_s + fed.policies.burst.provisioning_timeout_s for f in in_flight]
        wakes += [self.up_since[n] + fed.policies.burst.provisioning_timeout_s for n in claims]  # a claim lapses
        if d.next_check_s is not None:
            wakes.append(d.next_check_s)
        return wakes

    def _remember_reasons(self, obs: Observation, out: Decisions) -> None:
        """Each waiting job's reason, kept across incremental cycles: the MIG managers slice for
        the jobs that wait for capacity (not for quota, which slicing cannot help)."""
        if not self.mig:
            return
        for a in out.plan.admissions:
            self.codes.pop(a.job_id, None)
        for job_id, r in out.reasons.items():
            self.codes[job_id] = r.code
        if out.full:
            self.codes = {j: c for j, c in self.codes.items() if j in obs.pending}
        out.capacity_waiting = [obs.pending[j] for j, c in self.codes.items() if c in CAPACITY_REASONS and j in obs.pending]


def _quota(queues: tuple[Queue, ...], obs: Observation) -> QuotaTree:
    """A queue tree under new quotas, holding what runs now."""
    quota = QuotaTree(queues, node_capacity(obs.nodes))
    for r in obs.running:
        quota.add(r.spec.queue, r.usage, preemptible=r.spec.preemptible)
    return quota

