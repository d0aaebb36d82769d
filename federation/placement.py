"""Gang placement: all tasks of a gang on one site, on as few nodes and racks as they fit.

The strategy (policies/placement.py) only scores nodes and picks GPUs; this module decides the
shape of the search, the same way for every strategy, and never leaves a partial gang behind.
It works on groups of nodes with the same free state (see `federation.cluster`), so its cost
grows with the number of distinct node states, not with the number of nodes.
"""

from __future__ import annotations

from collections import defaultdict

from federation.cluster import ClusterState, NodeState, tasks_that_fit
from federation.model import JobSpec, TaskPlacement
from policies.placement import Strategy


def _fit(cluster: ClusterState, job: JobSpec, st: NodeState) -> int:
    """Tasks of `job` one node of `st`'s free state takes (cached: the state decides it)."""
    key = (st.fit_key, job.shape_key)
    k = cluster.fit_cache.get(key)
    if k is None:
        if len(cluster.fit_cache) > 500_000:  # bound it over long simulations
            cluster.fit_cache.clear()
        k = cluster.fit_cache[key] = tasks_that_fit(job, st, job.tasks)
    return k


def fitting(cluster: ClusterState, site: str, job: JobSpec) -> dict[int, int]:
    """The site's free states that hold at least one task of `job`, with how many (a free state
    gone from the site since may still be in it: skip what `site_groups` no longer has). Kept per
    site and shape, and brought up to date from the states that appeared since: a shared-GPU
    workload leaves hundreds of distinct free states, and a task fits a tenth of them."""
    added = cluster.site_added.get(site, [])
    key = (site, job.shape_key)
    stored = cluster.fitting.get(key)
    hit = stored if stored is not None and stored[0] is added else (added, 0, {})  # else the site's list was started again: so is this
    _, seen, fits = hit
    if seen < len(added):
        groups, nodes, states = cluster.groups, cluster.nodes, cluster.site_groups.get(site, {})
        for fit_key in added[seen:]:
            sigs = states.get(fit_key)
            if sigs is not None and fit_key not in fits and (k := _fit(cluster, job, nodes[groups[next(iter(sigs))][0]])):
                fits[fit_key] = k
        hit = (added, len(added), fits)
    if hit is not stored:
        if len(cluster.fitting) > 20_000:  # bound it over long simulations (each holds up to a site's free states)
            cluster.fitting.clear()
        cluster.fitting[key] = hit
    return fits


def _groups(cluster: ClusterState, site: str, job: JobSpec, blocked: frozenset[str]) -> list[tuple[NodeState, int, int]]:
    """(representative, usable members, tasks one member fits) per free-state group of the site."""
    out: list[tuple[NodeState, int, int]] = []
    if job.mig_profile is None and job.per_task.gpu_milli > cluster.site_free_milli.get(site, 0):
        return out  # not one task's GPUs free on the whole site: no group need be looked at
    # the hottest loop of a full cycle: the groups walked inline
    groups, nodes, states = cluster.groups, cluster.nodes, cluster.site_groups.get(site, {})
    for fit_key, k in fitting(cluster, site, job).items():
        sigs = states.get(fit_key)
        if sigs is None:
            continue
        for sig in sigs:
            names = groups[sig]
            usable = cluster.members(sig, blocked) if blocked else len(names)
            if usable:
                out.append((nodes[names[0]], usable, k))
    return out


def capacity_for(cluster: ClusterState, site: str, job: JobSpec, blocked: frozenset[str] = frozenset()) -> int:
    """How many tasks of `job` the site could take now (capped at the gang size). Kept per site
    and shape while the site's nodes do not change: in a full cycle whose preemptions are spent,
    thousands of waiting jobs of a few shapes ask it of a site that no longer changes."""
    if blocked:
        return _count(cluster, site, job, blocked)
    key, changes = (site, job.shape_key), cluster.site_changes.get(site, 0)
    hit = cluster.capacity_cache.get(key)
    if hit is None or hit[0] != changes:
        if len(cluster.capacity_cache) > 100_000:  # bound it over long simulations
            cluster.capacity_cache.clear()
        hit = cluster.capacity_cache[key] = (changes, _count(cluster, site, job, blocked))
    return hit[1]


def _count(cluster: ClusterState, site: str, job: JobSpec, blocked: frozenset[str]) -> int:
    return min(job.tasks, sum(k * n for _, n, k in _groups(cluster, site, job, blocked)))


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
    if job.mig_profile is None and job.per_task.gpu_milli * (job.min_tasks or job.tasks) > cluster.site_free_milli.get(site, 0):
        return None  # more GPUs than the site has free, however they are spread
    if job.tasks == 1:  # the search finds whether any node holds it: no capacity to count, no rack to choose
        return _greedy(cluster, job, 1, strategy, site, None, blocked)
    groups = _groups(cluster, site, job, blocked)
    capacity = sum(k * n for _, n, k in groups)
    want = min(job.tasks, capacity)
    if want < (job.min_tasks or job.tasks) or want == 0:
        return None
    rack = None
    if want > 1 and topology != "any":
        by_rack: dict[str, int] = defaultdict(int)
        for rep, n, k in groups:
            by_rack[rep.node.rack] += k * n
        racks = sorted((total, r) for r, total in by_rack.items() if total >= want)
        if racks:  # the smallest rack that holds the whole gang keeps the larger racks whole
            rack = racks[0][1]
        elif topology == "require-same-rack":
            return None
    return _greedy(cluster, job, want, strategy, site, rack, blocked)


def _greedy(cluster: ClusterState, job: JobSpec, want: int, strategy: Strategy, site: str, rack: str | None, blocked: frozenset[str]) -> list[TaskPlacement] | None:
    placed: list[TaskPlacement] = []
    used: set[str] = set()
    one_each = strategy.one_task_per_node
    while len(placed) < want:
        remaining = want - len(placed)
        best = None
        # alike free states in other racks score alike: score the first node by name, once
        first: list[tuple[str, int]] = []  # per free state that fits: (its first usable node by name, tasks it takes)
        groups, nodes, states = cluster.groups, cluster.nodes, cluster.site_groups.get(site, {})
        skip = (blocked | used) if one_each else blocked
        for fit_key, k in fitting(cluster, site, job).items():
            sigs = states.get(fit_key)
            if sigs is None:
                continue
            have = None
            for sig in sigs:
                names = groups[sig]
                if rack is not None and nodes[names[0]].node.rack != rack:
                    continue
                if have is not None and names[0] >= have:
                    continue  # sorted by name: nothing in this group comes first
                name = next((n for n in names if n not in skip), None) if skip else names[0]
                if name is not None and (have is None or name < have):
                    have = name
            if have is not None:
                first.append((have, k))
        for name, k in first:
            member = nodes[name]
            k = min(k, 1 if one_each else remaining)
            key = (-k, strategy.score(member, job, k), name)
            if best is None or key < best[0]:
                best = (key, member, k)
        if best is None:
            if one_each and used:
                used.clear()  # more tasks than nodes: a second round of one task per node
                continue
            cluster.apply(job, placed, sign=-1)
            return None
        _, member, k = best
        for _ in range(k):
            p = strategy.choose_gpus(member, job).placement(member.node.name)
            cluster.apply(job, [p])
            placed.append(p)
        used.add(member.node.name)
    return placed
