"""Gang placement: all tasks of a gang on one site, on as few nodes and racks as they fit.

The strategy (policies/placement.py) only scores nodes and picks GPUs; this module decides the
shape of the search, the same way for every strategy, and never leaves a partial gang behind.
"""

from __future__ import annotations

from collections import defaultdict

from federation.cluster import ClusterState, NodeState, tasks_that_fit
from federation.model import JobSpec, TaskPlacement
from policies.placement import Strategy


def _groups(cluster: ClusterState, site: str, job: JobSpec, blocked: frozenset[str]) -> list[tuple[NodeState, list[NodeState], int]]:
    """(representative, usable members, tasks one member fits) per free-state group of the site."""
    out = []
    for rep in cluster.representatives({site}):
        k = tasks_that_fit(job, rep, job.tasks)
        if k == 0:
            continue
        members = [m for m in cluster.members(rep) if m.node.name not in blocked]
        if members:
            out.append((rep, members, k))
    return out


def capacity_for(cluster: ClusterState, site: str, job: JobSpec, blocked: frozenset[str] = frozenset()) -> int:
    """How many tasks of `job` the site could take now (capped at the gang size)."""
    total = 0
    for _, members, k in _groups(cluster, site, job, blocked):
        total += k * len(members)
        if total >= job.tasks:
            return job.tasks
    return total


def place_gang(
    cluster: ClusterState,
    job: JobSpec,
    site: str,
    strategy: Strategy,
    topology: str = "prefer-same-rack",
    blocked: frozenset[str] = frozenset(),
) -> list[TaskPlacement] | None:
    """Place the gang (at least `min_tasks` of it, if elastic) on `site`, or return None.

    On success the placements are applied to `cluster`; on failure `cluster` is unchanged.
    """
    groups = _groups(cluster, site, job, blocked)
    capacity = sum(k * len(members) for _, members, k in groups)
    want = min(job.tasks, capacity)
    if want < (job.min_tasks or job.tasks) or want == 0:
        return None
    candidates = [m for _, members, _ in groups for m in members]
    if want > 1 and topology != "any":
        by_rack: dict[str, int] = defaultdict(int)
        for rep, members, k in groups:
            by_rack[rep.node.rack] += k * len(members)
        racks = sorted((total, rack) for rack, total in by_rack.items() if total >= want)
        if racks:  # the smallest rack that holds the whole gang keeps the larger racks whole
            rack = racks[0][1]
            candidates = [m for m in candidates if m.node.rack == rack]
        elif topology == "require-same-rack":
            return None
    return _greedy(cluster, job, want, strategy, {m.node.name for m in candidates})


def _greedy(cluster: ClusterState, job: JobSpec, want: int, strategy: Strategy, allowed: set[str]) -> list[TaskPlacement] | None:
    placed: list[TaskPlacement] = []
    used: set[str] = set()
    site = cluster.nodes[next(iter(allowed))].node.site
    while len(placed) < want:
        remaining = want - len(placed)
        best = None
        for rep in cluster.representatives({site}):
            member = next((cluster.nodes[n] for n in cluster.groups[rep.sig] if n in allowed and not (strategy.one_task_per_node and n in used)), None)
            if member is None:
                continue
            k = tasks_that_fit(job, member, 1 if strategy.one_task_per_node else remaining)
            if k == 0:
                continue
            key = (-k, strategy.score(member, job, k), member.node.name)
            if best is None or key < best[0]:
                best = (key, member, k)
        if best is None:
            if strategy.one_task_per_node and used:
                used.clear()  # more tasks than nodes: a second round of one task per node
                continue
            cluster.apply(job, placed, sign=-1)
            return None
        _, member, k = best
        for _ in range(k):
            fit = strategy.choose_gpus(member, job)
            p = fit.placement(member.node.name)
            cluster.apply(job, [p])
            placed.append(p)
        used.add(member.node.name)
    return placed
