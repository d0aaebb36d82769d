"""The federation config file's schema: pydantic models, `extra="forbid"` and frozen at every level.

These classes say what the YAML may contain. `federation.config.load()` validates a file against
them, runs the cross-field checks, and turns the result into the domain types of
`federation.model`; nothing outside the loader handles raw YAML.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt

NonNegInt = Annotated[int, Field(ge=0)]
Name = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ResourceMap(Strict):
    """A resource amount. Which missing keys mean 0 and which mean "no limit" depends on the field."""

    gpu: NonNegativeFloat | None = None
    cpu: NonNegativeFloat | None = None
    memory_gib: NonNegativeFloat | None = None


class FederationSection(Strict):
    name: Name
    timezone: str = "UTC"


class ApiSection(Strict):
    listen: str = "127.0.0.1:8266"
    tokens_file: str | None = None


class PriorityClassSpec(Strict):
    name: Name
    value: int
    preemptible: bool = True
    default: bool = False


class GpuModelSpec(Strict):
    name: Name
    memory_gib: NonNegativeFloat
    mig: bool = False


class MigSetting(Strict):
    enabled: bool = False
    # where layouts are applied: the GPU Operator on Kubernetes sites, NVML through a Ray job on
    # the node elsewhere, or bookkeeping only (logical GPUs: local Ray workers, the simulator)
    backend: Literal["auto", "gpu-operator", "nvml", "none"] = "auto"


class NodeGroupSpec(Strict):
    name: Name
    gpu_model: str | None = None  # None: a CPU-only node group
    gpus_per_node: NonNegInt = 0
    cpus_per_node: NonNegativeFloat
    memory_gib_per_node: NonNegativeFloat
    count: NonNegInt | None = None  # fixed nodes (IDC); cloud groups use min_nodes / max_nodes
    min_nodes: NonNegInt | None = None
    max_nodes: NonNegInt | None = None
    instance_type: str | None = None
    machine_type: str | None = None
    spot: bool = False
    price_usd_per_hour: NonNegativeFloat = 0.0
    fallback: str | None = None
    boot_s: NonNegativeFloat = 0.0
    spot_interruptions_per_hour: NonNegativeFloat = 0.0
    rack_label: str | None = None
    racks: PositiveInt = 1  # fixed nodes are spread over this many racks (for topology)
    rack: Name | None = None  # or: every node of the group is in this rack (a group per rack names them as they are)
    mig: MigSetting = MigSetting()


class KubernetesProvider(Strict):
    kind: Literal["kubernetes"]
    kubeconfig: str | None = None
    host: str | None = None
    node_selector: str | None = None


class AwsCluster(Strict):
    """The site's whole Ray cluster, made by the Terraform module (`fedctl site up`): network,
    security group, instance profile and a Ray head, besides the workers the federation scales."""

    head_instance_type: str = "m6i.xlarge"
    head_public_ip: bool = False  # the controller reaches the head over the internet (else in the VPC)
    zones: list[str] = []  # subnets the module makes when vpc_id is unset; empty: one, AWS picks the zone
    controller_cidrs: list[str] = []  # who reaches the head's Ray ports: the controller's addresses
    instance_profile: str | None = None  # unset: a role that may read only the Ray token
    # how long a cluster that is down takes to come up before its first workers can join (the
    # simulator's model; live, the request's provisioning_timeout_s covers it)
    head_boot_s: NonNegativeFloat = 300.0


class AwsProvider(Strict):
    kind: Literal["aws"]
    region: str
    vpc_id: str | None = None  # with subnet_ids: an existing network for the Terraform module
    subnet_ids: list[str] = []
    launch_template: str | None = None
    endpoint_url: str | None = None
    terraform_dir: str | None = None
    image_id: str | None = None  # the Terraform module's AMI (NVIDIA drivers, Ray, AWS CLI); else its terraform.tfvars names it
    # an SSM SecureString holding the Ray token the controller sends; nodes read it at boot
    ray_auth_token_parameter: str | None = None
    cluster: AwsCluster | None = None


class GcpProvider(Strict):
    kind: Literal["gcp"]
    project: str
    zones: list[str] = Field(min_length=1)
    api_endpoint: str | None = None
    terraform_dir: str | None = None


class LocalProvider(Strict):
    """Nodes that are Ray processes on this machine (IDC) or started on demand (burst)."""

    kind: Literal["local"]
    start_delay_s: NonNegativeFloat = 0.0


class SimulatedProvider(Strict):
    kind: Literal["simulated"]
    failure_rate: Annotated[float, Field(ge=0, le=1)] = 0.0  # of a node request failing for lack of capacity
    group_failure_rates: dict[Name, Annotated[float, Field(ge=0, le=1)]] = {}  # per node group (spot scarcer than on-demand), over failure_rate
    # per node group: each node is interrupted this long after it came up (a replay's known spot
    # reclaims, deterministic; spot_interruptions_per_hour draws them at random instead)
    group_lifetimes_s: dict[Name, Annotated[float, Field(gt=0, le=1e9)]] = {}

    def rate_for(self, group: str) -> float:
        return self.group_failure_rates.get(group, self.failure_rate)


Provider = Annotated[
    KubernetesProvider | AwsProvider | GcpProvider | LocalProvider | SimulatedProvider,
    Field(discriminator="kind"),
]


class SiteSpec(Strict):
    name: Name
    kind: Literal["idc", "aws", "gcp", "local", "simulated"]
    ray_address: str | None = None
    provider: Provider | None = None
    node_groups: list[NodeGroupSpec] = Field(min_length=1)


class QueueBurst(Strict):
    """`burst:` on a queue as a mapping: bursting on, with a monthly budget of its own."""

    enabled: bool = True
    # the cloud spend of this queue and the queues under it, this month (federation time zone);
    # reached: its jobs no longer burst (BurstBudgetExhausted) until the month turns
    budget_usd_per_month: NonNegativeFloat | None = None


class QueueSpec(Strict):
    name: Name
    parent: str | None = None
    guarantee: ResourceMap = ResourceMap()
    deserved: ResourceMap = ResourceMap()
    capability: ResourceMap = ResourceMap()
    borrowing_limit: ResourceMap = ResourceMap()
    lending_limit: ResourceMap = ResourceMap()
    weight: Annotated[float, Field(gt=0)] = 1.0
    # unset: as the nearest ancestor that sets them (jobs go to leaves, so a parent's setting
    # is what its children do); at the top, every site and no burst
    sites: list[str] | None = None
    burst: bool | QueueBurst | None = None  # the budget is the queue's own; whether to burst is inherited
    # the priority classes its jobs may ask for (unset: as the nearest ancestor; at the top, all),
    # so that no submitter takes a top, non-preemptible class on a queue not meant for it
    allowed_priority_classes: list[Name] | None = None
    # the most jobs the queue (with the queues under it) runs at once; unset: no limit
    max_running_jobs: PositiveInt | None = None


class PlacementPolicy(Strict):
    strategy: Literal["fragmentation-aware", "bestfit", "binpack", "spread"] = "fragmentation-aware"
    gang_topology: Literal["prefer-same-rack", "require-same-rack", "any"] = "prefer-same-rack"


class PreemptionPolicy(Strict):
    reclaim: bool = True
    grace_s: NonNegativeFloat = 120.0
    max_victims_per_cycle: PositiveInt = 16
    # how long a queue may stay above a capability a tidal window lowered before its excess is
    # preempted, one job at a time (the next once the previous has stopped)
    quota_shrink_delay_s: NonNegativeFloat = 300.0
    # how long a job runs before reclaim may take it (Kueue KEP-14468's problem: without it,
    # capacity can thrash between two queues, each reclaiming what the other just started);
    # priority preemption inside a queue is not held back. 0 keeps reclaim immediate.
    reclaim_min_runtime_s: NonNegativeFloat = 0.0
    # Kueue's borrowWithinCohort (policy LowerPriority, maxPriorityThreshold): a job that would
    # itself borrow may take borrowed work of strictly lower priority, at most this one, from
    # other queues (reason ReclaimWhileBorrowing), never putting them below their deserved
    # share. None (the default): a job that borrows only preempts inside its own queue.
    borrow_within_cohort_max_priority: int | None = None
    # KAI's consolidation: a gang that fragmentation alone keeps out (the site has the GPUs free,
    # but not on the nodes it needs) moves the fewest preemptible jobs that can run elsewhere
    consolidation: bool = True
    # KAI's stale gang eviction: a gang whose node went away, left below its minimum of tasks,
    # keeps the rest this long (a node that comes back makes it whole) before it is stopped and
    # queued again, whole; an elastic gang still at its minimum goes on with fewer tasks
    stale_gang_grace_s: NonNegativeFloat = 60.0


class FairSharePolicy(Strict):
    """Time-aware fair share (KAI's): a queue's past GPU use, decayed with this half-life and as
    a share of the capacity there was, counts against it when queues compete for capacity above
    their deserved share. Within deserved nothing changes. 0: only what runs now counts."""

    usage_half_life_s: NonNegativeFloat = 0.0
    usage_weight: NonNegativeFloat = 1.0  # how much a past share weighs against a share held now


class BurstPolicy(Strict):
    enabled: bool = False
    pending_wait_s: NonNegativeFloat = 600.0
    budget_usd_per_hour: NonNegativeFloat = 0.0
    budget_usd_per_month: NonNegativeFloat | None = None
    scale_in_idle_s: NonNegativeFloat = 900.0
    provisioning_timeout_s: NonNegativeFloat = 1200.0
    order: Literal["cheapest", "listed"] = "cheapest"


class QueueOverride(Strict):
    guarantee: ResourceMap | None = None
    deserved: ResourceMap | None = None
    capability: ResourceMap | None = None
    borrowing_limit: ResourceMap | None = None
    lending_limit: ResourceMap | None = None


class BurstOverride(Strict):
    enabled: bool | None = None
    budget_usd_per_hour: NonNegativeFloat | None = None


class MigTarget(Strict):
    layout: str
    gpus: NonNegInt


class Window(Strict):
    """Either `start`/`end` (HH:MM, on `days`), or a `cron` expression with a `duration_s`."""

    days: list[Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]] | None = None
    start: str | None = None
    end: str | None = None
    cron: str | None = None  # five fields, read in the federation's timezone: "0 8 * * 1-5"
    duration_s: PositiveFloat | None = None
    # how long before `start` the guarantees it raises are made ready (held idle, borrowers
    # preempted); unset: the preemption grace or the MIG drain, whichever is longer
    prepare_s: NonNegativeFloat | None = None


class Forecast(Strict):
    history_days: PositiveInt = 14
    lead_s: NonNegativeFloat = 900.0


class TidalPolicy(Strict):
    name: Name
    window: Window | None = None
    forecast: Forecast | None = None
    queues: dict[str, QueueOverride] = {}
    mig: dict[str, dict[str, MigTarget]] = {}
    burst: BurstOverride | None = None


class MigPolicy(Strict):
    layouts: dict[str, dict[str, Annotated[int, Field(ge=1, le=7)]]] = {}  # at most 7 instances fit a GPU
    warm_pool: dict[str, dict[str, NonNegInt]] = {}
    reconfigure_drain_s: NonNegativeFloat = 300.0
    reconfigure_s: NonNegativeFloat = 60.0  # how long applying a GPU's layout takes (the simulator's delay)
    agent_runtime_env: dict | None = None  # the NVML agent job's runtime_env, e.g. {"pip": ["nvidia-ml-py"]}


class PoliciesSection(Strict):
    placement: PlacementPolicy = PlacementPolicy()
    preemption: PreemptionPolicy = PreemptionPolicy()
    fair_share: FairSharePolicy = FairSharePolicy()
    burst: BurstPolicy = BurstPolicy()
    tidal: list[TidalPolicy] = []
    mig: MigPolicy = MigPolicy()


class FederationSpec(Strict):
    federation: FederationSection
    api: ApiSection = ApiSection()
    gpu_models: list[GpuModelSpec] = []
    priority_classes: list[PriorityClassSpec] = [PriorityClassSpec(name="normal", value=100, default=True)]
    sites: list[SiteSpec] = Field(min_length=1)
    queues: list[QueueSpec] = Field(min_length=1)
    policies: PoliciesSection = PoliciesSection()
