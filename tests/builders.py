"""Small builders with defaults for core tests: a federation, nodes, jobs, and a round driver."""

from __future__ import annotations

from dataclasses import replace

from federation import schema
from federation.cluster import ClusterState
from federation.model import (
    Federation,
    JobSpec,
    Node,
    NodeGroup,
    PriorityClass,
    Queue,
    Resources,
    RunningJob,
    Site,
)
from federation.quota import QuotaTree
from federation.scheduler import Plan, Snapshot, schedule

GIB = 1024


def q(name, *, parent=None, guarantee=0, deserved=0, capability=None, borrowing=None, lending=None, weight=1.0, sites=None, burst=False) -> Queue:
    lim = Resources.unlimited()

    def gpus(v):
        return lim if v is None else Resources(round(v * 1000), lim.cpu_milli, lim.memory_mib)

    return Queue(
        name=name, parent=parent, guarantee=Resources.of(gpu=guarantee), deserved=Resources.of(gpu=deserved),
        capability=gpus(capability), borrowing_limit=gpus(borrowing), lending_limit=gpus(lending),
        weight=weight, sites=tuple(sites) if sites else None, burst=burst,
    )


def site(name, *, count=1, gpus=8, cpu=64, mem_gib=512, model="A100-80GB", max_nodes=0, kind="idc") -> Site:
    g = NodeGroup(name="g", site=name, gpu_model=model, gpus_per_node=gpus, node_resources=Resources.of(gpus, cpu, mem_gib),
                  count=count, max_nodes=max_nodes)
    return Site(name, kind, None, None, (g,))


def nodes_of(s: Site, racks: int = 1) -> list[Node]:
    out = []
    for g in s.node_groups:
        r = g.node_resources
        for i in range(g.count):
            out.append(Node(f"{s.name}-{i}", s.name, g.name, g.gpu_model, g.gpus_per_node, r.cpu_milli, r.memory_mib, rack=f"rack-{i % racks}"))
    return out


def fed(queues, sites=None, *, strategy="bestfit", reclaim=True, grace_s=0.0, max_victims=16, burst=False, topology="prefer-same-rack") -> Federation:
    sites = sites or [site("idc")]
    policies = schema.PoliciesSection(
        placement=schema.PlacementPolicy(strategy=strategy, gang_topology=topology),
        preemption=schema.PreemptionPolicy(reclaim=reclaim, grace_s=grace_s, max_victims_per_cycle=max_victims),
        burst=schema.BurstPolicy(enabled=burst),
    )
    return Federation(
        name="t", timezone="UTC", api=schema.ApiSection(), gpu_models={},
        priority_classes=(PriorityClass("high", 1000), PriorityClass("normal", 100, default=True), PriorityClass("low", 10)),
        sites=tuple(sites), queues=tuple(queues), policies=policies,
    )


def job(id, queue, *, tasks=1, gpus=1.0, cpu=0.0, mem_gib=0.0, priority=100, submit=0.0, preemptible=True, min_tasks=None, models=()) -> JobSpec:
    return JobSpec(id=id, queue=queue, tasks=tasks, per_task=Resources.of(gpus, cpu, mem_gib), submit_s=submit,
                   priority=priority, preemptible=preemptible, min_tasks=min_tasks, gpu_models=tuple(models))


def snapshot(f: Federation, *, pending=(), running=(), nodes=None, **kw) -> Snapshot:
    nodes = nodes if nodes is not None else [n for s in f.sites for n in nodes_of(s)]
    return Snapshot(f, tuple(nodes), tuple(running), tuple(pending), **kw)


def run_admitted(plan: Plan, pending, now=0.0) -> list[RunningJob]:
    """The running jobs that `plan`'s admissions start."""
    by_id = {j.id: j for j in pending}
    return [RunningJob(by_id[a.job_id], a.site, a.placements, now) for a in plan.admissions]


def admitted(plan: Plan) -> set[str]:
    return {a.job_id for a in plan.admissions}


def preempted(plan: Plan) -> set[str]:
    return {p.job_id for p in plan.preemptions}


def start_all(f: Federation, jobs, now=0.0) -> list[RunningJob]:
    """Schedule `jobs` on an empty federation and return them running (all must be admitted)."""
    plan = schedule(snapshot(f, pending=jobs), now)
    assert admitted(plan) == {j.id for j in jobs}, plan.pending
    return run_admitted(plan, jobs, now)


def mark_preempting(running: list[RunningJob], ids: set[str]) -> list[RunningJob]:
    return [replace(r, preempting=True) if r.spec.id in ids else r for r in running]


def quota_contents(t: QuotaTree) -> tuple:
    """What a quota tree holds, to compare two."""
    return (dict(t.queues), t.capacity, dict(t.usage), dict(t.jobs), dict(t.fixed), dict(t.held), dict(t.kids_held), t.root_usage, t.root_held)


def cluster_contents(c: ClusterState) -> tuple:
    """What the nodes hold and how they are indexed, to compare two cluster states."""
    nodes = {n: (list(st.gpu_free), st.cpu_free, st.mem_free, list(st.mig_free), st.tasks) for n, st in c.nodes.items()}
    groups = sorted(tuple(names) for names in c.groups.values())
    # each site's groups by free state, as placement walks them: every group under the free state of its nodes
    by_state = {site: sorted((c.nodes[c.groups[sig][0]].free_state(), tuple(c.groups[sig])) for key, sigs in fits.items() for sig in sigs
                             if all(c.nodes[n].fit_key == key for n in c.groups[sig]))
                for site, fits in c.site_groups.items() if fits}
    assert sum(len(v) for v in by_state.values()) == len(c.groups), "a group is filed under another free state, or not at all"
    return nodes, groups, dict(c.site_free_milli), by_state
