"""Showback: GPU-time and money per queue, integrated per node as allocations change (O(changes),
not O(nodes x time)); the simulator's report and the live controller's `/metrics` and status.

A cloud node's cost is split among the queues whose work runs on it, by GPU share (CPU-only work
by CPU share); while it idles (or boots), its cost goes to the queue whose gang triggered the
burst. The simulator pays a node from the moment it is requested (`paid_since`); the live
controller from when its provider lists it, as its spend meter does. A request that never
delivers costs nothing (clouds bill running instances). The simulator books each change as it
happens; the live controller brings the books to what it sees each cycle (`sync`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from federation.model import JobSpec, RunningJob, TaskPlacement


def held_milli(spec: JobSpec, p: TaskPlacement) -> int:
    """Milli-GPU one task placement holds: its share, its MIG instance's, or its whole GPUs."""
    if p.gpu_milli is not None:
        return p.gpu_milli
    return spec.per_task.gpu_milli if p.mig else 1000 * len(p.gpus)


def holdings(running: Iterable[RunningJob]) -> dict[str, dict[str, tuple[int, int]]]:
    """node -> queue -> (milli-GPU held, milli-CPU of the CPU-only tasks), what `Ledger.sync` takes."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for r in running:
        for p in r.placements:
            g = held_milli(r.spec, p)
            mine = out.setdefault(p.node, {})
            had_g, had_c = mine.get(r.spec.queue, (0, 0))
            mine[r.spec.queue] = (had_g + g, had_c + (0 if g else r.spec.per_task.cpu_milli))
    return out


@dataclass
class _NodeBook:
    site: str
    gpus: int
    cloud: bool
    price_usd_per_hour: float
    trigger_queue: str | None
    since: float
    alloc: dict[str, int] = field(default_factory=dict)  # queue -> milli-GPU (or milli-CPU for CPU-only)
    cpu_only: dict[str, int] = field(default_factory=dict)


class Ledger:
    def __init__(self) -> None:
        self.books: dict[str, _NodeBook] = {}
        self.cloud_books: set[str] = set()  # the names of `books` at cloud sites: only they cost money
        self.gpu_s: dict[str, float] = defaultdict(float)  # queue -> GPU-seconds
        self.cloud_gpu_s: dict[str, float] = defaultdict(float)
        self.cost: dict[str, float] = defaultdict(float)  # queue -> USD
        self.site_cost: dict[str, float] = defaultdict(float)  # site -> USD
        self.site_alloc_gpu_s: dict[str, float] = defaultdict(float)
        self.site_avail_gpu_s: dict[str, float] = defaultdict(float)
        self.paid_node_s = 0.0
        self.idle_paid_node_s = 0.0
        self.total_cost = 0.0
        self.heads: dict[str, tuple[float, float]] = {}  # cluster site whose head is up -> (USD/h, accounted up to)

    def set_heads(self, t: float, up: dict[str, float]) -> None:
        """The cluster sites whose Ray head is up now, with its price: a head costs its site (and
        the month) while it is up, and no queue (it serves them all); it holds no GPUs."""
        self._advance_heads(t)
        self.heads = {site: self.heads.get(site, (price, t)) for site, price in up.items()}

    def _advance_heads(self, t: float) -> None:
        for site, (price, since) in self.heads.items():
            if t > since:
                usd = price * (t - since) / 3600
                self.site_cost[site] += usd
                self.total_cost += usd
                self.heads[site] = (price, t)

    def node_up(self, t: float, name: str, site: str, gpus: int, cloud: bool, price: float, trigger: str | None, paid_since: float | None = None) -> None:
        self.books[name] = _NodeBook(site, gpus, cloud, price, trigger, t)
        if cloud:
            self.cloud_books.add(name)
        if cloud and paid_since is not None and t > paid_since:
            self._charge_idle(self.books[name], t - paid_since)

    def _charge_idle(self, b: _NodeBook, dt: float) -> None:
        usd = b.price_usd_per_hour * dt / 3600
        self.cost[b.trigger_queue or "-"] += usd
        self.site_cost[b.site] += usd
        self.total_cost += usd
        self.paid_node_s += dt
        self.idle_paid_node_s += dt

    def _advance(self, name: str, t: float) -> _NodeBook:
        b = self.books[name]
        dt = t - b.since
        if dt > 0:
            self.site_avail_gpu_s[b.site] += b.gpus * dt
            used = sum(b.alloc.values())
            for q, milli in b.alloc.items():
                self.gpu_s[q] += milli / 1000 * dt
                if b.cloud:
                    self.cloud_gpu_s[q] += milli / 1000 * dt
            self.site_alloc_gpu_s[b.site] += used / 1000 * dt
            if b.cloud:
                shares = b.alloc if used else b.cpu_only
                total = sum(shares.values())
                if total:
                    usd = b.price_usd_per_hour * dt / 3600
                    for q, v in shares.items():
                        self.cost[q] += usd * v / total
                    self.site_cost[b.site] += usd
                    self.total_cost += usd
                    self.paid_node_s += dt
                else:
                    self._charge_idle(b, dt)
            b.since = t
        return b

    def change(self, t: float, node: str, queue: str, gpu_milli: int, cpu_milli: int, sign: int) -> None:
        b = self._advance(node, t)
        book, amount = (b.alloc, gpu_milli) if gpu_milli else (b.cpu_only, cpu_milli)
        book[queue] = book.get(queue, 0) + sign * amount
        if book[queue] <= 0:
            del book[queue]

    def sync(self, t: float, nodes: dict[str, tuple[str, int, bool, float, str | None]], held: dict[str, dict[str, tuple[int, int]]]) -> None:
        """Bring the books to what is now: `nodes` name -> (site, GPUs, cloud?, USD/h, the queue
        that triggered it), `held` node -> queue -> (milli-GPU, milli-CPU of CPU-only work)."""
        for name in [n for n in self.books if n not in nodes]:
            self.node_down(t, name)
        for name, (site, gpus, cloud, price, trigger) in nodes.items():
            if name not in self.books:
                self.node_up(t, name, site, gpus, cloud, price, trigger)
        for name, b in self.books.items():
            want = held.get(name, {})
            if want == {q: (b.alloc.get(q, 0), b.cpu_only.get(q, 0)) for q in b.alloc.keys() | b.cpu_only.keys()}:
                continue
            self._advance(name, t)
            b.alloc = {q: g for q, (g, _) in want.items() if g > 0}
            b.cpu_only = {q: c for q, (_, c) in want.items() if c > 0}

    def per_queue(self, t: float, queues: Iterable[str]) -> dict[str, dict[str, float]]:
        """Each queue's GPU-hours (on cloud nodes too) and cloud cost, accounted up to `t`."""
        for name in self.books:
            self._advance(name, t)
        return {q: {"gpu_hours": round(self.gpu_s.get(q, 0.0) / 3600, 3), "cloud_gpu_hours": round(self.cloud_gpu_s.get(q, 0.0) / 3600, 3),
                    "cost_usd": round(self.cost.get(q, 0.0), 2)} for q in queues}

    def cloud_costs(self, t: float) -> tuple[dict[str, float], dict[str, float]]:
        """Cloud cost so far by queue and by site, accounted up to `t` (cloud nodes alone accrue it)."""
        for name in self.cloud_books:
            self._advance(name, t)
        self._advance_heads(t)
        return dict(self.cost), dict(self.site_cost)

    def node_down(self, t: float, name: str) -> None:
        self._advance(name, t)
        del self.books[name]
        self.cloud_books.discard(name)

    def close(self, t: float) -> None:
        for name in list(self.books):
            self._advance(name, t)
        self._advance_heads(t)
