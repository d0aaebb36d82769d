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
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)  # "INF" or "nan" as a string is a float to pydantic otherwise


class ResourceMap(Strict):
    """A resource amount. Which missing keys mean 0 and which mean "no limit" depends on the field."""

    gpu: NonNegativeFloat | None = None
    """GPUs (whole GPUs; fractions are shares of one)."""
    cpu: NonNegativeFloat | None = None
    """CPU cores."""
    memory_gib: NonNegativeFloat | None = None
    """Memory, GiB."""


class FederationSection(Strict):
    name: Name
    """The federation's name (metrics, the status page)."""
    timezone: str = "UTC"
    """IANA time zone of tidal windows, cron expressions and monthly budgets."""


class ApiSection(Strict):
    listen: str = "127.0.0.1:8266"
    """host:port the Ray Jobs API (and the federation's API) listens on; loopback unless you mean otherwise."""
    tokens_file: str | None = None
    """A file of bearer tokens and the queues each may use; unset: no authentication (loopback only)."""


class PriorityClassSpec(Strict):
    name: Name
    """The class name jobs ask for (`priority_class` in their metadata)."""
    value: int
    """Higher runs first and may preempt lower in its queue."""
    preemptible: bool = True
    """false: its jobs are never preempted, and run only within their queue's deserved share."""
    default: bool = False
    """The class of a job that names none (one class at most)."""


class GpuModelSpec(Strict):
    name: Name
    """The model's name, as node groups' `gpu_model` refer to it."""
    memory_gib: NonNegativeFloat
    """Memory of one GPU, GiB."""
    mig: bool = False
    """Whether the model can be sliced with MIG."""


class MigSetting(Strict):
    enabled: bool = False
    """Let the site's MIG manager slice this group's GPUs."""
    backend: Literal["auto", "gpu-operator", "nvml", "none"] = "auto"
    """Where layouts are applied: the GPU Operator on Kubernetes sites, NVML through a Ray job on the node elsewhere, or bookkeeping only (logical GPUs: local Ray workers, the simulator); auto picks by site kind."""


class NodeGroupSpec(Strict):
    name: Name
    """The group's name, unique in its site."""
    gpu_model: str | None = None
    """A GPU model's name; unset: a CPU-only node group."""
    gpus_per_node: NonNegInt = 0
    """GPUs per node."""
    cpus_per_node: NonNegativeFloat
    """CPU cores per node."""
    memory_gib_per_node: NonNegativeFloat
    """Memory per node, GiB."""
    count: NonNegInt | None = None
    """Fixed nodes (IDC); cloud groups use min_nodes / max_nodes."""
    min_nodes: NonNegInt | None = None
    """Cloud: nodes kept up even when idle."""
    max_nodes: NonNegInt | None = None
    """Cloud: the most nodes burst may run at once."""
    instance_type: str | None = None
    """AWS instance type of the group's nodes."""
    machine_type: str | None = None
    """GCP machine type of the group's nodes."""
    spot: bool = False
    """Spot (preemptible) capacity: cheaper, may be interrupted."""
    price_usd_per_hour: NonNegativeFloat = 0.0
    """Price of one node-hour, for budgets, burst order and showback."""
    fallback: str | None = None
    """The group burst turns to when this one reports no capacity (spot to on-demand)."""
    boot_s: NonNegativeFloat = 0.0
    """How long a node takes from request to joining its Ray cluster (the simulator's model)."""
    spot_interruptions_per_hour: NonNegativeFloat = 0.0
    """Simulator: the rate at which its spot nodes are interrupted, at random."""
    rack_label: str | None = None
    """Kubernetes: the node label naming a node's rack."""
    racks: PositiveInt = 1
    """Fixed nodes are spread over this many racks (for gang topology)."""
    rack: Name | None = None
    """Or: every node of the group is in this rack."""
    mig: MigSetting = MigSetting()
    """MIG slicing of this group's GPUs."""


class KubernetesProvider(Strict):
    kind: Literal["kubernetes"]
    """`kubernetes`: the site's nodes are read from a Kubernetes API server."""
    kubeconfig: str | None = None
    """Path of the kubeconfig; unset: in-cluster config or ~/.kube/config."""
    host: str | None = None
    """The API server's URL, overriding the kubeconfig's."""
    node_selector: str | None = None
    """A label selector of the nodes that belong to the site."""


class Cluster(Strict):
    """The site's whole Ray cluster, made by the Terraform module (`fedctl site up`): network,
    firewall, identity and a Ray head, besides the workers the federation scales."""

    head_public_ip: bool = False
    """The controller reaches the head over the internet (else within the network)."""
    controller_cidrs: list[str] = []
    """Who may reach the head's Ray ports: the controller's addresses (never a /0)."""
    head_boot_s: NonNegativeFloat = 300.0
    """How long a cluster that is down takes to come up before its first workers can join (the simulator's model; live, provisioning_timeout_s covers it)."""
    head_price_usd_per_hour: NonNegativeFloat = 0.0
    """What the head costs per hour while it is up: counted in the site's and the month's spend and in the hourly budget (no queue's: it serves them all)."""


class AwsCluster(Cluster):
    head_instance_type: str = "m6i.xlarge"
    """EC2 instance type of the Ray head."""
    zones: list[str] = []
    """Subnets the module makes when vpc_id is unset; empty: one, in a zone AWS picks."""
    instance_profile: str | None = None
    """An instance profile for the nodes; unset: a role that may read only the Ray token."""


class GcpCluster(Cluster):
    head_machine_type: str = "n2-standard-4"
    """Compute Engine machine type of the Ray head."""
    service_account: str | None = None
    """A service account for the nodes (email); unset: one that may read only the Ray token's secret."""


class AwsProvider(Strict):
    kind: Literal["aws"]
    """`aws`: EC2 instances through Terraform."""
    region: str
    """AWS region."""
    vpc_id: str | None = None
    """With subnet_ids: an existing network for the Terraform module."""
    subnet_ids: list[str] = []
    """Existing subnets to start nodes in."""
    launch_template: str | None = None
    """An EC2 launch template for the workers."""
    endpoint_url: str | None = None
    """An EC2 endpoint URL (a test server, a VPC endpoint)."""
    terraform_dir: str | None = None
    """Set: nodes are made by this Terraform module (infra/terraform/aws is the one shipped); unset: straight through the EC2 API."""
    image_id: str | None = None
    """The AMI (NVIDIA drivers, Ray, AWS CLI); else the module's terraform.tfvars names it."""
    ray_auth_token_parameter: str | None = None
    """An SSM SecureString holding the Ray token the controller sends; nodes read it at boot."""
    cluster: AwsCluster | None = None
    """Set: the module makes the site's whole Ray cluster (`fedctl site up`), not only workers."""


class GcpProvider(Strict):
    kind: Literal["gcp"]
    """`gcp`: Compute Engine instances."""
    project: str
    """GCP project id."""
    zones: list[str] = Field(min_length=1)
    """Zones to start nodes in, tried in order."""
    api_endpoint: str | None = None
    """A Compute Engine endpoint (a test server)."""
    terraform_dir: str | None = None
    """Set: nodes are made by this Terraform module (infra/terraform/gcp is the one shipped); unset: straight through the Compute Engine API."""
    image: str | None = None
    """The Terraform module's boot image (NVIDIA drivers, Ray, gcloud); else the module's default."""
    network: str | None = None
    """An existing VPC network for the Terraform module; unset: it makes one."""
    ray_auth_token_secret: str | None = None
    """A Secret Manager secret holding the Ray token the controller sends; nodes read it at boot."""
    cluster: GcpCluster | None = None
    """Set: the module makes the site's whole Ray cluster (`fedctl site up`), not only workers."""


class LocalProvider(Strict):
    """Nodes that are Ray processes on this machine (IDC) or started on demand (burst)."""

    kind: Literal["local"]
    """`local`: Ray worker processes on this machine."""
    start_delay_s: NonNegativeFloat = 0.0
    """How long a burst node takes to start (to mimic a cloud's boot)."""


class SimulatedProvider(Strict):
    kind: Literal["simulated"]
    """`simulated`: the simulator's cloud."""
    failure_rate: Annotated[float, Field(ge=0, le=1)] = 0.0
    """Chance that a node request fails for lack of capacity."""
    group_failure_rates: dict[Name, Annotated[float, Field(ge=0, le=1)]] = {}
    """Per node group, over failure_rate (spot scarcer than on-demand)."""
    group_lifetimes_s: dict[Name, Annotated[float, Field(gt=0, le=1e9)]] = {}
    """Per node group: each node is interrupted this long after it came up (a replay's known spot reclaims)."""

    def rate_for(self, group: str) -> float:
        return self.group_failure_rates.get(group, self.failure_rate)


Provider = Annotated[
    KubernetesProvider | AwsProvider | GcpProvider | LocalProvider | SimulatedProvider,
    Field(discriminator="kind"),
]


class SiteSpec(Strict):
    name: Name
    """The site's name."""
    kind: Literal["idc", "aws", "gcp", "local", "simulated"]
    """idc (fixed nodes), aws, gcp (cloud burst), local (Ray processes here) or simulated."""
    ray_address: str | None = None
    """The site's Ray cluster: its dashboard / Jobs API URL."""
    provider: Provider | None = None
    """Where the site's nodes come from; its `kind` picks the fields."""
    node_groups: list[NodeGroupSpec] = Field(min_length=1)
    """The site's kinds of node."""


class QueueBurst(Strict):
    """`burst:` on a queue as a mapping: bursting on, with a monthly budget of its own."""

    enabled: bool = True
    """Whether the queue's jobs may burst."""
    budget_usd_per_month: NonNegativeFloat | None = None
    """The cloud spend of this queue and those under it per month (federation time zone); reached, its jobs no longer burst (BurstBudgetExhausted) until the month turns."""


class QueueSpec(Strict):
    name: Name
    """The queue's name; jobs name a leaf queue."""
    parent: str | None = None
    """The parent queue's name; unset: a top-level queue."""
    guarantee: ResourceMap = ResourceMap()
    """Held for the queue even while it is idle (others may not take it); a parent's unset guarantee is its children's sum."""
    deserved: ResourceMap = ResourceMap()
    """Its fair share: what it may use and reclaim from borrowers; a parent's unset deserved is its children's sum."""
    capability: ResourceMap = ResourceMap()
    """The most it may ever use, borrowing included; unset: no limit."""
    borrowing_limit: ResourceMap = ResourceMap()
    """The most it may use beyond its deserved share; unset: no limit."""
    lending_limit: ResourceMap = ResourceMap()
    """The most of its unused deserved share others may borrow; unset: no limit."""
    weight: Annotated[float, Field(gt=0)] = 1.0
    """Its weight in sharing what is left above deserved shares."""
    sites: list[str] | None = None
    """The sites its jobs may run at; unset: as the nearest ancestor, and at the top every site."""
    burst: bool | QueueBurst | None = None
    """Whether its jobs may burst to the cloud (or a mapping with a monthly budget); unset: as the nearest ancestor, at the top no."""
    allowed_priority_classes: list[Name] | None = None
    """The priority classes its jobs may ask for; unset: as the nearest ancestor, at the top all."""
    max_running_jobs: PositiveInt | None = None
    """The most jobs it (with the queues under it) runs at once; unset: no limit."""


class PlacementPolicy(Strict):
    strategy: Literal["fragmentation-aware", "bestfit", "binpack", "spread"] = "fragmentation-aware"
    """How a task's node and GPUs are chosen: fragmentation-aware (FGD-style, the default), bestfit, binpack or spread."""
    gang_topology: Literal["prefer-same-rack", "require-same-rack", "any"] = "prefer-same-rack"
    """Whether a gang's tasks go in one rack: preferred, required, or any."""


class PreemptionPolicy(Strict):
    reclaim: bool = True
    """A queue within its deserved share takes back what others borrow, by preemption."""
    grace_s: NonNegativeFloat = 120.0
    """How long a preempted job has to stop (checkpoint) before it is killed and queued again."""
    max_victims_per_cycle: PositiveInt = 16
    """The most jobs one cycle preempts."""
    quota_shrink_delay_s: NonNegativeFloat = 300.0
    """How long a queue may stay above a capability a tidal window lowered before its excess is preempted, one job at a time."""
    reclaim_min_runtime_s: NonNegativeFloat = 0.0
    """How long a job runs before reclaim may take it, so capacity does not thrash between queues; priority preemption inside a queue is not held back."""
    borrow_within_cohort_max_priority: int | None = None
    """Kueue's borrowWithinCohort: a job that would borrow may take other queues' borrowed work of lower priority, at most this one (ReclaimWhileBorrowing), never leaving them below their deserved share; unset: off."""
    reclaim_backoff_s: NonNegativeFloat = 0.0
    """Kueue KEP-14468's reclaim back-off: after reclaim takes a queue's borrowed work, that queue may not borrow again for this long, doubling with each reclaim in a row (within reclaim_backoff_max_s of the last), so it is not admitted and reclaimed again and again; within its deserved share it is not held back. 0: off."""
    reclaim_backoff_max_s: PositiveFloat = 3600.0
    """The longest reclaim back-off; a queue not reclaimed from for this long starts again at reclaim_backoff_s."""
    consolidation: bool = True
    """KAI's consolidation: a gang that fragmentation alone keeps out moves the fewest preemptible jobs that can run elsewhere."""
    stale_gang_grace_s: NonNegativeFloat = 60.0
    """How long a gang left below its minimum of tasks (a node went away) keeps the rest before it is stopped and queued again whole."""
    site_lost_timeout_s: NonNegativeFloat = 900.0
    """How long a site may not answer before what runs there is queued again whole elsewhere (SiteLost; Kueue MultiKueue's workerLostTimeout); nothing new is sent to it meanwhile, and the runs it still has are stopped when it answers again."""


class FairSharePolicy(Strict):
    """Time-aware fair share (KAI's): a queue's past GPU use, decayed with this half-life and as
    a share of the capacity there was, counts against it when queues compete for capacity above
    their deserved share. Within deserved nothing changes. 0: only what runs now counts."""

    usage_half_life_s: NonNegativeFloat = 0.0
    """Half-life of the past GPU use that counts against a queue above its deserved share; 0: only what runs now counts."""
    usage_weight: NonNegativeFloat = 1.0
    """How much a past share weighs against a share held now."""


class BurstPolicy(Strict):
    enabled: bool = False
    """Whether pending work may buy cloud nodes."""
    pending_wait_s: NonNegativeFloat = 600.0
    """How long a job waits at the IDC before burst buys nodes for it."""
    budget_usd_per_hour: NonNegativeFloat = 0.0
    """The most the clouds may cost per hour (every burst site); 0: no burst."""
    budget_usd_per_month: NonNegativeFloat | None = None
    """The most the clouds may cost per month (federation time zone); unset: no monthly cap."""
    scale_in_idle_s: NonNegativeFloat = 900.0
    """How long a cloud node stays idle before it is released (and a cluster with nothing, before it is taken down)."""
    provisioning_timeout_s: NonNegativeFloat = 1200.0
    """How long a node request may take before it is given up and the next option tried."""
    order: Literal["cheapest", "listed"] = "cheapest"
    """Which node group burst tries first: the cheapest that fits, or as listed."""


class QueueOverride(Strict):
    guarantee: ResourceMap | None = None
    """The queue's guarantee in the window."""
    deserved: ResourceMap | None = None
    """Its deserved share in the window."""
    capability: ResourceMap | None = None
    """Its capability in the window."""
    borrowing_limit: ResourceMap | None = None
    """Its borrowing limit in the window."""
    lending_limit: ResourceMap | None = None
    """Its lending limit in the window."""


class BurstOverride(Strict):
    enabled: bool | None = None
    """Burst on or off in the window."""
    budget_usd_per_hour: NonNegativeFloat | None = None
    """The hourly cloud budget in the window."""


class MigTarget(Strict):
    layout: str
    """A layout's name from policies.mig.layouts."""
    gpus: NonNegInt
    """How many GPUs of the group take it."""


class Window(Strict):
    """Either `start`/`end` (HH:MM, on `days`), or a `cron` expression with a `duration_s`."""

    days: list[Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]] | None = None
    """Days the window is on (unset: every day)."""
    start: str | None = None
    """HH:MM it opens."""
    end: str | None = None
    """HH:MM it closes (before start: the next day)."""
    cron: str | None = None
    """Or a five-field cron expression of when it opens, in the federation's time zone: "0 8 * * 1-5"."""
    duration_s: PositiveFloat | None = None
    """With cron: how long it stays open."""
    prepare_s: NonNegativeFloat | None = None
    """How long before it opens the guarantees it raises are made ready (held idle, borrowers preempted); unset: the preemption grace or the MIG drain, whichever is longer."""


class Forecast(Strict):
    history_days: PositiveInt = 14
    """Days of past demand the forecast learns from."""
    lead_s: NonNegativeFloat = 900.0
    """How far ahead burst pre-warms nodes for the forecast demand."""


class TidalPolicy(Strict):
    name: Name
    """The policy's name."""
    window: Window | None = None
    """When it applies (a time window)."""
    forecast: Forecast | None = None
    """Or: it follows forecast demand."""
    queues: dict[str, QueueOverride] = {}
    """Quota overrides by queue while it applies."""
    mig: dict[str, dict[str, MigTarget]] = {}
    """MIG layout targets by site and node group while it applies."""
    burst: BurstOverride | None = None
    """Burst overrides while it applies."""


class MigPolicy(Strict):
    layouts: dict[str, dict[str, Annotated[int, Field(ge=1, le=7)]]] = {}
    """Named layouts: profile -> count (at most 7 instances fit a GPU)."""
    warm_pool: dict[str, dict[str, NonNegInt]] = {}
    """Instances kept free by site and profile, for inference that comes fast."""
    reconfigure_drain_s: NonNegativeFloat = 300.0
    """How long a GPU's jobs may drain before it is re-sliced."""
    reconfigure_s: NonNegativeFloat = 60.0
    """How long applying a GPU's layout takes (the simulator's delay)."""
    agent_runtime_env: dict | None = None
    """The NVML agent job's runtime_env, e.g. {"pip": ["nvidia-ml-py"]}."""


class PoliciesSection(Strict):
    placement: PlacementPolicy = PlacementPolicy()
    """Where tasks go."""
    preemption: PreemptionPolicy = PreemptionPolicy()
    """Reclaim, priority preemption, consolidation and grace."""
    fair_share: FairSharePolicy = FairSharePolicy()
    """Time-aware fair share."""
    burst: BurstPolicy = BurstPolicy()
    """Cloud burst and its budgets."""
    tidal: list[TidalPolicy] = []
    """Time windows and forecasts that reshape quotas, MIG and burst."""
    mig: MigPolicy = MigPolicy()
    """MIG layouts and re-slicing."""


class FederationSpec(Strict):
    federation: FederationSection
    """The federation's name and time zone."""
    api: ApiSection = ApiSection()
    """Where its API listens and who may use it."""
    gpu_models: list[GpuModelSpec] = []
    """GPU models beyond the built-in catalog."""
    priority_classes: list[PriorityClassSpec] = [PriorityClassSpec(name="normal", value=100, default=True)]
    """Job priority classes."""
    sites: list[SiteSpec] = Field(min_length=1)
    """The IDC and cloud sites."""
    queues: list[QueueSpec] = Field(min_length=1)
    """The queue tree."""
    policies: PoliciesSection = PoliciesSection()
    """Scheduling, burst, tidal and MIG policies."""
