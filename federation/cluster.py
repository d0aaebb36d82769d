"""Free capacity of every node during one scheduling cycle, indexed so placement stays fast.

Nodes with the same free state are interchangeable for placement, so they are grouped by a
signature (site, GPU model, rack, free milli-GPU per GPU, free CPU and memory, free MIG
instances); a strategy scores one node per signature instead of every node. The state is
mutable and lives for one cycle; it is built from the snapshot and never outlives `schedule()`.

Each group keeps its nodes sorted by name, and ties between alike nodes go to the first: the
choice depends on the state alone, never on the order nodes and jobs came and went. The live
controller builds the state afresh each cycle, the simulator keeps one for the whole run; a
choice that followed history would send the same job to different nodes in each.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from federation.errors import SnapshotError
from federation.model import JobSpec, Node, RunningJob, TaskPlacement

GPU = 1000  # milli-GPU in one GPU


class NodeState:
    __slots__ = ("node", "gpu_free", "cpu_free", "mem_free", "mig_free", "tasks", "sig", "fit_key")

    def __init__(self, node: Node):
        self.node = node
        closed = {gpu for gpu, _, _ in _mig_instances(node)} | set(node.reconfiguring)
        # A GPU in MIG mode is used only through its instances; one being re-sliced not at all.
        self.gpu_free = [0 if i in closed else GPU for i in range(node.gpus)]
        self.cpu_free = node.cpu_milli
        self.mem_free = node.memory_mib
        self.mig_free: dict[tuple[int, str, int], None] = dict.fromkeys(_mig_instances(node))  # ordered set
        self.tasks = 0  # how many tasks run on it: a node is idle when none do, whatever its MIG layout
        self.sig = -1  # interned (site, rack, free state); set by ClusterState
        self.fit_key = -1  # interned free state alone: what decides which tasks fit

    def free_state(self) -> tuple:
        return (self.node.gpu_model, tuple(sorted(self.gpu_free)), self.cpu_free, self.mem_free,
                tuple(sorted(p for _, p, _ in self.mig_free)))

    @property
    def free_gpu_milli(self) -> int:
        return sum(self.gpu_free)


def _mig_instances(node: Node) -> list[tuple[int, str, int]]:
    return [(gpu, profile, start) for gpu, profile, start in node.mig_layout]


class ClusterState:
    def __init__(self, nodes: Iterable[Node]):
        self.nodes: dict[str, NodeState] = {}
        self.groups: dict[int, list[str]] = {}  # signature -> node names, sorted
        # site -> free state -> its groups' signatures (one a rack): placement skips a free state
        # that does not fit the task once, not once a rack
        self.site_groups: dict[str, dict[int, dict[int, None]]] = {}
        # site -> its free states in the order they (re)appeared in site_groups: what placement's
        # index of the states that fit a shape (placement.fitting) reads to stay up to date
        self.site_added: dict[str, list[int]] = {}
        self.fitting: dict[tuple, tuple[list[int], int, dict[int, int]]] = {}  # (site, task shape) -> see placement.fitting
        self.site_free_milli: dict[str, int] = {}  # site -> free milli-GPU on its schedulable nodes (MIG instances aside), kept as nodes change
        self.fit_cache: dict[tuple, int] = {}  # (free state, task shape) -> tasks that fit; a pure function
        self.site_changes: dict[str, int] = {}  # site -> how many times its nodes were (re-)indexed: what is derived from them holds while it stands
        self.capacity_cache: dict[tuple, tuple[int, int]] = {}  # (site, task shape) -> (site_changes then, tasks the site takes)
        self._ids: dict[tuple, int] = {}  # interned signatures and free states (hashed once)
        for n in nodes:
            self.add_node(n)

    def add_node(self, node: Node) -> None:
        if node.name in self.nodes:
            raise SnapshotError(f"node {node.name!r} is already in the cluster")
        st = NodeState(node)
        self.nodes[node.name] = st
        if node.schedulable:
            self._index(st)

    def remove_node(self, name: str) -> None:
        """Drop a node; whatever ran on it must have been released first."""
        st = self.nodes.pop(name)
        self._unindex(st)

    def replace_node(self, node: Node, running: Iterable[RunningJob]) -> None:
        """Swap in a changed node (cordoned, re-sliced) and take back what `running` holds on it."""
        self.remove_node(node.name)
        self.add_node(node)
        for r in running:
            mine = [p for p in r.placements if p.node == node.name]
            if mine:
                self.apply(r.spec, mine)

    def _intern(self, key: tuple) -> int:
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self._ids)
        return i

    def _index(self, st: NodeState) -> None:
        free = st.free_state()
        st.fit_key = self._intern(free)
        st.sig = self._intern((st.node.site, st.node.rack, st.fit_key))
        site = st.node.site
        self.site_free_milli[site] = self.site_free_milli.get(site, 0) + st.free_gpu_milli
        self.site_changes[site] = self.site_changes.get(site, 0) + 1
        group = self.groups.get(st.sig)
        if group is None:
            self.groups[st.sig] = [st.node.name]
            fits = self.site_groups.setdefault(site, {})
            sigs = fits.get(st.fit_key)
            if sigs is None:
                sigs = fits[st.fit_key] = {}
                added = self.site_added.setdefault(site, [])
                if len(added) > 4 * len(fits) + 64:  # mostly states gone since: start again from those there are
                    added = self.site_added[site] = list(fits)
                else:
                    added.append(st.fit_key)
            sigs[st.sig] = None
        else:
            insort(group, st.node.name)

    def _unindex(self, st: NodeState) -> None:
        group = self.groups.get(st.sig)
        if group is not None:
            i = bisect_left(group, st.node.name)
            if i < len(group) and group[i] == st.node.name:
                del group[i]
                self.site_free_milli[st.node.site] -= st.free_gpu_milli
                self.site_changes[st.node.site] += 1
            if not group:
                del self.groups[st.sig]
                fits = self.site_groups[st.node.site]
                del fits[st.fit_key][st.sig]
                if not fits[st.fit_key]:
                    del fits[st.fit_key]

    def representatives(self, sites: set[str] | None = None) -> Iterator[NodeState]:
        """One schedulable node per distinct free state and rack: the first by name."""
        for site, fits in self.site_groups.items():
            if sites is None or site in sites:
                for sigs in fits.values():
                    for sig in sigs:
                        yield self.nodes[self.groups[sig][0]]

    def members(self, sig: int, blocked: frozenset[str] | set[str]) -> int:
        """How many nodes of the group are not in `blocked`."""
        group = self.groups[sig]
        if not blocked:
            return len(group)
        if len(blocked) < len(group):
            return len(group) - sum(1 for b in blocked if (i := bisect_left(group, b)) < len(group) and group[i] == b)
        return sum(1 for n in group if n not in blocked)

    # ---- allocation ----

    def apply(self, job: JobSpec, placements: Iterable[TaskPlacement], sign: int = 1) -> None:
        """Take (sign=1) or give back (sign=-1) what `placements` hold. Raises SnapshotError on overcommit."""
        for p in placements:
            st = self._node_of(job, p)
            self._unindex(st)
            _take(st, job, p, sign)
            _check(st, job)
            if st.node.schedulable:
                self._index(st)

    def shift(self, changes: Iterable[tuple[JobSpec, Iterable[TaskPlacement], int]]) -> dict[str, tuple]:
        """`apply` for several jobs at once (job, placements, sign), for a dry run: each node
        touched is re-indexed once, and `restore` copies the saved nodes back (undoing job by
        job, every dry run cost as much again)."""
        saved: dict[str, tuple] = {}
        last: dict[str, JobSpec] = {}  # node -> the last job changed there, named if it ends overcommitted
        try:
            for job, placements, sign in changes:
                for p in placements:
                    st = self._node_of(job, p)
                    if p.node not in saved:
                        saved[p.node] = (list(st.gpu_free), st.cpu_free, st.mem_free, dict(st.mig_free), st.tasks)
                        self._unindex(st)
                    _take(st, job, p, sign)
                    last[p.node] = job
            for name, job in last.items():  # the end state must hold: what goes frees before what comes takes
                _check(self.nodes[name], job)
        except SnapshotError:
            self._reindex(saved)
            self.restore(saved)
            raise
        self._reindex(saved)
        return saved

    def _reindex(self, names: Iterable[str]) -> None:
        for name in names:
            st = self.nodes[name]
            if st.node.schedulable:
                self._index(st)

    def restore(self, saved: dict[str, tuple]) -> None:
        """Undo a `shift`: its nodes as they were."""
        for name, (gpu_free, cpu_free, mem_free, mig_free, tasks) in saved.items():
            st = self.nodes[name]
            self._unindex(st)
            st.gpu_free, st.cpu_free, st.mem_free, st.mig_free, st.tasks = gpu_free, cpu_free, mem_free, mig_free, tasks
            if st.node.schedulable:
                self._index(st)

    def _node_of(self, job: JobSpec, p: TaskPlacement) -> NodeState:
        st = self.nodes.get(p.node)
        if st is None:
            raise SnapshotError(f"job {job.id} is placed on unknown node {p.node!r}")
        return st

    def can_take(self, job: JobSpec, placements: Iterable[TaskPlacement]) -> bool:
        """Whether `apply(job, placements)` would succeed now (nothing changes): a place decided in
        an earlier cycle may have been taken, or re-sliced, since."""
        cpu: dict[str, int] = {}
        gpu: dict[tuple[str, int], int] = {}
        for p in placements:
            st = self.nodes.get(p.node)
            if st is None or (p.mig is not None and p.mig not in st.mig_free):
                return False
            cpu[p.node] = cpu.get(p.node, 0) + 1
            if p.mig is None:
                for g in p.gpus:
                    gpu[(p.node, g)] = gpu.get((p.node, g), 0) + (p.gpu_milli if p.gpu_milli is not None else GPU)
        for node, n in cpu.items():
            st = self.nodes[node]
            if st.cpu_free < n * job.per_task.cpu_milli or st.mem_free < n * job.per_task.memory_mib:
                return False
        return all(g < len(self.nodes[node].gpu_free) and self.nodes[node].gpu_free[g] >= milli for (node, g), milli in gpu.items())

    def apply_running(self, running: Iterable[RunningJob]) -> None:
        for r in running:
            self.apply(r.spec, r.placements)


def _take(st: NodeState, job: JobSpec, p: TaskPlacement, sign: int) -> None:
    """One task's resources off the node (sign 1) or back on it (-1); the index is the caller's."""
    st.tasks += sign
    st.cpu_free -= sign * job.per_task.cpu_milli
    st.mem_free -= sign * job.per_task.memory_mib
    if p.mig is not None:
        if sign > 0:
            if p.mig not in st.mig_free:
                raise SnapshotError(f"job {job.id}: MIG instance {p.mig} on {p.node} is not free")
            del st.mig_free[p.mig]
        else:
            st.mig_free[p.mig] = None
    elif p.gpu_milli is not None:
        st.gpu_free[p.gpus[0]] -= sign * p.gpu_milli
    else:
        for g in p.gpus:
            st.gpu_free[g] -= sign * GPU


def _check(st: NodeState, job: JobSpec) -> None:
    if st.cpu_free < 0 or st.mem_free < 0 or (st.gpu_free and (min(st.gpu_free) < 0 or max(st.gpu_free) > GPU)):
        raise SnapshotError(f"node {st.node.name} is overcommitted by job {job.id}")


@dataclass(frozen=True)
class Fit:
    """How a task fits on a node: the GPUs (or MIG instance) it would take."""

    gpus: tuple[int, ...] = ()
    gpu_milli: int | None = None
    mig: tuple[int, str, int] | None = None

    def placement(self, node: str) -> TaskPlacement:
        return TaskPlacement(node=node, gpus=self.gpus, gpu_milli=self.gpu_milli, mig=self.mig)


def model_ok(job: JobSpec, st: NodeState) -> bool:
    if job.per_task.gpu_milli == 0 and job.mig_profile is None:
        return True
    return st.node.gpus > 0 and (not job.gpu_models or st.node.gpu_model in job.gpu_models)


def tasks_that_fit(job: JobSpec, st: NodeState, limit: int) -> int:
    """How many tasks of `job` fit on the node now (at most `limit`)."""
    if not model_ok(job, st):
        return 0
    r = job.per_task
    n = limit
    if r.cpu_milli:
        n = min(n, st.cpu_free // r.cpu_milli)
    if r.memory_mib:
        n = min(n, st.mem_free // r.memory_mib)
    if n <= 0:
        return 0
    if job.mig_profile is not None:
        return min(n, sum(1 for _, p, _ in st.mig_free if p == job.mig_profile))
    if r.gpu_milli == 0:
        return n
    if r.gpu_milli < GPU:
        return min(n, sum(f // r.gpu_milli for f in st.gpu_free))
    whole = r.gpu_milli // GPU
    return min(n, sum(1 for f in st.gpu_free if f == GPU) // whole)
