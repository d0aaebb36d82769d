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

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from federation.model import JobSpec, RunningJob


@dataclass(frozen=True)
class Candidate:
    job: RunningJob
    reason: str  # Reclaim | Priority | ReclaimWhileBorrowing


@dataclass(frozen=True)
class Reclaimable:
    """Running gangs of queues above their deserved share, on some sites: the victims reclaim
    may take, whoever reclaims. The same for every job that weighs reclaim until the quota tree
    changes, so the cycle builds it once for them all (each job listing and sorting every
    running gang made an incremental cycle at 8,500 running take half a second)."""

    ordered: list[RunningJob]  # best victim first: lowest priority, then least run time lost, then fewest GPUs
    young: list[RunningJob]  # started after `reclaimable_from` (too young to reclaim yet), earliest first


def reclaimable(running: Iterable[RunningJob], sites: set[str], reclaimable_from: float = float("inf")) -> Reclaimable:
    """`running`: the jobs of the queues that borrow now."""
    ordered, young = [], []
    for r in running:
        if r.preempting or not r.spec.preemptible or r.site not in sites:
            continue
        (young if r.started_s > reclaimable_from else ordered).append(r)
    ordered.sort(key=_victim_order)
    young.sort(key=lambda r: r.started_s)
    return Reclaimable(ordered, young)


def _victim_order(r: RunningJob) -> tuple:
    return (r.spec.priority, -r.started_s, r.spec.per_task.gpu_milli * len(r.placements), r.spec.id)


def candidates(job: JobSpec, own: Sequence[RunningJob], others: Reclaimable | None, own_path: set[str], sites: set[str], within_deserved: bool,
               borrow_max_priority: int | None = None) -> tuple[Iterator[Candidate], float | None]:
    """Running gangs that `job` may displace, best victim first (lazily: victims are chosen from
    the front); and, when reclaim passed over jobs too young to reclaim, the earliest start among
    them. `own`: its queue's running jobs; `others`: what reclaim may take (None: no reclaim).
    `borrow_max_priority`: lets a job that would borrow take others' borrowed work below its
    priority and at most this one."""

    def kind(r: RunningJob) -> str | None:
        if r.spec.queue in own_path:
            return None
        if within_deserved:  # the lender (job's queue) is within its share; the victim's queue is above its own
            return "Reclaim"
        if borrow_max_priority is not None and r.spec.priority < job.priority and r.spec.priority <= borrow_max_priority:
            return "ReclaimWhileBorrowing"
        return None

    lower = sorted((r for r in own if not r.preempting and r.spec.preemptible and r.site in sites and r.spec.priority < job.priority), key=_victim_order)
    young = next((r.started_s for r in others.young if kind(r)), None) if others else None

    def ordered() -> Iterator[Candidate]:
        for r in others.ordered if others else ():
            if (k := kind(r)) is not None:
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
