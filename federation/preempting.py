"""Step 4 of the cycle (see `federation.scheduler`): preemption and consolidation.

Where a job cannot start, it may displace others: its own queue's lower priorities (KAI's
preempt action, Kueue's withinClusterQueue), borrowed work of other queues when it is within its
deserved share (reclaim) or, opted in, when it borrows itself (Kueue's borrowWithinCohort); or,
where the GPUs are free but scattered, consolidation moves the fewest jobs that fit elsewhere.
Victims are chosen by `federation.preemption`; this module owns what the cycle does with them:
the preemptor owns what they free until it runs (`_Cycle.freeing`) and its queue's lower
priorities wait behind it, so partial releases cannot make a preemption loop (Kueue #13662);
several jobs counting on what is being freed each take their part in turn
(`federation.pipelining`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from functools import cached_property
from itertools import chain

from federation.holds import free_gpu_milli
from federation.model import (
    ZERO,
    JobSpec,
    PendingReason,
    Preemption,
    Resources,
    RunningJob,
    TaskPlacement,
)
from federation.pipelining import FreedWorld, Pipelining
from federation.placement import capacity_for, place_gang
from federation.preemption import Candidate, Reclaimable, candidates, select_victims


class Preempting(Pipelining):
    """The preemption step of `federation.scheduler._Cycle`, which it is mixed into: it reads
    and writes the cycle's state (`quota`, `cluster`, `stopping`, `freeing`, `victims`,
    `preemptions`, `pending`, `pipelined`, `moving`, `held`, `consolidating`, `wake_at`, `index`) as the other steps do."""

    def _try_preempt(self, job: JobSpec, sites: list[str]) -> bool:
        """Choose victims for `job` (or see that victims already stopping suffice)."""
        policy = self.policies.preemption
        reclaimable = self._reclaimable(sites) if policy.reclaim else None
        search = None
        if self._may_choose(job, reclaimable):
            within = self.quota.entitled(job.queue, job.start_request)
            search = within, reclaimable if within or policy.borrow_within_cohort_max_priority is not None else None
        world = FreedWorld(self, job)
        try:
            chosen = self._choose(job, sites, search, world)
        finally:
            world.close()
        if chosen is None:
            return False
        if not chosen:  # what is being freed is enough
            self.pending[job.id] = PendingReason("WaitingForReclaim", f"{len(self.stopping)} preempted job(s) are stopping within their grace period", job.request())
            if job.id in self.freeing:
                self._hold_back(job)  # they stop for it (not just for anyone who could use what they free)
            self._pipeline(job, [])
            return True
        self._pipeline(job, [c.job for c in chosen])
        for c in chosen:
            self.victims.add(c.job.spec.id)
            self.freeing.setdefault(job.id, set()).update(p.node for p in c.job.placements)
            self.preemptions.append(Preemption(c.job.spec.id, c.reason, for_job=job.id))
        self.pending[job.id] = PendingReason("WaitingForReclaim", f"preempting {', '.join(c.job.spec.id for c in chosen)} ({chosen[0].reason.lower()})", job.request())
        self._hold_back(job)
        return True

    def _may_choose(self, job: JobSpec, others: Reclaimable | None) -> bool:
        """Whether a victim search could choose any victim for `job` (`others`: what reclaim may
        take on its sites), or find gangs too young to reclaim yet (when to look again). Not once
        the cycle's preemptions are spent, nor where nothing runs that it could take: with many
        thousands waiting, most of a full cycle's searches were of this kind (they found nothing,
        at ~60 us each)."""
        policy = self.policies.preemption
        if others is not None and others.started_after(self.now - policy.reclaim_min_runtime_s):
            return True
        if len(self.preemptions) >= policy.max_victims_per_cycle:
            return False
        return bool(self.index.by_queue.get(job.queue)) or (others is not None and others.any())

    def _choose(self, job: JobSpec, sites: list[str], search: tuple[bool, Reclaimable | None] | None, world: FreedWorld) -> list[Candidate] | None:
        """The victims `job` needs: none if what is being freed suffices; None if no set does.
        `search`: whether the job is within its share and what reclaim may take, or None where no
        search could choose (`_may_choose`)."""
        if self.stopping and self._freed_suffices(job, sites, world):
            return []
        if search is None:
            return None
        within, others = search
        policy = self.policies.preemption
        found, young = candidates(job, self.index.by_queue.get(job.queue, ()), others, set(self.quota.path(job.queue)), set(sites), within,
                                  policy.borrow_within_cohort_max_priority, self.now - policy.reclaim_min_runtime_s)
        if young is not None:  # look again when the first of them has run long enough
            self.wake_at = min(self.wake_at or float("inf"), young + policy.reclaim_min_runtime_s)
        cands = (c for c in found if c.job.spec.id not in self.victims)
        budget = policy.max_victims_per_cycle - len(self.preemptions)  # none left, or no candidates: select_victims finds none

        # Queues' usage as it is (`world.usage`), jobs already stopping (chosen this cycle for
        # others, or earlier) counted as gone: with many reclaiming at once, each counting the
        # borrower's usage whole took it below its share.
        stopping = self._stopping_sums()

        def stopped(a: str) -> Resources:  # what the stopping jobs use in queue `a` (the sums are their changes: negative)
            d = stopping.get(a)
            return Resources(-d[0], -d[1], -d[2]) if d else ZERO

        def still_borrowing(victim: RunningJob, chosen: list[RunningJob]) -> bool:
            path = self.quota.path(victim.spec.queue)
            gone = self._usage_of(chosen, path)
            return any(not (world.usage[a] - stopped(a) - gone[a]).fits_in(self.quota.queues[a].deserved) for a in path)

        def keeps_share(victim: RunningJob, chosen: list[RunningJob]) -> bool:
            q = victim.spec.queue
            left = world.usage[q].gpu_milli - stopped(q).gpu_milli - self._usage_of([*chosen, victim], (q,))[q].gpu_milli
            return left >= self.quota.queues[q].deserved.gpu_milli

        return select_victims(cands, lambda vs: self._fits_without(job, sites, vs, world), still_borrowing, keeps_share, budget)

    def _usage_of(self, jobs: list[RunningJob], queues: tuple[str, ...]) -> dict[str, Resources]:
        """What `jobs` use in each of `queues` (a queue's usage includes its descendants')."""
        out = dict.fromkeys(queues, ZERO)
        for v in jobs:
            for a in self.quota.path(v.spec.queue):
                if a in out:
                    out[a] = out[a] + v.usage
        return out

    def _reclaimable(self, sites: list[str]) -> Reclaimable:
        """The running work reclaim may take on `sites`, once per state of the quota tree: within a
        cycle only admissions change it (dry runs put back what they take off)."""
        key = (tuple(sites), len(self.admissions))
        hit = self.index.reclaim.get(key)
        if hit is None:
            borrowed = chain.from_iterable(rs for q, rs in self.index.by_queue.items() if self.quota.borrowing(q))
            hit = self.index.reclaim[key] = Reclaimable(borrowed, set(sites))
        return hit

    def _hold_back(self, job: JobSpec) -> None:
        """While a job waits for its victims, its queue's lower priorities wait behind it. The
        victims' nodes are its own (`freeing`), but a victim of its own queue requeued could start
        elsewhere, borrowing, and put the queue above what a non-preemptible job may run within
        again: preempted once more, again and again, while the job waits for ever."""
        self.preemptor_priority[job.queue] = max(job.priority, self.preemptor_priority.get(job.queue, job.priority))

    #: how many of a site's running jobs consolidation weighs moving, least work lost first
    CONSOLIDATION_CANDIDATES = 32
    #: how long the emptied nodes stay held for the gang beyond the movers' grace period
    CONSOLIDATION_HOLD_S = 300.0

    def _consolidate(self, job: JobSpec, sites: list[str], need: Resources) -> bool:
        """KAI's consolidation. The gang passes quota and its site has the GPUs free, but not on
        nodes it fits: move the fewest preemptible jobs (least work lost first: latest started,
        then smallest) that can all run elsewhere on the site with the gang placed, and hold the
        nodes they leave for the gang. Movers are preempted (`grace_s`) and queued again; no
        other job may take the held nodes, so they restart elsewhere, and the gang starts once
        they have stopped."""
        if not (self.policies.preemption.consolidation and need.gpu_milli):
            return False
        budget = self.policies.preemption.max_victims_per_cycle - len(self.preemptions)
        if budget <= 0:
            return False  # the cycle's preemptions are spent: no mover may be chosen
        blocked = None  # worked out for a site that has the GPUs free at all (most jobs' sites have not)
        for site in sites:
            free = free_gpu_milli(self.cluster, frozenset({site}), mig=False)
            if free < need.gpu_milli:
                continue  # not fragmentation: the site has not the GPUs free
            if blocked is None:
                blocked = self._blocked_for(job) | self._freed_for_others(job)
            free -= sum(self.cluster.nodes[n].free_gpu_milli for n in blocked
                        if n in self.cluster.nodes and self.cluster.nodes[n].node.site == site and self.cluster.nodes[n].node.schedulable)
            if free < need.gpu_milli:
                continue  # nor counting those held for others
            movable = sorted((r for r in self.running if r.site == site and r.spec.preemptible and not r.preempting and r.spec.id not in self.victims
                              and r.usage.gpu_milli),
                             key=lambda r: (-r.started_s, r.usage.gpu_milli, r.spec.id))[:self.CONSOLIDATION_CANDIDATES]
            chosen: list[RunningJob] = []
            plan = None
            for r in movable:
                if len(chosen) >= budget:
                    break
                chosen.append(r)
                plan = self._moved(job, site, chosen)
                if plan is not None:
                    break
            if plan is None:
                continue
            for r in list(reversed(chosen)):  # the fewest: drop any mover not needed
                rest = [v for v in chosen if v is not r]
                if rest and (p := self._moved(job, site, rest)) is not None:
                    chosen, plan = rest, p
            target, places = plan
            until = self.now + self.policies.preemption.grace_s + self.CONSOLIDATION_HOLD_S
            for r in chosen:
                self.victims.add(r.spec.id)
                self.stopping.append(r)
                self.preemptions.append(Preemption(r.spec.id, "Consolidation", for_job=job.id))
                self.moving[r.spec.id] = (places[r.spec.id], until)
                self.cluster.apply(r.spec, places[r.spec.id])  # its new place is taken from now on
                self.held.append((r.spec, places[r.spec.id]))
            self.consolidating[job.id] = (target, until)
            self.pending[job.id] = PendingReason("Consolidating", f"moving {', '.join(r.spec.id for r in chosen)} off {', '.join(target)} "
                                                 "to make room", job.request())
            return True
        return False

    def _freed_for_others(self, job: JobSpec) -> frozenset[str]:
        """Nodes being freed for other jobs (their victims stopping): consolidation neither
        targets them nor moves jobs onto them, or a lender's reclaim would free capacity for a
        gang it never asked for."""
        return frozenset(n for j, nodes in self.freeing.items() if j != job.id for n in nodes)

    def _moved(self, job: JobSpec, site: str, movers: list[RunningJob]) -> tuple[tuple[str, ...], dict[str, tuple[TaskPlacement, ...]]] | None:
        """The nodes `job` would take at `site` were `movers` gone, and where each mover would go
        instead, if each fits elsewhere on the site (a dry run: the state is restored). A mover's
        new place is taken at once while it still runs (within its grace) where it is: so it must
        be free now, off every mover's present nodes, not only once they have all stopped."""
        topology = self.policies.placement.gang_topology
        present = frozenset(p.node for v in movers for p in v.placements)
        for v in movers:
            self.cluster.apply(v.spec, v.placements, -1)
        undo: list[tuple[JobSpec, list[TaskPlacement]]] = []
        try:
            placed = place_gang(self.cluster, job, site, self.strategy, topology, self._blocked_for(job) | self._freed_for_others(job))
            if placed is None:
                return None
            undo.append((job, placed))
            places = {}
            for v in movers:
                spec = replace(v.spec, tasks=len(v.placements), min_tasks=None)
                again = place_gang(self.cluster, spec, site, self.strategy, topology, self._blocked_for(v.spec) | self._freed_for_others(job) | present)
                if again is None:
                    return None
                undo.append((spec, again))
                places[v.spec.id] = tuple(again)
            return tuple(sorted({p.node for p in placed})), places
        finally:
            for spec, placements in reversed(undo):
                self.cluster.apply(spec, placements, -1)
            for v in movers:
                self.cluster.apply(v.spec, v.placements)

    def _might_fit_without(self, job: JobSpec, sites: list[str], victims: list[RunningJob], world: FreedWorld) -> bool:
        """An upper bound, without taking anything off: could some site hold the gang's GPUs with
        the victims' GPUs back, in `world`? First by the site's total; then node by node, since
        a task's GPUs are on one node (the tasks that fit now, plus what each node of a stopping
        job, until the world is applied, or of a victim would hold with their GPUs back): victims
        scattered one GPU here and there free no node for a 4-GPU task, and each dry run to find
        that out took their quota and nodes off."""
        per, tasks = job.per_task.gpu_milli, job.min_tasks or job.tasks
        freed: dict[str, int] = {}  # by site
        for v in victims:
            freed[v.site] = freed.get(v.site, 0) + v.usage.gpu_milli
        free = self.cluster.site_free_milli if world.applied else world.free
        sites = [s for s in sites if free.get(s, 0) + freed.get(s, 0) >= per * tasks]
        if not sites:
            return False
        if world.applied:
            extra = self._extra_tasks(_gpus_on_nodes(victims), per)
        else:
            extra = self._freed_extra(world, per)
            if victims:
                extra = self._with_victims(extra, world, victims, per)
        return any(extra.get(s, 0) + capacity_for(self.cluster, s, job) >= tasks for s in sites)

    # What the stopping jobs free, node by node, less what the jobs pipelined ahead take there, is
    # alike for every job that weighs in the same freed world: worked out once per world (and task
    # size), not for each job that asks and each set of victims it tries (a cycle grew with the
    # waiting jobs times the jobs stopping).

    @cached_property
    def freed_nodes(self) -> dict[tuple, tuple[dict[str, int], dict[str, int]]]:
        return {}  # FreedWorld.key -> (milli-GPUs the stopping jobs free by node, less the pipelined ahead's; the pipelined ahead's by node)

    @cached_property
    def freed_extra(self) -> dict[tuple, dict[str, int]]:
        return {}  # (FreedWorld.key, a task's milli-GPU) -> by site, the tasks what is being freed adds

    def _freed_nodes(self, world: FreedWorld) -> tuple[dict[str, int], dict[str, int]]:
        hit = self.freed_nodes.get(world.key)
        if hit is None:
            on_node = _gpus_on_nodes(self.stopping)
            ahead_on: dict[str, int] = {}
            for spec, placed in world.ahead:
                for p in placed:
                    if p.mig is None:
                        ahead_on[p.node] = ahead_on.get(p.node, 0) + spec.per_task.gpu_milli
            for n, g in ahead_on.items():
                if n in on_node:
                    on_node[n] -= g
            hit = self.freed_nodes[world.key] = (on_node, ahead_on)
        return hit

    def _freed_extra(self, world: FreedWorld, per: int) -> dict[str, int]:
        key = (world.key, per)
        hit = self.freed_extra.get(key)
        if hit is None:
            hit = self.freed_extra[key] = self._extra_tasks(self._freed_nodes(world)[0], per)
        return hit

    def _with_victims(self, extra: dict[str, int], world: FreedWorld, victims: list[RunningJob], per: int) -> dict[str, int]:
        """`extra` with the `victims`' GPUs back too: only their nodes' share changes."""
        on_node, ahead_on = self._freed_nodes(world)
        extra = dict(extra)
        for n, g in _gpus_on_nodes(victims).items():
            st = self.cluster.nodes.get(n)
            if st is None:
                continue
            site, had = st.node.site, on_node.get(n)
            if had is not None:
                extra[site] -= (st.free_gpu_milli + had) // per
            extra[site] = extra.get(site, 0) + (st.free_gpu_milli + (had if had is not None else -ahead_on.get(n, 0)) + g) // per
        return extra

    def _extra_tasks(self, on_node: dict[str, int], per: int) -> dict[str, int]:
        """By site, how many more tasks of `per` milli-GPU the nodes would hold with `on_node`'s GPUs back."""
        extra: dict[str, int] = {}
        for n, g in on_node.items():
            st = self.cluster.nodes.get(n)
            if st is not None:
                extra[st.node.site] = extra.get(st.node.site, 0) + (st.free_gpu_milli + g) // per
        return extra

    def _freed_suffices(self, job: JobSpec, sites: list[str], world: FreedWorld) -> bool:
        """Would `job` pass quota and place in `world` with what is being freed alone? For a
        pipelined job, what its world's pass found; else (or where it found no place) a dry run."""
        hit = self.freed_fits.get(world.key)
        if hit is not None and hit[0] == job.id and hit[1] == tuple(sites) and hit[2] is not None:
            self.last_fit = (job.id, *hit[2])
            return True
        return self._fits_without(job, sites, [], world)

    def _fits_without(self, job: JobSpec, sites: list[str], victims: list[RunningJob], world: FreedWorld) -> bool:
        """Would `job` pass quota and place in `world` (every stopping job gone, the jobs pipelined
        ahead of it placed) were the `victims` gone too? (A dry run: only the world stays.)"""
        if job.mig_profile is None and job.per_task.gpu_milli and not self._might_fit_without(job, sites, victims, world):
            return False
        world.apply()
        with self._without(victims):
            where = self._place_within_quota(job, sites)
            if where is not None:
                self.last_fit = (job.id, *where)
            return where is not None


def _gpus_on_nodes(jobs: Iterable[RunningJob]) -> dict[str, int]:
    """The milli-GPUs `jobs` hold on each node."""
    out: dict[str, int] = {}
    for v in jobs:
        for p in v.placements:
            out[p.node] = out.get(p.node, 0) + v.spec.per_task.gpu_milli
    return out
