"""Victim selection: the fewest running gangs whose removal lets a pending gang start.

Three kinds, as in Kueue and Volcano:
- Reclaim: a queue within its deserved share takes back capacity lent to queues above theirs.
- Priority: inside one queue, a higher priority class displaces lower ones.
- ReclaimWhileBorrowing (Kueue's borrowWithinCohort, off unless configured): a job that would
  borrow takes borrowed work of lower priority (up to a threshold) from other queues.
Candidates are ordered borrowed work first, then lowest priority, then least run time lost
(latest started), then fewest GPUs (of jobs that started together, the smaller loses less); a
victim gang is always preempted whole; non-preemptible jobs never are.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from heapq import heapify, heappop

from federation.model import JobSpec, RunningJob


@dataclass(frozen=True)
class Candidate:
    job: RunningJob
    reason: str  # Reclaim | Priority | ReclaimWhileBorrowing


class Reclaimable:
    """Running gangs of queues above their deserved share, on some sites: the victims reclaim
    may take, whoever reclaims. The same for every job that weighs reclaim until the quota tree
    or the running jobs change, so it is built once for them all (each job listing and sorting
    every running gang made an incremental cycle at 8,500 running take half a second), and kept
    across cycles while nothing changes (`RunningIndex`): which are too young to take is asked
    at each cycle's time.

    Put in order lazily: victim searches look at the front, so the gangs wait in a heap and are
    popped into `ordered` as far as some search has read. Sorting all of them was most of the
    first incremental cycle after any change (8,000 gangs: 12 ms of 27; 60,000: 0.18 s)."""

    def __init__(self, running: Iterable[RunningJob], sites: set[str]):
        self._heap = [(_victim_order(r), i, r) for i, r in enumerate(running)  # i: jobs are never compared
                      if not r.preempting and r.spec.preemptible and r.site in sites]
        heapify(self._heap)
        self._ordered: list[RunningJob] = []
        self._latest = max((e[2].started_s for e in self._heap), default=float("-inf"))

    def ordered(self) -> Iterator[RunningJob]:
        """Best victim first: lowest priority, then least run time lost, then fewest GPUs."""
        i = 0
        while True:
            if i == len(self._ordered):
                if not self._heap:
                    return
                if i > len(self._heap):  # read this far, the rest is cheaper sorted in one go
                    self._ordered += [e[2] for e in sorted(self._heap)]
                    self._heap.clear()
                else:
                    self._ordered.append(heappop(self._heap)[2])
            yield self._ordered[i]
            i += 1

    def any(self) -> bool:
        return bool(self._heap or self._ordered)

    def started_after(self, after: float) -> bool:
        """Whether any of the gangs started later than `after` (`first_start_after` can find one)."""
        return after < self._latest

    def first_start_after(self, after: float, takes: Callable[[RunningJob], bool]) -> float | None:
        """The earliest start later than `after` among the gangs `takes` accepts."""
        if not self.started_after(after):  # none started later: no need to sort them by start
            return None
        by_start, starts = self._by_start
        return next((by_start[i].started_s for i in range(bisect_right(starts, after), len(by_start)) if takes(by_start[i])), None)

    @cached_property
    def _by_start(self) -> tuple[list[RunningJob], list[float]]:
        every = sorted([*self._ordered, *(e[2] for e in self._heap)], key=lambda r: r.started_s)
        return every, [r.started_s for r in every]


class RunningIndex:
    """What preemption derives from the running jobs: by queue, and what reclaim may take per set
    of sites. A `CycleState` keeps it from cycle to cycle while the running jobs are the same
    tuple and the quota tree has not changed (the simulator's running tuple is one object until
    a job starts, stops or changes; live, `federation.live_state` hands the last tuple on while
    no running job changed): rebuilt for each incremental cycle, it was half of one."""

    def __init__(self, running: tuple[RunningJob, ...], quota: object, changes: int):
        self.running, self.quota, self.changes = running, quota, changes
        self.by_queue: dict[str, list[RunningJob]] = {}
        for r in running:
            self.by_queue.setdefault(r.spec.queue, []).append(r)
        self.reclaim: dict[tuple, Reclaimable] = {}  # (sites, admissions so far in the cycle) -> what reclaim may take there

    def holds_for(self, running: tuple[RunningJob, ...], quota: object, changes: int) -> bool:
        return running is self.running and quota is self.quota and changes == self.changes


def _victim_order(r: RunningJob) -> tuple:
    return (r.spec.priority, -r.started_s, r.spec.per_task.gpu_milli * len(r.placements), r.spec.id)


def candidates(job: JobSpec, own: Sequence[RunningJob], others: Reclaimable | None, own_path: set[str], sites: set[str], within_deserved: bool,
               borrow_max_priority: int | None = None, reclaimable_from: float = float("inf")) -> tuple[Iterator[Candidate], float | None]:
    """Running gangs that `job` may displace, best victim first (lazily: victims are chosen from
    the front); and, when reclaim passed over jobs too young to reclaim (started after
    `reclaimable_from`), the earliest start among them. `own`: its queue's running jobs;
    `others`: what reclaim may take (None: no reclaim). `borrow_max_priority`: lets a job that
    would borrow take others' borrowed work below its priority and at most this one."""

    def kind(r: RunningJob) -> str | None:
        if r.spec.queue in own_path:
            return None
        if within_deserved:  # the lender (job's queue) is within its share; the victim's queue is above its own
            return "Reclaim"
        if borrow_max_priority is not None and r.spec.priority < job.priority and r.spec.priority <= borrow_max_priority:
            return "ReclaimWhileBorrowing"
        return None

    lower = sorted((r for r in own if not r.preempting and r.spec.preemptible and r.site in sites and r.spec.priority < job.priority), key=_victim_order)
    young = others.first_start_after(reclaimable_from, kind) if others else None

    def ordered() -> Iterator[Candidate]:
        for r in others.ordered() if others else ():
            if r.started_s <= reclaimable_from and (k := kind(r)) is not None:
                yield Candidate(r, k)
        for r in lower:  # after all borrowed work: a queue's own lower priorities go last
            yield Candidate(r, "Priority")

    return ordered(), young


def select_victims(
    cands: Iterable[Candidate],
    fits_without: Callable[[list[RunningJob]], bool],
    still_borrowing: Callable[[RunningJob, list[RunningJob]], bool],  # victim's queue, the others gone
    keeps_share: Callable[[RunningJob, list[RunningJob]], bool],  # victim's queue keeps its deserved, it and the others gone
    max_victims: int,
) -> list[Candidate] | None:
    """The fewest candidates, in order, whose removal makes `fits_without` true, or None.

    Greedy in candidate order, then a pass that drops any victim not needed (Kueue's minimal
    set). A reclaim victim is taken only while its queue is still borrowing once the victims
    already chosen are gone, so reclaim takes back what was lent and little more; one taken by a
    job that borrows itself, only if its queue keeps its deserved share without it (else that
    queue would be entitled to reclaim it back at once).
    """
    chosen: list[Candidate] = []
    for c in cands:
        if len(chosen) >= max_victims:
            return None
        if c.reason == "Reclaim" and not still_borrowing(c.job, [v.job for v in chosen]):
            continue
        if c.reason == "ReclaimWhileBorrowing" and not (still_borrowing(c.job, [v.job for v in chosen])
                                                         and keeps_share(c.job, [v.job for v in chosen])):
            continue
        chosen.append(c)
        if fits_without([v.job for v in chosen]):
            break
    else:
        return None
    for c in list(reversed(chosen)):
        rest = [v for v in chosen if v is not c]
        if rest and fits_without([v.job for v in rest]):
            chosen = rest
    return chosen
