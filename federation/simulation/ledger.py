"""GPU-time and money, integrated per node as allocations change (O(changes), not O(nodes x time)).

Showback: a cloud node's cost is split among the queues whose work runs on it, by GPU share
(CPU-only work by CPU share); while it idles (or boots), its cost goes to the queue whose gang
triggered the burst. Nodes are paid from the moment they are requested until they are
released; a request that never delivers costs nothing (clouds bill running instances).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


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
        self.gpu_s: dict[str, float] = defaultdict(float)  # queue -> GPU-seconds
        self.cloud_gpu_s: dict[str, float] = defaultdict(float)
        self.cost: dict[str, float] = defaultdict(float)  # queue -> USD
        self.site_alloc_gpu_s: dict[str, float] = defaultdict(float)
        self.site_avail_gpu_s: dict[str, float] = defaultdict(float)
        self.paid_node_s = 0.0
        self.idle_paid_node_s = 0.0
        self.total_cost = 0.0

    def node_up(self, t: float, name: str, site: str, gpus: int, cloud: bool, price: float, trigger: str | None, paid_since: float | None = None) -> None:
        self.books[name] = _NodeBook(site, gpus, cloud, price, trigger, t)
        if cloud and paid_since is not None and t > paid_since:
            self._charge_idle(self.books[name], t - paid_since)

    def _charge_idle(self, b: _NodeBook, dt: float) -> None:
        usd = b.price_usd_per_hour * dt / 3600
        self.cost[b.trigger_queue or "-"] += usd
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

    def node_down(self, t: float, name: str) -> None:
        self._advance(name, t)
        del self.books[name]

    def close(self, t: float) -> None:
        for name in list(self.books):
            self._advance(name, t)
