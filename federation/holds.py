"""Guarantees held on the sites a queue is kept to, and made ready before a window raises them.

The quota tree keeps idle guarantees free against the federation's whole capacity. For a queue
kept to some sites (an online queue on the IDC) that is not enough: while cloud nodes are up,
other queues could fill the IDC with the guarantee still free on paper, and the queue would get
it back only by preemption, a grace period later. So the idle part of such a queue's reserve
(its guarantee, or what its lending limit keeps; `quota.reserve_of`) is held on its own sites:
another queue's gang is placed there only while the free GPUs left still cover it.

Before a tidal window raises a reserve, the raised reserve is held from the window's
`prepare_s` ahead, and the work of other queues standing on it is preempted then (reason
`WindowPrepare`), so the capacity is idle when the window opens rather than a grace period
later. That holds for every queue: one kept to no sites is held on all of them until the window
opens (from then on the quota tree keeps its guarantee free, as for any queue). Victims are
taken borrowed work first, then lowest priority, then the least run time lost; never
non-preemptible jobs, and never so much that the victim's queue falls below its own reserve.

GPUs only: they are what is scarce; CPUs and memory stay with the quota tree's accounting. A
queue nested in a held queue with the same sites is covered by its ancestor's hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from federation.cluster import ClusterState
from federation.mig.catalog import profile_gpu_milli
from federation.model import RunningJob
from federation.quota import QuotaTree


@dataclass
class Hold:
    queue: str
    sites: frozenset[str] | None  # None: every site
    reserve_milli: int  # the larger of its reserve now and the one a window about to open gives
    raising: bool  # a window about to open raises it: make it ready now
    free_milli: int = 0  # free GPU capacity on its sites, kept current through the cycle


class Holds:
    def __init__(self, quota: QuotaTree, cluster: ClusterState, upcoming: Mapping[str, int]):
        self.quota = quota
        self.holds: list[Hold] = []
        for name, q in quota.queues.items():
            parent = quota.queues.get(q.parent) if q.parent else None
            if parent is not None and parent.sites == q.sites:
                continue
            now = quota.reserve[name].gpu_milli
            ahead = upcoming.get(name, 0)
            if q.sites is None and ahead > now:
                self.holds.append(Hold(name, None, ahead, True))
            elif q.sites is not None and max(now, ahead) > 0:
                self.holds.append(Hold(name, frozenset(q.sites), max(now, ahead), ahead > now))
        for h in self.holds:
            # idle MIG instances are not counted: they are of the profiles the MIG manager chose,
            # and a hold met by them would leave nothing for the queue's whole-GPU work
            h.free_milli = free_gpu_milli(cluster, h.sites, mig=False)

    def __bool__(self) -> bool:
        return bool(self.holds)

    def held(self, h: Hold) -> int:
        """What is still to be kept idle for `h`: its reserve less what it uses."""
        return max(0, h.reserve_milli - self.quota.usage[h.queue].gpu_milli)

    def blocker(self, queue: str, site: str, gpu_milli: int) -> Hold | None:
        """The hold that placing `gpu_milli` of `queue`'s work on `site` would eat into, if any."""
        path = self.quota.path(queue)
        for h in self.holds:
            if _on(h, site) and h.queue not in path and h.free_milli - gpu_milli < self.held(h):
                return h
        return None

    def placed(self, site: str, gpu_milli: int) -> None:
        for h in self.holds:
            if _on(h, site):
                h.free_milli -= gpu_milli

    def prepare(self, running: Sequence[RunningJob], stopping: set[str], budget: int) -> list[RunningJob]:
        """Victims that make a raised reserve idle (jobs already stopping, or in `stopping`, count as freed)."""
        out: list[RunningJob] = []
        chosen = set(stopping)
        for h in self.holds:
            if not h.raising:
                continue
            on_sites = [r for r in running if _on(h, r.site) and h.queue not in self.quota.path(r.spec.queue)]
            short = self.held(h) - h.free_milli - sum(r.usage.gpu_milli for r in on_sites if r.preempting or r.spec.id in chosen)
            cands = sorted((r for r in on_sites if r.spec.preemptible and not r.preempting and r.spec.id not in chosen),
                           key=lambda r: (not self.quota.borrowing(r.spec.queue), r.spec.priority, -r.started_s, r.spec.id))
            taken: dict[str, int] = {}
            for r in cands:
                if short <= 0 or len(out) >= budget:
                    break
                q = r.spec.queue
                gone = taken.get(q, 0) + r.usage.gpu_milli
                if any(self.quota.usage[a].gpu_milli - gone < self.quota.reserve[a].gpu_milli for a in self.quota.path(q)):
                    continue  # would take the victim's queue below its own reserve
                taken[q] = gone
                out.append(r)
                chosen.add(r.spec.id)
                short -= r.usage.gpu_milli
        return out


def _on(h: Hold, site: str) -> bool:
    return h.sites is None or site in h.sites


def free_gpu_milli(cluster: ClusterState, sites: frozenset[str] | None, mig: bool = True) -> int:
    """Free GPU capacity on schedulable nodes of `sites` (None: all): free space on GPUs used
    whole or shared, and (with `mig`) idle MIG instances."""
    free = cluster.site_free_milli
    total = sum(free.values()) if sites is None else sum(free.get(s, 0) for s in sites)
    if mig:
        for st in cluster.representatives(None if sites is None else set(sites)):
            if st.mig_free:
                total += len(cluster.groups[st.sig]) * sum(profile_gpu_milli(p) or 0 for _, p, _ in st.mig_free)
    return total
