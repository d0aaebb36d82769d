"""The queue tree: guarantee, deserved, capability, borrowing and lending, fair share.

Per resource, for a queue n with usage U (its subtree's running jobs), guarantee G, deserved D,
capability C, borrowing limit B and lending limit L:

- reserve(n) = min(D, max(G, D - L)) is what n holds even when idle: its guarantee is never
  lent, and a lending limit keeps the part of D above it from being lent either.
- held(leaf) = max(U, reserve); held(parent) = max(sum of held(children), reserve(parent)).
- A job adding r to leaf q is admissible when, on every queue a from q to the top,
  U(a) + r <= C(a) (capability, descendants included) and U(a) + r <= D(a) + B(a) (borrowing
  limit), and at the root the sum of held(top-level queues) stays within the federation's
  capacity (the GPUs, CPUs and memory of the nodes that exist now). So idle guarantees stay
  free for their owners, and everything else is shared.
- The job borrows when U(a) + r > D(a) somewhere on the path. Borrowed capacity is reclaimable:
  a queue within its deserved share that cannot start may preempt borrowers
  (`federation.preemption`).
- Fair share (Kueue's fair sharing, Volcano's DRF): share(n) = max over resources of
  max(0, U - D) / capacity, divided by weight. Borrowers are served lowest share first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from federation.errors import SnapshotError
from federation.model import UNLIMITED, ZERO, Queue, Resources


@dataclass(frozen=True)
class Verdict:
    ok: bool
    borrowing: bool = False
    pool: bool = False  # refused only because others' guarantees hold the rest of the capacity
    code: str = ""  # ExceedsCapability | WaitingForQuota when not ok
    message: str = ""
    free: Resources | None = None  # headroom at the binding level


ADMIT, ADMIT_BORROWING = Verdict(True), Verdict(True, borrowing=True)  # made once: most checks in a full cycle pass


class QuotaTree:
    def __init__(self, queues: Sequence[Queue], capacity: Resources):
        self.queues = {q.name: q for q in queues}
        self.capacity = capacity
        self.children: dict[str, list[str]] = {q.name: [] for q in queues}
        for q in queues:
            if q.parent is not None:
                if q.parent not in self.queues:
                    raise SnapshotError(f"queue {q.name!r} has unknown parent {q.parent!r}")
                self.children[q.parent].append(q.name)
        self.tops = [q.name for q in queues if q.parent is None]
        # per queue, (capability, deserved, deserved + borrowing limit) as plain integers: `check`
        # runs for every job of every cycle, tens of thousands a cycle at scale
        self._limits = {q.name: tuple(x.as_tuple() for x in (q.capability, q.deserved, q.deserved + q.borrowing_limit)) for q in queues}
        self._paths = {q.name: self._path(q.name) for q in queues}
        self._top_down = {n: p[::-1] for n, p in self._paths.items()}
        self.usage: dict[str, Resources] = {q.name: Resources() for q in queues}
        self.root_usage = Resources()  # the sum of the top-level queues' usage, kept as it changes (every check reads it)
        self.fixed: dict[str, Resources] = {q.name: Resources() for q in queues}  # of it, what non-preemptible jobs use
        self.past: dict[str, float] = {}  # queue -> its weighted past share of the GPUs (time-aware fair share)
        self.jobs: dict[str, int] = {q.name: 0 for q in queues}  # running jobs, each counted up its path
        # usage changes per top-level queue: a fair-share key (a function of the usage in its
        # top-level queue's subtree) computed at the same version still holds
        self.versions: dict[str, int] = dict.fromkeys(self.tops, 0)
        self.changes = 0  # every usage change, dry runs' too: what is derived from usage holds while it stands
        self.reserve = {q.name: reserve_of(q) for q in queues}
        self.held: dict[str, Resources] = {}
        self.kids_held: dict[str, Resources] = {}  # sum of held over the children, per parent
        for t in self.tops:
            self._recompute_held(t)
        self.root_held = sum((self.held[t] for t in self.tops), Resources())

    def top(self, name: str) -> str:
        """The top-level queue above `name` (or `name` itself)."""
        return self._paths[name][-1]

    def _path(self, name: str) -> tuple[str, ...]:
        out, cur = [], name
        while cur is not None:
            if cur in out:
                raise SnapshotError(f"queue {name!r} is its own ancestor")
            out.append(cur)
            cur = self.queues[cur].parent
        return tuple(out)

    def _recompute_held(self, name: str) -> Resources:
        kids = self.children[name]
        if kids:
            self.kids_held[name] = sum((self._recompute_held(c) for c in kids), Resources())
        base = self.kids_held[name] if kids else self.usage[name]
        self.held[name] = base.max(self.reserve[name])
        return self.held[name]

    def is_leaf(self, name: str) -> bool:
        return not self.children.get(name, True)

    def path(self, leaf: str) -> tuple[str, ...]:
        """The queue and its ancestors, leaf first."""
        return self._paths[leaf]

    # ---- usage ----

    def add(self, leaf: str, r: Resources, sign: int = 1, preemptible: bool = True) -> None:
        """One job's usage `r` starts (sign 1) or ends (-1) in `leaf`."""
        self.versions[self._paths[leaf][-1]] += 1
        self.changes += 1
        delta = r.times(sign)
        self.root_usage = self.root_usage + delta
        for a in self._paths[leaf]:
            self.usage[a] = self.usage[a] + delta
            self.jobs[a] += sign
            if not preemptible:
                self.fixed[a] = self.fixed[a] + delta
        self._refresh(leaf)

    def _refresh(self, leaf: str) -> None:
        """Carry a usage change of `leaf` up through held, to the root."""
        for a in self._paths[leaf]:
            self._carry(a)

    def _carry(self, a: str) -> None:
        """Queue `a`'s held from its usage (or its children's held) and its reserve, the change
        added to its parent's children's sum (or the root's); its children's must be current."""
        base = self.kids_held[a] if self.children[a] else self.usage[a]
        new = base.max(self.reserve[a])
        delta = new - self.held[a]
        self.held[a] = new
        parent = self.queues[a].parent
        if parent is None:
            self.root_held = self.root_held + delta
        else:
            self.kids_held[parent] = self.kids_held[parent] + delta

    def sums(self, changes: Iterable[tuple[str, Resources, int, bool]], base: dict[str, list[int]] | None = None) -> dict[str, list[int]]:
        """Several jobs' usage starting or ending (leaf, usage, sign, preemptible), summed per
        queue touched (with its ancestors) for `shift`: usage (gpu, cpu, memory), jobs,
        non-preemptible usage; added to `base` (left as it is), the sums of changes a caller
        shifts again and again (the stopping jobs, in each victim search)."""
        deltas: dict[str, list[int]] = {a: list(d) for a, d in base.items()} if base else {}
        for leaf, r, sign, preemptible in changes:
            g, c, m = r.gpu_milli * sign, r.cpu_milli * sign, r.memory_mib * sign
            for a in self._paths[leaf]:
                d = deltas.get(a)
                if d is None:
                    d = deltas[a] = [0] * 7
                d[0] += g
                d[1] += c
                d[2] += m
                d[3] += sign
                if not preemptible:
                    d[4] += g
                    d[5] += c
                    d[6] += m
        return dict(sorted(deltas.items(), key=lambda kv: len(self._paths[kv[0]]), reverse=True))  # children before parents

    def shift(self, deltas: dict[str, list[int]]) -> tuple:
        """`add` for several jobs at once (their `sums`, whose order puts children first), for a
        dry run: held is carried up once per queue touched, and `restore` copies the saved values
        back (undoing job by job, every dry run cost as much again)."""
        usage, jobs, fixed = self.usage, self.jobs, self.fixed
        saved_usage = {a: usage[a] for a in deltas}
        saved_jobs = {a: jobs[a] for a in deltas}
        saved_fixed = {a: fixed[a] for a in deltas}
        for a, (g, c, m, n, fg, fc, fm) in deltas.items():
            u = usage[a]
            usage[a] = Resources(u.gpu_milli + g, u.cpu_milli + c, u.memory_mib + m)
            jobs[a] += n
            if fg or fc or fm:
                f = fixed[a]
                fixed[a] = Resources(f.gpu_milli + fg, f.cpu_milli + fc, f.memory_mib + fm)
        root = self.root_usage
        for a, d in deltas.items():
            if self.queues[a].parent is None:
                root = Resources(root.gpu_milli + d[0], root.cpu_milli + d[1], root.memory_mib + d[2])
        saved = (saved_usage, saved_jobs, saved_fixed, {a: self.held[a] for a in saved_usage},
                 {a: self.kids_held[a] for a in saved_usage if self.children[a]}, self.root_usage, self.root_held)
        self.root_usage = root
        for a in deltas:  # children before parents
            self._carry(a)
        self._changed(saved_usage)
        return saved

    def restore(self, saved: tuple) -> None:
        """Undo a `shift`: what it touched as it was. The counters still move (what was derived
        during the dry run no longer holds)."""
        usage, jobs, fixed, held, kids_held, self.root_usage, self.root_held = saved
        self.usage.update(usage)
        self.jobs.update(jobs)
        self.fixed.update(fixed)
        self.held.update(held)
        self.kids_held.update(kids_held)
        self._changed(usage)

    def _changed(self, queues: Iterable[str]) -> None:
        for t in {self._paths[a][-1] for a in queues}:
            self.versions[t] += 1
        self.changes += 1

    # ---- admission ----

    def check(self, leaf: str, r: Resources, preemptible: bool = True) -> Verdict:
        """May `leaf` start a job using `r`? Non-preemptible work stays within deserved (KAI's
        rule, on its non-preemptible allocation): what a queue uses above its deserved share
        must be preemptible, so reclaim can always give lenders back their share. A queue may
        still borrow for a non-preemptible job while preemptible work of its own (or of its
        siblings) is what stands above the share."""
        borrowing, refused = False, None
        rg, rc, rm = r.gpu_milli, r.cpu_milli, r.memory_mib
        for a in self._paths[leaf]:
            q = self.queues[a]
            if q.max_running_jobs is not None and self.jobs[a] >= q.max_running_jobs:
                return Verdict(False, code="MaxRunningJobs", message=f"queue {a!r} runs {self.jobs[a]} jobs, its max_running_jobs")
            u = self.usage[a]
            ag, ac, am = u.gpu_milli + rg, u.cpu_milli + rc, u.memory_mib + rm
            (cg, cc, cm), (dg, dc, dm), (bg, bc, bm) = self._limits[a]
            if ag > cg or ac > cc or am > cm:
                return Verdict(False, code="ExceedsCapability", message=f"queue {a!r} would use {u + r} above its capability {q.capability}",
                               free=(q.capability - u).clip0())
            if ag > dg or ac > dc or am > dm:
                borrowing = True
                if ag > bg or ac > bc or am > bm:
                    return Verdict(False, borrowing=True, code="WaitingForQuota",
                                   message=f"queue {a!r} would borrow above its borrowing limit {q.borrowing_limit}",
                                   free=(q.deserved + q.borrowing_limit - u).clip0())
            if not preemptible and refused is None and not (fixed := self.fixed[a] + r).fits_in(q.deserved):
                refused = Verdict(False, borrowing=ag > dg or ac > dc or am > dm, code="NonPreemptibleOverQuota",
                                  message=f"queue {a!r} would run {fixed} of non-preemptible work, above its deserved {q.deserved}: "
                                          "what a queue uses above its share must stay reclaimable",
                                  free=(q.deserved - self.fixed[a]).clip0())
        if refused is not None:
            return refused
        # Guarantees and lending limits of others bind only while the job would physically fit;
        # beyond the nodes' capacity it is the placement's call (wait, reclaim, burst).
        ru, cap = self.root_usage, self.capacity
        physical = ru.gpu_milli + rg <= cap.gpu_milli and ru.cpu_milli + rc <= cap.cpu_milli and ru.memory_mib + rm <= cap.memory_mib
        if physical and not self._root_fits_after(leaf, rg, rc, rm):
            return Verdict(False, borrowing=borrowing, pool=True, code="WaitingForQuota",
                           message="the federation's capacity is held by other queues' usage and guarantees",
                           free=(self.capacity - self.root_held).clip0())
        return ADMIT_BORROWING if borrowing else ADMIT

    def _root_fits_after(self, leaf: str, rg: int, rc: int, rm: int) -> bool:
        """Would root held fit the capacity were (rg, rc, rm) added to `leaf`? The same walk as
        `_refresh`, without writing; in plain integers (every admission asks)."""
        u = self.usage[leaf]
        bg, bc, bm = u.gpu_milli + rg, u.cpu_milli + rc, u.memory_mib + rm
        dg = dc = dm = 0
        for i, a in enumerate(self._paths[leaf]):
            if i:  # a parent: its children's held, the change below carried in
                k = self.kids_held[a]
                bg, bc, bm = k.gpu_milli + dg, k.cpu_milli + dc, k.memory_mib + dm
            res, h = self.reserve[a], self.held[a]
            dg, dc, dm = max(bg, res.gpu_milli) - h.gpu_milli, max(bc, res.cpu_milli) - h.cpu_milli, max(bm, res.memory_mib) - h.memory_mib
        root, cap = self.root_held, self.capacity
        return root.gpu_milli + dg <= cap.gpu_milli and root.cpu_milli + dc <= cap.cpu_milli and root.memory_mib + dm <= cap.memory_mib

    def entitled(self, leaf: str, r: Resources) -> bool:
        """Would `leaf` fit `r` inside deserved on its whole path if every borrower gave back?

        This is the right to reclaim: a sibling's borrowing counts only up to its own deserved.
        """
        mine = self.usage[leaf] + r
        child = leaf
        for a in self._paths[leaf]:
            if a != leaf:
                others = sum(((self.usage[c]).min(self.queues[c].deserved) for c in self.children[a] if c != child), ZERO)
                mine = others + mine
                child = a
            if not mine.fits_in(self.queues[a].deserved):
                return False
        return True

    def within_deserved(self, name: str) -> bool:
        return self.usage[name].fits_in(self.queues[name].deserved)

    def borrowing(self, leaf: str) -> bool:
        """The queue or one of its ancestors uses more than its deserved share."""
        return any(not self.within_deserved(a) for a in self._paths[leaf])

    def borrows(self, leaf: str, r: Resources) -> bool:
        """Would adding `r` take `leaf` or an ancestor above its deserved share? (cheap)"""
        rg, rc, rm = r.gpu_milli, r.cpu_milli, r.memory_mib
        for a in self._paths[leaf]:
            u, d = self.usage[a], self.queues[a].deserved
            if u.gpu_milli + rg > d.gpu_milli or u.cpu_milli + rc > d.cpu_milli or u.memory_mib + rm > d.memory_mib:
                return True
        return False

    def share(self, name: str, extra: Resources = ZERO) -> float:
        """Weighted dominant-resource share of what `name` borrows (0 when within deserved)."""
        # unrolled: the fair-share order calls this hundreds of thousands of times a full cycle
        q, u, cap = self.queues[name], self.usage[name], self.capacity
        d, s = q.deserved, 0.0
        over = u.gpu_milli + extra.gpu_milli - d.gpu_milli
        if over > 0 and cap.gpu_milli:
            s = over / cap.gpu_milli
        over = u.cpu_milli + extra.cpu_milli - d.cpu_milli
        if over > 0 and cap.cpu_milli:
            s = max(s, over / cap.cpu_milli)
        over = u.memory_mib + extra.memory_mib - d.memory_mib
        if over > 0 and cap.memory_mib:
            s = max(s, over / cap.memory_mib)
        if self.past:
            s += self.past.get(name, 0.0)
        return s / q.weight

    def order_key(self, leaf: str, r: Resources) -> tuple[float, ...]:
        """Fair-share order for a job adding `r`: the top-level queue's share first, then down."""
        return tuple([self.share(a, r) for a in self._top_down[leaf]])


class PastUsage:
    """Each queue's GPU use over time, exponentially decayed with a half-life, as a share of the
    GPU capacity there was over the same time, decayed alike (so a queue that used a vacant
    cluster is not charged as if it had crowded others out). Fed once a cycle with what the
    queues hold then; a cycle's holding counts until the next."""

    def __init__(self, half_life_s: float, weight: float):
        self.rate, self.weight = math.log(2) / half_life_s, weight
        self.used: dict[str, float] = {}  # queue -> decayed GPU-seconds
        self.capacity = 0.0  # decayed GPU-seconds there were
        self.at: float | None = None
        self.held: dict[str, float] = {}  # GPUs each queue held at the last cycle
        self.cap = 0.0

    def advance(self, now: float, held: dict[str, float], capacity: float) -> dict[str, float]:
        """Account for the time since the last cycle, then take what each queue (parents
        included) holds now, in GPUs, and the GPUs there are; each queue's weighted past share."""
        if self.at is not None and now > self.at:
            keep = math.exp(-self.rate * (now - self.at))
            gain = (1 - keep) / self.rate  # the decayed integral of a constant over the interval
            for q in self.used.keys() | self.held.keys():
                self.used[q] = self.used.get(q, 0.0) * keep + self.held.get(q, 0.0) * gain
            self.capacity = self.capacity * keep + self.cap * gain
        self.at = now
        self.held, self.cap = held, capacity
        if self.capacity <= 0:
            return {}
        return {q: self.weight * v / self.capacity for q, v in self.used.items() if v > 1e-9}


def reserve_of(q: Queue) -> Resources:
    d, g, lend = q.deserved, q.guarantee, q.lending_limit
    vals = []
    for dv, gv, lv in zip(d.as_tuple(), g.as_tuple(), lend.as_tuple(), strict=True):
        # an unlimited deserved (a resource the queue's tree does not govern) has nothing to lend
        keep = dv - lv if lv < UNLIMITED and dv < UNLIMITED // 2 else 0
        vals.append(min(dv, max(gv, keep)))
    return Resources(*vals)
