"""The scheduling core: `schedule(snapshot, now) -> Plan`. Pure: no I/O, no clock, no Ray.

One cycle, in the manner of Kueue's scheduler:
  1. build   the cycle's state: free capacity per node, usage per queue (running jobs).
  2. order   pending jobs: within a queue by priority class then submit time; across queues,
             jobs within their deserved share first, then borrowers by weighted DRF share
             (`federation.ordering`).
  3. assign  each job in that order: capability, quota, then a gang placement on one site.
  4. preempt where a job within its share (reclaim) or of higher priority (inside its queue)
             cannot start: the fewest victims that make room; they get `grace_s` to stop,
             and what they free is the preemptor's until it runs. Where the GPUs are free but
             scattered, consolidate (KAI's): move the fewest preemptible jobs that fit
             elsewhere, and hold the emptied nodes for the gang (`federation.preempting`).
  5. reserve nodes for a starving gang, so that a stream of small jobs cannot overtake it
             forever: the first blocked gang per site reserves the nodes it will get, and later
             jobs in the cycle may not use them (they backfill elsewhere).
  6. explain every job left pending with one structured reason.
Nothing is held for a gang that cannot start, so two gangs never deadlock holding halves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from federation.cluster import GPU, ClusterState, NodeState, tasks_that_fit
from federation.errors import SnapshotError
from federation.feasibility import feasible_sites
from federation.holds import Holds
from federation.model import (
    Admission,
    CapacityRequest,
    Federation,
    JobSpec,
    Node,
    PendingReason,
    Plan,
    Preemption,
    Queue,
    Resources,
    RunningJob,
    TaskPlacement,
)
from federation.ordering import Ordering
from federation.placement import capacity_for, place_gang
from federation.preempting import Preempting
from federation.preemption import RunningIndex
from federation.quota import QuotaTree
from policies.placement import Strategy, make_strategy, workload_mix


@dataclass(frozen=True)
class Snapshot:
    """Everything the core sees: config, nodes that exist now, running and pending jobs."""

    federation: Federation
    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...] = ()
    pending: tuple[JobSpec, ...] = ()
    queues: tuple[Queue, ...] | None = None  # effective quotas now (tidal); default: the config's
    burst_in_flight: frozenset[str] = frozenset()  # jobs the burst policy is provisioning for
    reservations: dict[str, tuple[str, ...]] = field(default_factory=dict)  # kept from the last plan
    over_capability_since: dict[str, float] = field(default_factory=dict)  # kept from the last plan
    upcoming_reserves: dict[str, int] = field(default_factory=dict)  # queue -> GPU milli a window about to open reserves
    claims: dict[str, tuple[str, ...]] = field(default_factory=dict)  # cloud node -> the waiting jobs it was bought for (only they may use it)
    stopped: dict[str, str] = field(default_factory=dict)  # queue -> "pause" (admit nothing) or "drain" (and stop what runs), by an operator
    consolidating: dict[str, tuple[tuple[str, ...], float]] = field(default_factory=dict)  # kept from the last plan
    moving: dict[str, tuple[tuple[TaskPlacement, ...], float]] = field(default_factory=dict)  # kept from the last plan
    borrow_backoff: dict[str, float] = field(default_factory=dict)  # queue -> until when it may not borrow (reclaim back-off)
    stopping: tuple[RunningJob, ...] | None = None  # of `running`, those within a preemption's grace (None: found by a scan)
    unreachable: frozenset[str] = frozenset()  # sites that do not answer now: nothing is placed there
    pipelined: dict[str, tuple[TaskPlacement, ...]] = field(default_factory=dict)  # kept from the last plan


@dataclass
class CycleState:
    """Free capacity and queue usage, kept by a caller that runs many cycles (the simulator; the
    live decision cycle through `federation.live_state`).

    It must match its snapshot (nodes, running jobs, effective queues). `schedule()` leaves it
    matching the snapshot plus the plan's admissions, so the caller applies only what happens
    next (finishes, stops, nodes), instead of rebuilding it from every node each cycle.
    """

    cluster: ClusterState
    quota: QuotaTree
    strategy: Strategy  # kept across cycles, so its per-state score cache is too
    index: RunningIndex | None = None  # kept while the running jobs and the quota tree stay as they are

    @staticmethod
    def build(snap: Snapshot, strategy: Strategy | None = None) -> CycleState:
        cluster = ClusterState(snap.nodes)
        cluster.apply_running(snap.running)
        quota = QuotaTree(snap.queues or snap.federation.queues, node_capacity(snap.nodes))
        for r in snap.running:
            if r.spec.queue not in quota.queues:
                raise SnapshotError(f"running job {r.spec.id} is in unknown queue {r.spec.queue!r}")
            quota.add(r.spec.queue, r.usage, preemptible=r.spec.preemptible)
        if strategy is None:  # a one-off cycle weighs by what it sees; the decision cycle by what was submitted so far
            strategy = make_strategy(snap.federation.policies.placement.strategy, workload_mix([*snap.pending, *(r.spec for r in snap.running)]))
        return CycleState(cluster, quota, strategy)


def node_capacity(nodes) -> Resources:
    return sum((Resources(n.gpus * GPU, n.cpu_milli, n.memory_mib) for n in nodes), Resources())


def incremental_pending(pending: dict[str, JobSpec], new: set[str], reservations: dict[str, tuple[str, ...]], full: bool,
                        stopping: Sequence[RunningJob] = ()) -> tuple[JobSpec, ...]:
    """The pending jobs a cycle must look at.

    A full cycle looks at all. When, since the last cycle, jobs only arrived (nothing finished,
    no node came or went, no quota changed, and the last cycle admitted and preempted nothing),
    every job that failed then fails the same way now, so only the new jobs, the holders of
    reservations (whose nodes must stay blocked) and the jobs that `stopping` jobs were
    preempted for (what they free is theirs: a new job must not count on it) are looked at. This
    is what keeps a cycle with tens of thousands of waiting jobs in milliseconds (Kueue parks
    inadmissible workloads alike).
    """
    if full:
        return tuple(pending.values())
    keep = new | set(reservations) | {r.preempted_for for r in stopping if r.preempted_for}  # a few among tens of thousands: looked up
    return tuple(pending[jid] for jid in sorted(keep) if jid in pending)


def schedule(snapshot: Snapshot, now: float, state: CycleState | None = None) -> Plan:
    """One cycle. With `state`, the caller's state is used and left with the admissions applied."""
    return _Cycle(snapshot, now, state or CycleState.build(snapshot)).run()


class _Cycle(Preempting, Ordering):
    def __init__(self, snap: Snapshot, now: float, state: CycleState):
        self.snap, self.now = snap, now
        fed = snap.federation
        self.policies = fed.policies
        # 1. build
        self.cluster, self.quota = state.cluster, state.quota
        self.strategy = state.strategy
        self.site_order = [s.name for s in fed.sites if not s.is_cloud] + [s.name for s in fed.sites if s.is_cloud]
        self.running = snap.running
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.requests: list[CapacityRequest] = []
        self.pending: dict[str, PendingReason] = {}
        self.reservations: dict[str, tuple[str, ...]] = {}
        self.reserved_sites: set[str] = set()
        self.blocked: set[str] = set()  # nodes reserved for a gang this cycle
        self.claims = dict(snap.claims)
        self.unclaimed: list[str] = []
        self.victims: set[str] = set()
        # What failed once in a cycle fails again (free capacity and quota only shrink within it):
        self.quota_failed: dict[tuple, tuple[PendingReason, bool]] = {}  # (queue, shape) -> (reason, pool)
        self.no_fit: set[tuple] = set()  # shapes no site can place now
        self.failed: dict[tuple, PendingReason] = {}  # (queue, priority, shape) -> reason once preemption failed too
        self.empty_fit: dict[tuple, int] = {}  # (site, node group, task shape) -> tasks an empty node takes
        self.holds = Holds(self.quota, self.cluster, snap.upcoming_reserves)
        self.sites_of: dict[tuple, list[str]] = {}  # (queue, task shape) -> the sites that may hold it, in order (a list no one changes)
        self.wake_at: float | None = None
        # nodes being emptied for a gang by consolidation, until it starts or the hold lapses
        self.consolidating = {j: v for j, v in snap.consolidating.items() if v[1] > now}
        self.moving = {j: v for j, v in snap.moving.items() if v[1] > now}
        self.held: list[tuple[JobSpec, tuple[TaskPlacement, ...]]] = []  # movers' places applied for this cycle only
        self.preemptor_priority: dict[str, int] = {}  # queue -> the highest priority among its jobs waiting for their victims
        self.state = state

    # Indexes of the running jobs, built only when a cycle first considers preemption: most
    # cycles never do, and with tens of thousands of running jobs they would dominate.
    @cached_property
    def stopping(self) -> list[RunningJob]:
        """Jobs stopping within their grace period (and the victims chosen this cycle)."""
        if self.snap.stopping is not None:
            return list(self.snap.stopping)
        return [r for r in self.running if r.preempting]

    @cached_property
    def freeing(self) -> dict[str, set[str]]:
        """The nodes of jobs stopping for a job that still waits, by that job: no other job is
        admitted there until it runs (KAI pipelines a preemptor onto its victims' nodes), or a
        requeued victim ordered first would take back what one victim gave up while another still
        stops, and be preempted again, for ever."""
        waiting = {j.id for j in self.snap.pending}
        out: dict[str, set[str]] = {}
        for r in self.stopping:
            if r.preempted_for in waiting:
                out.setdefault(r.preempted_for, set()).update(p.node for p in r.placements)
        return out

    @cached_property
    def index(self) -> RunningIndex:
        """The running jobs by queue, and what reclaim may take: the last cycle's, if it admitted
        nothing and nothing has changed since."""
        state, quota = self.state, self.quota
        if state.index is None or not state.index.holds_for(self.running, quota, quota.changes):
            state.index = RunningIndex(self.running, quota, quota.changes)
        return state.index

    def run(self) -> Plan:
        try:
            plan = self._run()
        finally:
            for spec, placements in self.held:
                self.cluster.apply(spec, placements, -1)
        if "index" in self.__dict__:  # looked at this cycle
            self._keep_index()
        return plan

    def _keep_index(self) -> None:
        """Dry runs put back what they took but count as changes: the index still holds unless
        something was admitted (and then the next cycle's running jobs differ anyway)."""
        if self.admissions:
            self.state.index = None
        else:
            self.index.changes = self.quota.changes

    def _run(self) -> Plan:
        # Jobs that cloud nodes were bought for start on them first: that capacity is theirs, and
        # what they leave of it is everyone's in this same cycle. Anything else (other nodes, a
        # claimant its nodes do not fit) goes in fair-share order, as always.
        started = self._move() if self.moving else set()
        if self.snap.pipelined:
            started |= self._start_pipelined()
        if self.claims:
            claimants = {j for jobs in self.claims.values() for j in jobs}
            for job in sorted((j for j in self.snap.pending if j.id in claimants), key=lambda j: (-j.priority, j.submit_s, j.id)):
                ready = job.queue in self.quota.queues and self._stopped(job.queue) is None and (job.not_before_s or 0.0) <= self.now
                if ready and self._start_on_claimed(job):
                    started.add(job.id)
        for job in self._order(started):
            self._assign(job)
        if self.snap.stopped:
            self._drain()
        if self.holds:
            budget = self.policies.preemption.max_victims_per_cycle - len(self.preemptions)
            for r in self.holds.prepare(self.running, self.victims, budget):
                self.victims.add(r.spec.id)
                self.preemptions.append(Preemption(r.spec.id, "WindowPrepare"))
        over = self._shrink()
        return Plan(tuple(self.admissions), tuple(self.preemptions), tuple(self.requests), self.pending, self.reservations, over, self.wake_at,
                    tuple(self.unclaimed), self.consolidating, self.moving, self._claims_kept())

    def _move(self) -> set[str]:
        """Jobs consolidation moves: one that has stopped starts where it was planned to go, first
        (the place was held for it); for one still stopping, that place stays held this cycle."""
        pending = {j.id: j for j in self.snap.pending if j.id in self.moving}
        running = {r.spec.id: r.spec for r in self.running if r.spec.id in self.moving}
        started = set()
        for job_id, (placements, _) in list(self.moving.items()):
            spec = pending.get(job_id) or running.get(job_id)
            if (spec is None or not self.cluster.can_take(spec, placements)  # gone, or its place is (a node went): it queues as any job
                    or self.cluster.nodes[placements[0].node].node.site in self.snap.unreachable):
                del self.moving[job_id]
                continue
            if job_id in running:
                self.cluster.apply(spec, placements)
                self.held.append((spec, placements))
            else:
                del self.moving[job_id]
                if self._start_at(spec, self.cluster.nodes[placements[0].node].node.site, placements):
                    started.add(job_id)
        return started

    def _start_at(self, spec: JobSpec, site: str, placements: Sequence[TaskPlacement]) -> bool:
        """Admit `spec` on places held for it (free now), if its quota lets it and no other
        queue's guarantee holds them (else nothing stays placed)."""
        verdict = self.quota.check(spec.queue, spec.per_task.times(len(placements)), spec.preemptible)
        if not verdict.ok:
            return False
        self.cluster.apply(spec, placements)
        return self._admit(spec, site, list(placements), verdict.borrowing) is None  # a hold takes it back: _admit undoes it

    def _stopped(self, leaf: str) -> str | None:
        """The queue on `leaf`'s path an operator paused or drained, if any."""
        return next((a for a in self.quota.path(leaf) if a in self.snap.stopped), None) if self.snap.stopped else None

    def _drain(self) -> None:
        """What runs in a drained queue is stopped (with the usual grace) and queued again, as
        Kueue's HoldAndDrain evicts: non-preemptible jobs too, since an operator asked for it."""
        budget = self.policies.preemption.max_victims_per_cycle - len(self.preemptions)
        for r in self.running:
            if budget <= 0:
                break
            by = self._stopped(r.spec.queue)
            if by is not None and self.snap.stopped[by] == "drain" and not r.preempting and r.spec.id not in self.victims:
                self.victims.add(r.spec.id)
                self.preemptions.append(Preemption(r.spec.id, "QueueDrained"))
                budget -= 1

    def _shrink(self) -> dict[str, float]:
        """Queues above their capability (a tidal window lowered it under their usage) give the
        excess back gradually, as YuniKorn's quota preemption does: after
        `quota_shrink_delay_s`, one job at a time (lowest priority, then the least work lost),
        the next only once the previous has stopped; never non-preemptible jobs."""
        delay = self.policies.preemption.quota_shrink_delay_s
        over: dict[str, float] = {}
        for name, q in self.quota.queues.items():
            if self.quota.usage[name].fits_in(q.capability):
                continue
            since = over[name] = self.snap.over_capability_since.get(name, self.now)
            if self.now - since < delay:
                continue
            mine = [r for r in self.running if name in self.quota.path(r.spec.queue)]
            if any(r.preempting or r.spec.id in self.victims for r in mine):
                continue  # one at a time
            cands = [r for r in mine if r.spec.preemptible]
            if cands:
                victim = min(cands, key=lambda r: (r.spec.priority, -r.started_s, r.spec.id))
                self.victims.add(victim.spec.id)
                self.preemptions.append(Preemption(victim.spec.id, "QuotaShrink"))
        return over

    # 3. assign ------------------------------------------------------------------------------

    def _assign(self, job: JobSpec) -> None:
        sites = self._sites_for(job)
        if not sites:
            self.pending[job.id] = PendingReason("NoFeasibleNode", "no node type at the queue's sites can ever hold one task of this job", job.per_task)
            return
        reachable = self._reachable_for(job)  # the quota decides on every site; places only these
        need = job.start_request
        if self.preemptor_priority.get(job.queue, job.priority) > job.priority:
            self.pending[job.id] = PendingReason("BehindPreemptor", "a higher-priority job of its queue waits for the jobs it preempted to stop", need)
            return
        qkey = (job.queue, job.per_task, job.min_tasks or job.tasks, job.preemptible, job.priority)
        cached = self.quota_failed.get(qkey)
        if cached is not None:
            self.pending[job.id], pool = cached
            if pool:
                self._request_capacity(job)
            return
        verdict = self.quota.check(job.queue, need, job.preemptible)
        if not verdict.ok:
            entitled = verdict.code in ("WaitingForQuota", "NonPreemptibleOverQuota") and self.quota.entitled(job.queue, need)
            # quota refused: the job may still displace its own queue's lower priorities (KAI's
            # preempt action, Kueue's withinClusterQueue), and others' borrowed work if entitled
            # (also where others' usage and guarantees hold the capacity: `pool`)
            if verdict.code != "MaxRunningJobs" and (entitled or not verdict.pool) and self._may_preempt(job) and self._try_preempt(job, reachable):
                return
            reason = PendingReason(verdict.code, verdict.message, need, verdict.free)
            self.pending[job.id] = reason
            if not entitled:
                self.quota_failed[qkey] = (reason, verdict.pool)
            if verdict.pool:  # more nodes would let it in: burst may add them
                self._request_capacity(job)
            return
        if verdict.borrowing and (until := self.snap.borrow_backoff.get(job.queue, 0.0)) > self.now:
            self.pending[job.id] = PendingReason("ReclaimBackoff", f"reclaim took its queue's borrowed work; it may borrow again in {until - self.now:.0f} s", need)
            self.wake_at = min(self.wake_at or float("inf"), until)
            return
        if not reachable:
            self.pending[job.id] = PendingReason("SiteUnreachable", f"the sites that could hold it ({', '.join(sites)}) do not answer now", need)
            return
        sites = reachable
        shape = (tuple(sites), job.per_task, job.tasks, job.min_tasks, job.gpu_models, job.mig_profile)
        if job.id in self.consolidating or job.id in self.freeing:  # nodes held for it are blocked for its like: its own shape
            shape += (job.id,)
        held_by = None
        if shape not in self.no_fit:
            grown = self._elastic_cap(job)
            blocked = self._blocked_for(job)
            if self.freeing:  # only admissions: a job may still count on them when it weighs preempting
                blocked = blocked | self._freed_for_others(job)
            for site in sites:
                placed = place_gang(self.cluster, grown, site, self.strategy, self.policies.placement.gang_topology, blocked)
                if placed is None:
                    continue
                held_by = self._admit(job, site, placed, verdict.borrowing)
                if held_by is None:
                    return
            if held_by is None:
                self.no_fit.add(shape)  # free capacity only shrinks during a cycle: the shape will not fit again
        if held_by is not None:
            # it would fit but for another queue's guarantee: waiting (or cloud) is the way, not preemption
            self.pending[job.id] = self._burst_or(job, need, PendingReason(
                "ReservedForQueue", f"the free GPUs of {', '.join(sorted(held_by.sites or ['every site']))} are held for queue {held_by.queue!r}'s guarantee "
                f"({self.holds.held(held_by) / 1000:g} GPUs)", need))
            self._request_capacity(job)
            return
        pkey = (job.queue, job.priority, shape)
        reason = self.failed.get(pkey)
        if reason is None:
            may = self._may_preempt(job)
            if may and (self._try_preempt(job, sites) or self._consolidate(job, sites, need)):
                return
            reason = self._capacity_reason(job, sites, need)
            if may and job.id not in self.reservations:  # what failed for this job fails for its like
                self.failed[pkey] = reason
        self.pending[job.id] = self._burst_or(job, need, reason)
        self._request_capacity(job)

    def _admit(self, job: JobSpec, site: str, placed: list[TaskPlacement], borrowing: bool):
        """Admit `job` as placed, unless another queue's guarantee holds that capacity: then the
        placement is undone and the hold that blocked it returned."""
        usage = job.per_task.times(len(placed))
        if self.holds and (hold := self.holds.blocker(job.queue, site, usage.gpu_milli)) is not None:
            self.cluster.apply(job, placed, -1)
            return hold
        self.quota.add(job.queue, usage, preemptible=job.preemptible)
        if self.holds:
            self.holds.placed(site, usage.gpu_milli)
        self.admissions.append(Admission(job.id, site, tuple(placed), borrowing=borrowing))
        if self.freeing:
            self.freeing.pop(job.id, None)  # what its victims free is everyone's once it runs
        if "pipelined" in self.__dict__:
            self.pipelined[:] = [j for j in self.pipelined if j.id != job.id]  # it takes its part for real now
        if self.claims:
            self._unclaim(job.id)
        self.consolidating.pop(job.id, None)
        return None

    def _start_on_claimed(self, job: JobSpec) -> bool:
        """Start a job on the cloud nodes bought for it, if its quota lets it and they hold it."""
        mine = {n for n, jobs in self.claims.items() if job.id in jobs and n in self.cluster.nodes}
        verdict = self.quota.check(job.queue, job.start_request, job.preemptible)
        if not verdict.ok:
            # its queue took other capacity meanwhile (or shrank): holding the nodes idle for it
            # would waste them; they are everyone's from now, this cycle included
            self._unclaim(job.id)
            self.unclaimed.append(job.id)
        if not mine or not verdict.ok:
            return False
        others = frozenset(self.cluster.nodes.keys() - mine)
        for site in sorted({self.cluster.nodes[n].node.site for n in mine} - self.snap.unreachable):
            placed = place_gang(self.cluster, self._elastic_cap(job), site, self.strategy, self.policies.placement.gang_topology, others)
            if placed is not None and self._admit(job, site, placed, verdict.borrowing) is None:
                return True
        return False

    def _elastic_cap(self, job: JobSpec) -> JobSpec:
        """An elastic gang grows past its `min_tasks` only within its queue's deserved share. It is
        preempted whole, so extra tasks on borrowed capacity would put its guaranteed part at risk
        too, and a queue reclaiming them would see the gang come back at full size and take them
        again: a loop, found by the conformance suite."""
        if job.min_tasks is None or job.min_tasks >= job.tasks:
            return job
        per, most = job.per_task.as_tuple(), job.tasks
        for a in self.quota.path(job.queue):
            room = (self.quota.queues[a].deserved - self.quota.usage[a]).as_tuple()
            for have, each in zip(room, per, strict=True):
                if each > 0:
                    most = min(most, max(0, have) // each)
        return job if most >= job.tasks else replace(job, tasks=max(job.min_tasks, most))

    def _request_capacity(self, job: JobSpec) -> None:
        if self.quota.queues[job.queue].burst and self.policies.burst.enabled:
            self.requests.append(CapacityRequest(job.id, job.queue, job.min_tasks or job.tasks, job.per_task, job.gpu_models, job.submit_s))

    def _sites_for(self, job: JobSpec) -> list[str]:
        key = (job.queue, job.shape_key)
        hit = self.sites_of.get(key)
        if hit is None:
            q = self.quota.queues[job.queue]
            allowed = set(q.sites) if q.sites is not None else None
            feasible = feasible_sites(self.snap.federation, job)
            hit = self.sites_of[key] = [s for s in self.site_order if s in feasible and (allowed is None or s in allowed)]
        return hit

    def _reachable_for(self, job: JobSpec) -> list[str]:
        """The job's sites that answer now: nothing is placed (or preempted) where a site does not."""
        sites = self._sites_for(job)
        return [s for s in sites if s not in self.snap.unreachable] if self.snap.unreachable else sites

    # 5. reserve and 6. explain --------------------------------------------------------------

    def _burst_or(self, job: JobSpec, need: Resources, reason: PendingReason) -> PendingReason:
        """What a job waits for: the cloud nodes on their way for it, if any, else `reason`."""
        if job.id in self.snap.burst_in_flight:
            return PendingReason("WaitingForBurst", "cloud capacity is being provisioned for this job", need)
        return reason

    def _may_preempt(self, job: JobSpec) -> bool:
        """A job whose cloud nodes are being bought, or are up and held for it, waits for them:
        stopping others' work for it as well would lose that work for nothing."""
        return job.id not in self.snap.burst_in_flight and not any(job.id in jobs for jobs in self.claims.values())

    def _unclaim(self, job_id: str) -> None:
        """A job that started no longer holds the cloud nodes bought for it."""
        for node, jobs in list(self.claims.items()):
            if job_id in jobs:
                rest = tuple(j for j in jobs if j != job_id)
                if rest:
                    self.claims[node] = rest
                else:
                    del self.claims[node]

    def _blocked_for(self, job: JobSpec) -> frozenset[str]:
        """Nodes `job` may not take: those reserved for a gang, cloud nodes bought for other jobs,
        and nodes consolidation is emptying for another gang."""
        out = frozenset(self.blocked)
        if self.claims:
            out = out.union(n for n, jobs in self.claims.items() if job.id not in jobs)
        if self.consolidating:
            out = out.union(n for j, (nodes, _) in self.consolidating.items() if j != job.id for n in nodes)
        return out

    def _capacity_reason(self, job: JobSpec, sites: list[str], need: Resources) -> PendingReason:
        blocked = self._blocked_for(job)
        if blocked and self._could_place(job, sites, frozenset()):
            if self._could_place(job, sites, frozenset(self.blocked)):  # only nodes bought for others, or emptied for them, would hold it
                held = blocked - self.blocked
                holders = sorted({j for n in held for j in self.claims.get(n, ())}
                                 | {j for j, (nodes, _) in self.consolidating.items() if j != job.id and held.intersection(nodes)})
                return PendingReason("ReservedForGang", f"the nodes that would fit it are held for {', '.join(holders)}, which wait(s) to start on them", need)
            holder = next(iter(self.reservations))
            return PendingReason("ReservedForGang", f"the nodes that would fit it are reserved for gang {holder}", need)
        if job.per_task.gpu_milli >= GPU and self._reserve(job, sites):
            msg = f"reserved {len(self.reservations[job.id])} node(s); waiting for running jobs there to finish"
        else:
            free = max((capacity_for(self.cluster, s, job) for s in sites), default=0)
            msg = f"{free} of {job.min_tasks or job.tasks} task(s) fit on any one site now"
        return PendingReason("WaitingForCapacity", msg, need)

    def _could_place(self, job: JobSpec, sites: list[str], blocked: frozenset[str]) -> tuple[str, list[TaskPlacement]] | None:
        """Where the gang would place now, on one of `sites` and avoiding `blocked`, if it would
        (a dry run: nothing stays placed)."""
        for site in sites:
            placed = place_gang(self.cluster, job, site, self.strategy, self.policies.placement.gang_topology, blocked)
            if placed is not None:
                self.cluster.apply(job, placed, -1)
                return site, placed
        return None

    def _reserve(self, job: JobSpec, sites: Sequence[str]) -> bool:
        """Reserve for `job` the nodes closest to free that together hold it when empty."""
        kept = self.snap.reservations.get(job.id, ())
        blocked = self._blocked_for(job)
        if kept and all(n in self.cluster.nodes and n not in blocked for n in kept):
            site = self.cluster.nodes[kept[0]].node.site
            if site not in self.reserved_sites and sum(self._fit_when_empty(job, self.cluster.nodes[n].node) for n in kept) >= (job.min_tasks or job.tasks):
                self.reservations[job.id] = kept  # keep last cycle's choice: a reservation that hops never fills
                self.reserved_sites.add(site)
                self.blocked.update(kept)
                return True
        need = job.min_tasks or job.tasks
        for site in sites:
            if site in self.reserved_sites:
                continue
            chosen, total = [], 0
            # nodes closest to free first; a free-state group at a time, not node by node
            for rep in sorted(self.cluster.representatives({site}), key=lambda st: (-st.free_gpu_milli, st.node.name)):
                k = self._fit_when_empty(job, rep.node)
                for name in self.cluster.groups[rep.sig] if k else ():
                    if name in blocked:
                        continue
                    chosen.append(name)
                    total += k
                    if total >= need:
                        self.reservations[job.id] = tuple(chosen)
                        self.reserved_sites.add(site)
                        self.blocked.update(chosen)
                        return True
        return False

    def _fit_when_empty(self, job: JobSpec, node: Node) -> int:
        key = (node.site, node.node_group, job.shape_key)
        k = self.empty_fit.get(key)
        if k is None:
            k = self.empty_fit[key] = tasks_that_fit(job, NodeState(node), job.tasks)
        return k
