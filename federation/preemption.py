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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from federation.model import JobSpec, RunningJob
from federation.quota import QuotaTree


@dataclass(frozen=True)
class Candidate:
    job: RunningJob
    reason: str  # Reclaim | Priority | ReclaimWhileBorrowing


def candidates(job: JobSpec, running: Sequence[RunningJob], quota: QuotaTree, sites: set[str], reclaim: bool, within_deserved: bool,
               reclaimable_from: float = float("inf"), borrow_max_priority: int | None = None) -> tuple[list[Candidate], float | None]:
    """Running gangs that `job` may displace, best victim first; and, when reclaim passed over
    jobs that started after `reclaimable_from` (too young to reclaim), the earliest start among them.
    `borrow_max_priority`: lets a job that would borrow take others' borrowed work below its
    priority and at most this one."""
    own_path = set(quota.path(job.queue))
    out: list[tuple[tuple, Candidate]] = []
    young: float | None = None
    for r in running:
        if r.preempting or not r.spec.preemptible or r.site not in sites:
            continue
        if r.spec.queue == job.queue:
            if r.spec.priority < job.priority:
                out.append(((1, r.spec.priority, -r.started_s, r.usage.gpu_milli, r.spec.id), Candidate(r, "Priority")))
        elif reclaim and r.spec.queue not in own_path and quota.borrowing(r.spec.queue):
            if within_deserved:  # the lender (job's queue) is within its share; the victim's queue is above its own
                kind = "Reclaim"
            elif borrow_max_priority is not None and r.spec.priority < job.priority and r.spec.priority <= borrow_max_priority:
                kind = "ReclaimWhileBorrowing"
            else:
                continue
            if r.started_s > reclaimable_from:
                young = r.started_s if young is None else min(young, r.started_s)
                continue
            out.append(((0, r.spec.priority, -r.started_s, r.usage.gpu_milli, r.spec.id), Candidate(r, kind)))
    out.sort(key=lambda t: t[0])
    return [c for _, c in out], young


def select_victims(
    cands: list[Candidate],
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
