"""What several jobs count on of the capacity being freed (`federation.preempting`'s dry runs).

A job whose victims are stopping, or that waits because others' victims free enough for it too,
owns a part of what they free until it runs. KAI pipelines such a job onto the releasing
capacity: the next job weighs only what is left. Without it, of ten queues reclaiming from one
borrower each counted the first one's victims as enough for itself and waited: one reclaim per
grace period. Here each such job is placed, in the order it claimed, in the state where every
stopping job has stopped (`Pipelining._freed_upto`), and a job's victim search weighs in that state
(`FreedWorld`).
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import cached_property

from federation.model import JobSpec, RunningJob, TaskPlacement
from federation.placement import place_gang


class Pipelining:
    """Mixed into `federation.scheduler._Cycle` (through `Preempting`): it reads and writes the
    cycle's state (`quota`, `cluster`, `stopping`, `freeing`, `admissions`, `held`, `blocked`)."""

    @cached_property
    def pipelined(self) -> list[JobSpec]:
        """Jobs that wait for capacity being freed (by their own victims, or by others' that free
        enough for them too), in the order they claimed it: earlier cycles' first. In a dry run
        each takes its part before the job weighed does (those after that job counted on its
        part being taken)."""
        order = [*self.claimed, *(j for j in self.freeing if j not in self.claimed)]
        wanted = set(order)
        specs = {j.id: j for j in self.snap.pending if j.id in wanted}
        return [specs[j] for j in order if j in specs]

    @cached_property
    def claimed(self) -> dict[str, tuple[TaskPlacement, ...]]:
        """Places the last cycle's pipelined jobs claimed that are still being freed (see
        `_start_pipelined`)."""
        return {}

    def _start_pipelined(self) -> set[str]:
        """The last cycle's pipelined jobs start first, in the order they claimed, on the places
        they claimed, once those are free (KAI binds a pipelined job to what its victims
        release): in fair-share order, a job ordered before one took what was freed for it, as
        its strategy placed it, and that one preempted again. A job whose places are still being
        freed keeps them (`claimed`); one whose places went otherwise (a node gone, taken, its
        quota refusing) weighs again as any job."""
        pending = {j.id: j for j in self.snap.pending if j.id in self.snap.pipelined}
        stopping_on = {p.node for r in self.stopping for p in r.placements}
        started = set()
        for job_id, places in self.snap.pipelined.items():
            spec = pending.get(job_id)
            site = self.cluster.nodes[places[0].node].node.site if places[0].node in self.cluster.nodes else None
            if (spec is None or site is None or site in self.snap.unreachable or spec.queue not in self.quota.queues
                    or self._stopped(spec.queue) is not None):
                continue
            if not self.cluster.can_take(spec, places):
                if stopping_on.intersection(p.node for p in places):
                    self.claimed[job_id] = places
                continue
            if self._start_at(spec, site, places):
                started.add(job_id)
        return started

    def _claims_kept(self) -> dict[str, tuple[TaskPlacement, ...]]:
        """For the next cycle: where each job whose own victims still stop goes once they have.
        (A job that only counts on others' victims keeps no claim: its place is weighed again in
        fair-share order, or a borrower's would start ahead of lenders.)"""
        if not (self.stopping and self.pipelined):
            return {}
        _, ahead = self._freed_upto(len(self.pipelined))
        return {spec.id: tuple(placed) for spec, placed in ahead if spec.id in self.freeing}

    #: (job, site, placements) of the last dry run `job` passed (`_fits_without`)
    last_fit: tuple[str, str, list[TaskPlacement]] | None = None

    def _pipeline(self, job: JobSpec, victims: list[RunningJob]) -> None:
        """`job` takes its part of what is being freed, where its last dry run placed it; its
        `victims` (if any) stop. The state the next job counts on follows from the last one's
        without a dry run: each of many preemptors in a cycle redid every one before it."""
        if any(j.id == job.id for j in self.pipelined):  # an earlier cycle's: its part is worked out in _freed_upto
            self.stopping.extend(victims)
            return
        before = self.freed_states.get(self._freed_key(len(self.pipelined))) if self.stopping else (dict(self.cluster.site_free_milli), [])
        self.stopping.extend(victims)
        self.pipelined.append(job)
        if before is not None and self.last_fit is not None and self.last_fit[0] == job.id:
            _, site, placed = self.last_fit
            placed = placed[:self._elastic_cap(job).tasks]  # an elastic gang grows only within its deserved share
            free, ahead = dict(before[0]), before[1]
            for v in victims:  # whole GPUs only: MIG instances are not counted there
                if v.spec.mig_profile is None:
                    free[v.site] = free.get(v.site, 0) + v.usage.gpu_milli
            if job.mig_profile is None:
                free[site] = free.get(site, 0) - job.per_task.gpu_milli * len(placed)
            self.freed_states[self._freed_key(len(self.pipelined))] = (free, [*ahead, (job, placed)])

    @cached_property
    def freed_states(self) -> dict[tuple, tuple[dict[str, int], list[tuple[JobSpec, list[TaskPlacement]]]]]:
        return {}  # see _freed_upto

    def _ahead_of(self, job: JobSpec) -> int:
        """How many pipelined jobs take their part before `job` does. Looked up: every job that
        weighs preempting asks (a scan each was a tenth of a tick with 300 pipelined). The list
        only grows, but for a pipelined job admitted, which the count of admissions shows."""
        n = len(self.pipelined)
        made_at, places = self._places
        if made_at != (n, len(self.admissions)):
            self._places = ((n, len(self.admissions)), {j.id: i for i, j in enumerate(self.pipelined)})
            places = self._places[1]
        return places.get(job.id, n)

    @cached_property
    def _places(self) -> tuple[tuple[int, int] | None, dict[str, int]]:
        return None, {}  # see _ahead_of: (the pipelined count, the admissions count) it was made at; job -> its place

    def _freed_upto(self, ahead: int) -> tuple[dict[str, int], list[tuple[JobSpec, list[TaskPlacement]]]]:
        """What a job may count on once every stopping job has stopped and the first `ahead`
        pipelined jobs (those ahead of it: all, if it is not pipelined) have taken their part: the
        free GPUs per site then, and where those jobs go (fixed, as KAI's pipelined tasks are: more
        victims only free more). Worked out once per state of the cycle and shared by every job
        that looks; within a cycle the counts in the key only grow, but for pipelined jobs that
        start (admissions). Each job placed takes what the ones before it left, so one pass gives
        every `ahead` at once (each pipelined job asks for its own: a pass each was quadratic)."""
        hit = self.freed_states.get(self._freed_key(ahead))
        if hit is not None:
            return hit
        grown = [self._elastic_cap(other) for other in self.pipelined]  # as they will start: within deserved
        placed_ahead: list[tuple[JobSpec, list[TaskPlacement]]] = []
        with self._without([], stopping=True):
            for k, other in enumerate(grown):
                state = (dict(self.cluster.site_free_milli), list(placed_ahead))
                if self.freed_states.setdefault(self._freed_key(k), state) is state:  # the world job k weighs in is this pass's
                    self._weigh_here(self.pipelined[k], self._freed_key(k))
                mine = self.claimed.get(other.id)
                if mine is not None and self.cluster.can_take(other, mine):  # where it claimed last cycle
                    self.cluster.apply(other, mine)
                    placed = list(mine)
                else:
                    # a preemptor goes where its own victims free, not where others' do (as it is admitted)
                    blocked = self._blocked_for(other) | (self._freed_for_others(other) if other.id in self.freeing else frozenset())
                    placed = next((p for site in self._reachable_for(other)
                                   if (p := place_gang(self.cluster, other, site, self.strategy, self.policies.placement.gang_topology,
                                                       blocked)) is not None), None)
                if placed is not None:  # else it no longer fits: it weighs again when its turn comes
                    placed_ahead.append((other, placed))
                    self.quota.add(other.queue, other.per_task.times(len(placed)), 1, other.preemptible)  # as FreedWorld puts it on
            self.freed_states.setdefault(self._freed_key(len(grown)), (dict(self.cluster.site_free_milli), list(placed_ahead)))
            for other, placed in reversed(placed_ahead):
                self.quota.add(other.queue, other.per_task.times(len(placed)), -1, other.preemptible)
                self.cluster.apply(other, placed, -1)
        return self.freed_states[self._freed_key(ahead)]

    @cached_property
    def freed_fits(self) -> dict[tuple, tuple[str, tuple[str, ...], tuple[str, list[TaskPlacement]] | None]]:
        return {}  # _freed_key -> (the pipelined job that weighs in that world, its sites, where it would place there or None)

    def _weigh_here(self, job: JobSpec, key: tuple) -> None:
        """In the pass, with the world of `key` on the quota tree and the nodes: would the pipelined
        `job` pass quota and place with what is being freed (`_freed_suffices`)? Each such job asked
        it by putting its own world on and taking it off again: a cycle grew with the pipelined jobs
        times the jobs stopping."""
        sites = self._reachable_for(job)
        self.freed_fits[key] = (job.id, tuple(sites), self._place_within_quota(job, sites))

    def _place_within_quota(self, job: JobSpec, sites: list[str]) -> tuple[str, list[TaskPlacement]] | None:
        """Where `job` would place in the state as it is now, if its quota lets it (a dry run's
        question: nothing stays placed)."""
        if not self.quota.check(job.queue, job.start_request, job.preemptible).ok:
            return None
        return self._could_place(job, sites, self._blocked_for(job))

    def _freed_key(self, ahead: int) -> tuple:
        return (len(self.stopping), ahead, len(self.admissions), len(self.held), len(self.blocked))

    @cached_property
    def _gone(self) -> tuple[int, dict[str, list[int]]]:
        return 0, {}  # see _stopping_sums: how many stopping jobs are summed, and their sums

    def _stopping_sums(self) -> dict[str, list[int]]:
        """The quota tree's changes that take every stopping job off (`QuotaTree.sums`), kept as
        victims are added (stopping only grows within a cycle): summed afresh for each dry run
        and each reclaim candidate, they made a cycle grow with the jobs stopping."""
        counted, sums = self._gone
        if counted < len(self.stopping):
            sums = self.quota.sums(((v.spec.queue, v.usage, -1, v.spec.preemptible) for v in self.stopping[counted:]), sums)
            self._gone = (len(self.stopping), sums)
        return sums

    @contextmanager
    def _without(self, gone: list[RunningJob], placed: list[tuple[JobSpec, list[TaskPlacement]]] = (), stopping: bool = False):
        """A dry run's state: the `gone` jobs off the quota tree and the nodes, the `placed` ones
        on; restored on leaving. `stopping`: every stopping job is gone too."""
        sums = self.quota.sums([*((v.spec.queue, v.usage, -1, v.spec.preemptible) for v in gone),
                                *((spec.queue, spec.per_task.times(len(p)), 1, spec.preemptible) for spec, p in placed)],
                               self._stopping_sums() if stopping else None)
        quota = self.quota.shift(sums)
        try:
            off = [*self.stopping, *gone] if stopping else gone
            nodes = self.cluster.shift([*((v.spec, v.placements, -1) for v in off), *((spec, p, 1) for spec, p in placed)])
            try:
                yield
            finally:
                self.cluster.restore(nodes)
        finally:
            self.quota.restore(quota)


class FreedWorld:
    """The state a job's victim search weighs in: every stopping job gone and the jobs pipelined
    ahead of it placed (`Pipelining._freed_upto`). Put on the quota tree and the nodes at the search's
    first dry run and kept until it ends, so each dry run takes off only its own victims (each
    took every stopping job off and put every pipelined one on: most of an incremental cycle)."""

    def __init__(self, cycle: Pipelining, job: JobSpec):
        self.cycle = cycle
        if cycle.stopping:
            ahead = cycle._ahead_of(job)
            self.free, self.ahead = cycle._freed_upto(ahead)
        else:
            ahead, self.free, self.ahead = 0, cycle.cluster.site_free_milli, []
        self.key = cycle._freed_key(ahead)  # the state of the cycle it was worked out for
        self.usage = cycle.quota.usage  # the queues' usage as it is: a copy once the world is on
        self.applied = False
        self._on = None

    def apply(self) -> None:
        if self.applied:
            return
        self.applied = True
        if self.cycle.stopping or self.ahead:
            self.usage = dict(self.cycle.quota.usage)
            self._on = self.cycle._without([], self.ahead, stopping=True)
            self._on.__enter__()

    def close(self) -> None:
        if self._on is not None:
            self._on.__exit__(None, None, None)
            self._on = None
