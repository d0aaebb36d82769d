"""Step 2 of the cycle (see `federation.scheduler`): the order in which waiting jobs are weighed.

Queue heads in a heap by (borrows?, fair share down the queue's path, priority, submit time),
as KAI's and Kueue's fair sharing order them: a queue within its deserved share goes before one
that would borrow, and among borrowers the one whose subtree borrows least. A queue's key is
looked at again only when the usage in its top-level queue's subtree moved.
"""

from __future__ import annotations

import heapq
from functools import cached_property

from federation.model import JobSpec, PendingReason, Resources


class Ordering:
    """Mixed into `federation.scheduler._Cycle`: it reads the cycle's `snap`, `quota` and `now`,
    and writes the reasons of jobs it does not order (`pending`, `wake_at`)."""

    @cached_property
    def keys(self) -> dict[tuple[str, Resources], tuple[int, bool, tuple]]:
        return {}  # (queue, request) -> (its top queue's version, borrows?, fair-share key)

    def _order(self, skip: set[str]):
        """Yield pending jobs: queue heads by (borrows?, fair share, priority, submit)."""
        by_queue: dict[str, list[JobSpec]] = {}
        for j in self.snap.pending:
            if j.id in skip:
                continue
            if j.queue not in self.quota.queues or not self.quota.is_leaf(j.queue):
                self.pending[j.id] = PendingReason("UnknownQueue", f"queue {j.queue!r} is not a leaf queue of this federation", j.request())
                continue
            if j.not_before_s is not None and j.not_before_s > self.now:
                self.pending[j.id] = PendingReason("RetryBackoff", f"its last run failed; it runs again in {j.not_before_s - self.now:.0f} s, after its back-off", j.request())
                self.wake_at = min(self.wake_at or float("inf"), j.not_before_s)
                continue
            if self.snap.stopped and (by := self._stopped(j.queue)) is not None:
                self.pending[j.id] = PendingReason("QueuePaused", f"queue {by!r} is {'drained' if self.snap.stopped[by] == 'drain' else 'paused'}", j.request())
                continue
            by_queue.setdefault(j.queue, []).append(j)
        for jobs in by_queue.values():
            jobs.sort(key=lambda j: (-j.priority, j.submit_s, j.id), reverse=True)  # pop() from the end
        versions = self.quota.versions
        top = {q: self.quota.top(q) for q in by_queue}
        heap = [(self._key(jobs[-1]), q, versions[top[q]]) for q, jobs in by_queue.items()]
        heapq.heapify(heap)
        while heap:
            key, q, version = heapq.heappop(heap)
            jobs = by_queue[q]
            if not heap:  # the last queue with work: its own order is all that is left
                while jobs:
                    yield jobs.pop()
                return
            if version != versions[top[q]]:  # shares in its subtree moved since it was queued: it may no longer be first
                fresh = self._key(jobs[-1])
                if fresh > key and fresh > heap[0][0]:
                    heapq.heappush(heap, (fresh, q, versions[top[q]]))
                    continue
            yield jobs.pop()
            if jobs:
                heapq.heappush(heap, (self._key(jobs[-1]), q, versions[top[q]]))

    def _key(self, j: JobSpec) -> tuple:
        # alike for the jobs of a queue asking the same, while its subtree's usage stands: kept
        r = j.start_request
        version = self.quota.versions[self.quota.top(j.queue)]
        hit = self.keys.get((j.queue, r))
        if hit is None or hit[0] != version:
            borrows = self.quota.borrows(j.queue, r)
            hit = self.keys[(j.queue, r)] = (version, borrows, self.quota.order_key(j.queue, r) if borrows else ())
        return (hit[1], hit[2], -j.priority, j.submit_s, j.id)
