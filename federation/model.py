"""Frozen domain types shared by the core, the simulator and the live controller.

Amounts are integers in milli-units (GPU and CPU) and MiB (memory), so that quota sums are exact;
`Resources.of()` takes the config's units (whole GPUs, cores, GiB).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    from federation import schema

# A quota dimension with no limit. Large enough never to bind, small enough to add safely.
UNLIMITED = 1 << 60


@dataclass(frozen=True, slots=True)
class Resources:
    gpu_milli: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0

    @staticmethod
    def of(gpu: float = 0, cpu: float = 0, memory_gib: float = 0) -> Resources:
        return Resources(round(gpu * 1000), round(cpu * 1000), round(memory_gib * 1024))

    @staticmethod
    def unlimited() -> Resources:
        return Resources(UNLIMITED, UNLIMITED, UNLIMITED)

    def __add__(self, o: Resources) -> Resources:
        return Resources(self.gpu_milli + o.gpu_milli, self.cpu_milli + o.cpu_milli, self.memory_mib + o.memory_mib)

    def __sub__(self, o: Resources) -> Resources:
        return Resources(self.gpu_milli - o.gpu_milli, self.cpu_milli - o.cpu_milli, self.memory_mib - o.memory_mib)

    def times(self, n: int) -> Resources:
        return Resources(self.gpu_milli * n, self.cpu_milli * n, self.memory_mib * n)

    def fits_in(self, o: Resources) -> bool:
        return self.gpu_milli <= o.gpu_milli and self.cpu_milli <= o.cpu_milli and self.memory_mib <= o.memory_mib

    def max(self, o: Resources) -> Resources:
        return Resources(max(self.gpu_milli, o.gpu_milli), max(self.cpu_milli, o.cpu_milli), max(self.memory_mib, o.memory_mib))

    def min(self, o: Resources) -> Resources:
        return Resources(min(self.gpu_milli, o.gpu_milli), min(self.cpu_milli, o.cpu_milli), min(self.memory_mib, o.memory_mib))

    def clip0(self) -> Resources:
        return self.max(Resources())

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.gpu_milli, self.cpu_milli, self.memory_mib)

    @property
    def gpu(self) -> float:
        return self.gpu_milli / 1000

    def to_dict(self) -> dict[str, float | None]:
        """Config units; `None` for an unlimited dimension."""

        def unit(v: int, scale: int) -> float | None:
            return None if v >= UNLIMITED // 2 else v / scale

        return {"gpu": unit(self.gpu_milli, 1000), "cpu": unit(self.cpu_milli, 1000), "memory_gib": unit(self.memory_mib, 1024)}

    def __str__(self) -> str:
        parts = []
        for key, v in self.to_dict().items():
            parts.append(f"{key}={'unlimited' if v is None else f'{v:g}'}")
        return " ".join(parts)


ZERO = Resources()


@dataclass(frozen=True)
class PriorityClass:
    name: str
    value: int
    preemptible: bool = True
    default: bool = False


@dataclass(frozen=True)
class NodeGroup:
    name: str
    site: str
    gpu_model: str | None
    gpus_per_node: int
    node_resources: Resources  # what one node offers
    count: int  # fixed nodes (IDC); 0 for cloud groups, which scale between min_nodes and max_nodes
    min_nodes: int = 0
    max_nodes: int = 0
    spot: bool = False
    price_usd_per_hour: float = 0.0
    fallback: str | None = None
    boot_s: float = 0.0
    spot_interruptions_per_hour: float = 0.0
    racks: int = 1
    rack: str | None = None  # the rack every node of the group is in, when the config names it
    mig_enabled: bool = False
    mig_backend: str = "auto"  # auto | gpu-operator | nvml | none
    instance_type: str | None = None
    rack_label: str | None = None  # the node label that names a node's rack (Kubernetes inventories)

    @property
    def elastic(self) -> bool:
        return self.max_nodes > 0


@dataclass(frozen=True)
class Site:
    name: str
    kind: str  # idc | aws | gcp | local | simulated
    ray_address: str | None
    provider: schema.KubernetesProvider | schema.AwsProvider | schema.GcpProvider | schema.LocalProvider | schema.SimulatedProvider | None
    node_groups: tuple[NodeGroup, ...]

    @property
    def is_cloud(self) -> bool:
        return any(g.elastic for g in self.node_groups)

    @property
    def cluster(self):
        """How the federation makes the site's whole Ray cluster (`provider.cluster`), or None:
        then its cluster is somebody else's and always there."""
        return getattr(self.provider, "cluster", None)

    @property
    def head_price_usd_per_hour(self) -> float:
        """What the site's Ray head costs while it is up (a cluster the federation makes), else 0."""
        return self.cluster.head_price_usd_per_hour if self.cluster is not None else 0.0

    def node_group(self, name: str) -> NodeGroup:
        for g in self.node_groups:
            if g.name == name:
                return g
        raise KeyError(name)


@dataclass(frozen=True)
class Queue:
    """One node of the queue tree (see `federation.quota` for the semantics)."""

    name: str
    parent: str | None
    guarantee: Resources
    deserved: Resources
    capability: Resources
    borrowing_limit: Resources
    lending_limit: Resources
    weight: float = 1.0
    sites: tuple[str, ...] | None = None  # None: every site
    burst: bool = False
    burst_budget_usd_per_month: float | None = None  # for the cloud spend of this queue and those under it
    priority_classes: tuple[str, ...] | None = None  # the classes its jobs may use; None: every class
    max_running_jobs: int | None = None  # with the queues under it; None: no limit


_QUEUE_INDEX: WeakKeyDictionary[Federation, dict[str, Queue]] = WeakKeyDictionary()  # see Federation.queue


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per loaded file
class Federation:
    """A loaded, validated federation config."""

    name: str
    timezone: str
    api: schema.ApiSection
    gpu_models: dict[str, object]
    priority_classes: tuple[PriorityClass, ...]
    sites: tuple[Site, ...]
    queues: tuple[Queue, ...]
    policies: schema.PoliciesSection
    source: str = "<memory>"

    def site(self, name: str) -> Site:
        for s in self.sites:
            if s.name == name:
                return s
        raise KeyError(name)

    def queue(self, name: str) -> Queue:
        # looked up for each submission: 1,000 queues are indexed once, not scanned each time (kept
        # beside the object, not in it, so copies made from its fields carry no stale index)
        index = _QUEUE_INDEX.get(self)
        if index is None:
            index = _QUEUE_INDEX[self] = {q.name: q for q in self.queues}
        return index[name]

    @property
    def default_priority(self) -> PriorityClass:
        for p in self.priority_classes:
            if p.default:
                return p
        return self.priority_classes[0]

    def priority_class(self, name: str | None) -> PriorityClass:
        if name is None:
            return self.default_priority
        for p in self.priority_classes:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def leaf_queues(self) -> tuple[str, ...]:
        parents = {q.parent for q in self.queues}
        return tuple(q.name for q in self.queues if q.name not in parents)


# ---- cluster state and jobs -------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """A node that can hold work, with its total capacity."""

    name: str
    site: str
    node_group: str
    gpu_model: str | None
    gpus: int
    cpu_milli: int
    memory_mib: int
    rack: str = "rack-0"
    schedulable: bool = True  # False while cordoned (draining for a MIG reconfiguration)
    # (gpu index, profile, start slice) per MIG instance; a GPU without instances is used whole
    mig_layout: tuple[tuple[int, str, int], ...] = ()
    reconfiguring: tuple[int, ...] = ()  # GPUs being re-sliced: only the busy instances they keep are usable


@dataclass(frozen=True, slots=True)  # slots: a million-job replay holds a million of them
class JobSpec:
    """What a job asks for. `tasks` is the gang size; all tasks are alike."""

    id: str
    queue: str
    tasks: int
    per_task: Resources
    submit_s: float
    priority: int = 100
    priority_class: str = "normal"
    preemptible: bool = True
    gpu_models: tuple[str, ...] = ()  # empty: any model
    mig_profile: str | None = None
    min_tasks: int | None = None  # elastic gangs start with at least this many
    kind: str | None = None
    max_runtime_s: float | None = None  # a run that lasts longer is stopped and the job fails
    max_retries: int = 0  # a run that fails at its site is run again, this many times at most
    not_before_s: float | None = None  # after a failed run, its retry waits until then (back-off)
    _shape: tuple | None = field(default=None, init=False, repr=False, compare=False)
    _start: Resources | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def shape_key(self) -> tuple:
        """What decides where a task fits, hashable (placement caches by it); computed once."""
        k = self._shape
        if k is None:
            k = (self.per_task.as_tuple(), self.gpu_models, self.mig_profile, self.tasks)
            object.__setattr__(self, "_shape", k)
        return k

    def request(self, tasks: int | None = None) -> Resources:
        return self.per_task.times(self.tasks if tasks is None else tasks)

    @property
    def start_request(self) -> Resources:
        """What it asks to start with (its minimum, if elastic); looked up once (a full cycle asks
        it of every waiting job several times), and one object for all jobs asking alike (a
        million-job replay holds them all)."""
        r = self._start
        if r is None:
            n, p = self.min_tasks or self.tasks, self.per_task
            r = p if n == 1 else _starts.get((p.gpu_milli, p.cpu_milli, p.memory_mib, n))
            if r is None:
                if len(_starts) > 10_000:
                    _starts.clear()
                r = _starts[(p.gpu_milli, p.cpu_milli, p.memory_mib, n)] = p.times(n)
            object.__setattr__(self, "_start", r)
        return r


_starts: dict[tuple[int, int, int, int], Resources] = {}  # JobSpec.start_request's, shared


@dataclass(frozen=True)
class TaskPlacement:
    node: str
    gpus: tuple[int, ...] = ()  # GPU indices on the node
    gpu_milli: int | None = None  # set for a GPU-sharing task (on the single GPU in `gpus`)
    mig: tuple[int, str, int] | None = None  # (gpu index, profile, start slice)

    def to_dict(self) -> dict:
        """The events.jsonl / journal shape: {node, gpus, gpu_milli?, mig?: {gpu, profile, start}}."""
        d: dict = {"node": self.node, "gpus": list(self.gpus)}
        if self.gpu_milli is not None:
            d["gpu_milli"] = self.gpu_milli
        if self.mig is not None:
            d["mig"] = {"gpu": self.mig[0], "profile": self.mig[1], "start": self.mig[2]}
        return d

    @staticmethod
    def from_dict(d: dict) -> TaskPlacement:
        m = d.get("mig")
        return TaskPlacement(d["node"], tuple(d["gpus"]), d.get("gpu_milli"), (m["gpu"], m["profile"], m["start"]) if m else None)


@dataclass(frozen=True)
class RunningJob:
    spec: JobSpec
    site: str
    placements: tuple[TaskPlacement, ...]
    started_s: float
    preempting: bool = False  # a preemption was decided; the job is within its grace
    preempted_for: str | None = None  # the job it is being stopped for: what it frees is that job's
    lost: int = 0  # tasks whose node went away (not among `placements`): the shells see it, the cycle decides

    @property
    def tasks(self) -> int:
        return len(self.placements)

    @cached_property
    def usage(self) -> Resources:  # kept: dry runs sum the stopping jobs' usage again and again
        return self.spec.per_task.times(self.tasks)


@dataclass(frozen=True)
class PendingReason:
    """Why a job is not admitted, with the numbers behind it (in the spirit of Kueue KEP-10852)."""

    code: str  # ExceedsCapability | WaitingForQuota | NoFeasibleNode | WaitingForCapacity | ...
    message: str
    needs: Resources = Resources()
    free: Resources | None = None

    def to_dict(self) -> dict:
        d: dict = {"code": self.code, "message": self.message, "needs": self.needs.to_dict()}
        if self.free is not None:
            d["free"] = self.free.to_dict()
        return d


@dataclass(frozen=True)
class Admission:
    job_id: str
    site: str
    placements: tuple[TaskPlacement, ...]
    borrowing: bool = False


@dataclass(frozen=True)
class Preemption:
    job_id: str
    reason: str  # Reclaim | Priority | Consolidation | QuotaShrink | WindowPrepare | QueueDrained
    for_job: str | None = None


@dataclass(frozen=True)
class CapacityRequest:
    """A gang that no current node set fits, for the burst policy to consider."""

    job_id: str
    queue: str
    tasks: int
    per_task: Resources
    gpu_models: tuple[str, ...]
    waiting_since_s: float  # its submission: burst counts pending_wait_s from it


@dataclass(frozen=True)
class Plan:
    admissions: tuple[Admission, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    capacity_requests: tuple[CapacityRequest, ...] = ()
    pending: dict[str, PendingReason] = field(default_factory=dict)
    reservations: dict[str, tuple[str, ...]] = field(default_factory=dict)  # job id -> reserved nodes
    over_capability_since: dict[str, float] = field(default_factory=dict)  # queue -> since when (QuotaShrink)
    wake_at_s: float | None = None  # the next time a decision may change with nothing else happening
    unclaimed: tuple[str, ...] = ()  # jobs whose quota does not let them start on the cloud nodes bought for them: those are everyone's now
    # job -> (nodes, until): the nodes consolidation is emptying for it, which no other job may take until then
    consolidating: dict[str, tuple[tuple[str, ...], float]] = field(default_factory=dict)
    # mover -> (where it goes, until): held for it while it stops, and where it starts again
    moving: dict[str, tuple[tuple[TaskPlacement, ...], float]] = field(default_factory=dict)
    # job -> where it goes once what is being freed for it is free: it starts there first (pipelined)
    pipelined: dict[str, tuple[TaskPlacement, ...]] = field(default_factory=dict)
