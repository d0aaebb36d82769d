"""A site's MIG manager in the live controller: the pure manager, a journal, and a backend.

Each GPU's layout is journaled in the store before its backend is asked to apply it (state
APPLYING, with the layout it had before), and becomes READY when the backend says `success`; on
`failed` the previous layout stands and the reason is logged. While a GPU is APPLYING only the
busy instances it keeps are usable, so nothing is placed on an instance that may not exist yet.
(The manager gives a node with a change under way no second one until that ends: the GPU Operator
applies one config per node at a time.) Drains are cordons the controller applies to its own view of the node.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from federation.errors import FederationError
from federation.inventory import config_nodes
from federation.mig.manager import MigManager
from federation.model import Federation, JobSpec, Node, RunningJob
from federation.runtime.sites import SiteUnavailable
from federation.store import Store
from providers.errors import ProviderFailure
from providers.mig_backends import GpuOperatorBackend, NoDeviceBackend, RayNvmlBackend

log = logging.getLogger(__name__)


class LiveMig:
    #: after a failed reconfiguration, a node gets no new one for this long (no retry storm)
    RETRY_S = 600.0

    def __init__(self, fed: Federation, site: str, store: Store, backend):
        self.site, self.store, self.backend = site, store, backend
        self.manager = MigManager(fed, site)
        self.draining: set[str] = set()
        self.known: set[str] = set()  # the site's nodes at the last step
        self.retry_at: dict[str, float] = {}  # node -> no reconfiguration before (after a failure)

    def _journal(self) -> dict[str, dict[int, tuple[list, list, str]]]:
        out: dict[str, dict[int, tuple[list, list, str]]] = defaultdict(dict)
        for node, gpu, layout, previous, state, _ in self.store.mig_layouts():
            out[node][gpu] = ([tuple(i) for i in layout], [tuple(i) for i in previous], state)
        return out

    def view(self, nodes: Iterable[Node]) -> list[Node]:
        """`nodes` as the journal and the drains make them: MIG layouts, GPUs being re-sliced, cordons."""
        journal = self._journal()
        out = []
        for n in nodes:
            rows = journal.get(n.name)
            if n.site == self.site and rows:
                lay, rec = [], []
                for gpu, (layout, previous, state) in sorted(rows.items()):
                    usable = layout if state == "READY" else [i for i in layout if i in previous]
                    lay += [(gpu, p, s) for p, s in usable]
                    if state == "APPLYING":
                        rec.append(gpu)
                n = replace(n, mig_layout=tuple(sorted(lay)), reconfiguring=tuple(rec))
            if n.name in self.draining:
                n = replace(n, schedulable=False)
            out.append(n)
        return out

    def step(self, now: float, local: datetime, nodes: Sequence[Node], running: Iterable[RunningJob], waiting: Iterable[JobSpec],
             forecast: dict[str, int] | None = None) -> None:
        """`nodes` as `view` gives them (this site's); `waiting` the jobs pending for capacity;
        `forecast` the instances per profile predicted one lead time ahead."""
        self.known = {n.name for n in nodes}
        nodes = self.view(nodes)
        d = self.manager.decide(now, local, nodes, running, waiting, forecast)
        self.draining -= set(d.uncordon)
        self.draining |= set(d.cordon)
        for name in d.cordon:
            log.info(f"draining {name} for MIG demand {d.unmet}", extra={"site": self.site, "node": name})
        journal = self._journal()
        changes: dict[str, list] = defaultdict(list)
        for r in d.reconfigure:
            changes[r.node].append(r)
        by_name = {n.name: n for n in nodes}
        for name, rs in changes.items():
            rows = journal.get(name, {})
            if now < self.retry_at.get(name, 0.0):
                continue
            for r in rs:
                before = rows.get(r.gpu, ([], [], "READY"))[0]
                self.store.set_mig(name, r.gpu, [list(i) for i in r.layout], "APPLYING", now, previous=[list(i) for i in before])
            target = self._node_layouts(name, by_name[name].gpus)
            try:
                self.backend.apply(name, target)
            except (ProviderFailure, SiteUnavailable) as e:
                log.warning(f"cannot re-slice {name}: {e}", extra={"site": self.site, "node": name})
                self._revert(name, now)
                continue
            log.info(f"re-slicing {name}: " + "; ".join(f"GPU {r.gpu} -> {[p for p, _ in r.layout] or 'whole'}" for r in rs),
                     extra={"site": self.site, "node": name})

    def _node_layouts(self, name: str, gpus: int) -> dict[int, list[tuple[str, int]]]:
        rows = self._journal().get(name, {})
        return {g: rows[g][0] if g in rows else [] for g in range(gpus)}

    def poll(self, now: float, nodes: Iterable[Node]) -> None:
        """Learn which reconfigurations under way have finished (before the cycle looks at the
        nodes: what finished is usable in this very cycle, as in the simulator)."""
        nodes = {n.name: n for n in nodes if n.site == self.site}
        for name, rows in self._journal().items():
            if name not in nodes or not any(state == "APPLYING" for _, _, state in rows.values()):
                continue
            try:
                st = self.backend.state(name, self._node_layouts(name, nodes[name].gpus))
            except (ProviderFailure, SiteUnavailable) as e:
                log.warning(f"cannot read {name}'s MIG state: {e}", extra={"site": self.site, "node": name})
                continue
            if st.state == "success":
                for gpu, (layout, _, state) in rows.items():
                    if state == "APPLYING":
                        self.store.set_mig(name, gpu, [list(i) for i in layout], "READY", now)
            elif st.state == "failed":
                log.warning(f"re-slicing {name} failed: {st.message}; its previous layout stands", extra={"site": self.site, "node": name})
                self._revert(name, now)

    def _revert(self, name: str, now: float) -> None:
        self.retry_at[name] = now + self.RETRY_S
        for gpu, (_, previous, state) in self._journal().get(name, {}).items():
            if state == "APPLYING":
                self.store.set_mig(name, gpu, [list(i) for i in previous], "READY", now)

    def status(self) -> list[dict]:
        return [{"node": n, "gpu": g, "layout": [{"profile": p, "start": s} for p, s in lay], "state": st}
                for n, g, lay, _, st, _ in self.store.mig_layouts() if n in self.known]


def live_mig(fed: Federation, site: str, store: Store, ray_site, inventory) -> LiveMig:
    """The site's MIG manager with the backend its `mig.backend` names. `auto` is the GPU Operator
    where the fleet is a Kubernetes inventory, bookkeeping only for local and simulated nodes
    (logical GPUs), and NVML through a Ray job on the node for any other Ray site (bare metal).
    `ray_site` and `inventory` are the site's own objects, or proxies to them."""
    s = fed.site(site)
    choice = next(g.mig_backend for g in s.node_groups if g.mig_enabled)
    kind = getattr(s.provider, "kind", None)
    if choice == "auto":
        choice = "gpu-operator" if kind == "kubernetes" else "none" if kind in ("local", "simulated") else "nvml"
    if choice == "gpu-operator":
        if inventory is None:
            raise FederationError(f"site {site}: mig.backend gpu-operator needs a kubernetes provider")
        backend = GpuOperatorBackend(inventory)
    elif choice == "nvml" and ray_site is not None:
        # NVML sites are bare-metal Ray sites, whose nodes are the ones the config lists
        models = {n.name: n.gpu_model for n in config_nodes(fed, [site])}
        backend = RayNvmlBackend(ray_site, models.__getitem__, fed.policies.mig.agent_runtime_env)
    else:
        backend = NoDeviceBackend()
    return LiveMig(fed, site, store, backend)
