"""The burst policy: when to ask a cloud site for nodes, which, how many, and when to give them back.

Pure: the caller (simulator or live controller) passes what it knows (capacity requests from
the core's plan, cloud nodes and in-flight requests, spend so far, blocked options) and gets
decisions back. Rules, in order:
- only queues with `burst: true`, only after a job has waited `pending_wait_s` since its
  submission (a job requeued after a preemption or a lost node has waited already: its
  capacity was taken back, so the fleet is not about to free up for it);
- the site and node group: among cloud groups that can hold a task of the gang and are not
  blocked, cheapest first (`order: cheapest`, by the price of the nodes needed) or as listed;
- the fewest nodes that fit the waiting gangs (gangs choosing the same group share new nodes);
- never above `max_nodes`, never above the hourly budget (nodes running or booting, at their
  price) nor once the month's spend reached the monthly budget; nor for a queue whose own
  month's cloud spend, with the queues under it, reached its `burst.budget_usd_per_month` (or an
  ancestor's did): its gangs wait for the fixed fleet, other queues still burst;
- an idle node is released after `scale_in_idle_s`; never a node with work on it, never below
  `min_nodes`, never while a request for its group is still being delivered (a gang's first
  nodes idle until its last one boots; the provisioning timeout bounds that).
Capacity errors and timeouts block a (site, group) for a while; the next cycle then fails over
to the next option (spot -> the group's fallback, then other groups and sites).

Forecast pre-warm: `prewarm_gpus` is the cloud capacity the forecast says burst queues will need
one lead time from now (`prewarm_gpus()`). Nodes are requested ahead, within the same limits
and budgets, until that much is up or booting, and idle nodes are not given back below it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from federation.feasibility import group_fits, tasks_per_node
from federation.model import CapacityRequest, Federation, JobSpec, NodeGroup, Queue, Resources

EPS_S = 1e-6  # timers fire at `since + wait`, which float addition may land a hair short of


@dataclass(frozen=True)
class CloudNode:
    name: str
    site: str
    group: str
    busy: bool
    idle_since_s: float | None  # when it last became idle (None while busy)
    free: Resources = Resources()  # what it has free now, for gangs that can use it


@dataclass(frozen=True)
class InFlight:
    request_id: str
    site: str
    group: str
    count: int
    requested_s: float
    jobs: tuple[str, ...]


@dataclass(frozen=True)
class BurstInputs:
    requests: tuple[CapacityRequest, ...]
    nodes: tuple[CloudNode, ...]
    in_flight: tuple[InFlight, ...]
    blocked: frozenset[tuple[str, str]]  # (site, group) not to be asked now
    enabled: bool
    budget_usd_per_hour: float
    month_spend_usd: float
    prewarm_gpus: float = 0.0  # cloud GPUs the forecast wants up one lead time from now
    served: frozenset[str] = frozenset()  # jobs whose bought nodes are up and held for them
    queue_spend_usd: dict[str, float] = field(default_factory=dict)  # this month's cloud spend charged to each queue (showback)
    heads: frozenset[str] = frozenset()  # cluster sites whose head is up (it costs its head_price_usd_per_hour)


@dataclass(frozen=True)
class ScaleUp:
    site: str
    group: str
    count: int
    jobs: tuple[str, ...]


@dataclass
class BurstDecision:
    scale_up: list[ScaleUp] = field(default_factory=list)
    release: list[str] = field(default_factory=list)  # node names
    reasons: dict[str, tuple[str, str]] = field(default_factory=dict)  # job id -> (code, message)
    next_check_s: float | None = None  # the earliest time a waiting job becomes eligible


def _group(fed: Federation, site: str, group: str) -> NodeGroup:
    return fed.site(site).node_group(group)


def decide(fed: Federation, now: float, inp: BurstInputs) -> BurstDecision:
    pol = fed.policies.burst
    out = BurstDecision()
    covered = {j for f in inp.in_flight for j in f.jobs} | inp.served
    burn = sum(_group(fed, n.site, n.group).price_usd_per_hour for n in inp.nodes)
    burn += sum(_group(fed, f.site, f.group).price_usd_per_hour * f.count for f in inp.in_flight)
    # a cluster site's head costs while it is up; a scale-up where it is down brings it up too
    headed = set(inp.heads) | {n.site for n in inp.nodes} | {f.site for f in inp.in_flight}
    burn += sum(fed.site(s).head_price_usd_per_hour for s in headed)
    used = {}
    for n in inp.nodes:
        used[(n.site, n.group)] = used.get((n.site, n.group), 0) + 1
    for f in inp.in_flight:
        used[(f.site, f.group)] = used.get((f.site, f.group), 0) + f.count
    month_left = pol.budget_usd_per_month is None or inp.month_spend_usd < pol.budget_usd_per_month
    spent = _queues_at_budget(fed, inp.queue_spend_usd)
    # free capacity per group, existing nodes first, then the new ones: gangs share them
    opened: dict[tuple[str, str], list[Resources]] = {}
    for n in inp.nodes:
        opened.setdefault((n.site, n.group), []).append(n.free)
    existing = {k: len(v) for k, v in opened.items()}
    plans: dict[tuple[str, str], list[str]] = {}
    for req in inp.requests:
        queue = fed.queue(req.queue)
        if not (inp.enabled and queue.burst) or req.job_id in covered:
            continue
        since = req.waiting_since_s
        due = since + pol.pending_wait_s
        if now < due - EPS_S:
            out.next_check_s = due if out.next_check_s is None else min(out.next_check_s, due)
            continue
        job = JobSpec(req.job_id, req.queue, req.tasks, req.per_task, since, gpu_models=req.gpu_models)
        options = _options(fed, job, queue.sites, inp.blocked)
        if not options:
            out.reasons[req.job_id] = ("NoBurstOption", "no cloud node group that can hold this gang is available now")
            continue
        if not month_left:
            out.reasons[req.job_id] = ("BurstBudgetExhausted", f"this month's cloud spend {inp.month_spend_usd:.0f} USD reached budget_usd_per_month")
            continue
        at_budget = next((q for q in _lineage(fed, req.queue) if q in spent), None) if spent else None
        if at_budget is not None:
            out.reasons[req.job_id] = ("BurstBudgetExhausted", f"queue {at_budget}'s cloud spend this month, {spent[at_budget]:.2f} USD, "
                                                               f"reached its burst.budget_usd_per_month {fed.queue(at_budget).burst_budget_usd_per_month:g}")
            continue
        placed = False
        for g, per_node in options:
            key = (g.site, g.name)
            filled = _fill(opened.get(key, []), g, job, per_node)
            extra = len(filled) - len(opened.get(key, []))
            if used.get(key, 0) + extra > g.max_nodes:
                continue
            head = fed.site(g.site).head_price_usd_per_hour if extra and g.site not in headed else 0.0
            if burn + extra * g.price_usd_per_hour + head > inp.budget_usd_per_hour:
                with_head = f" and {g.site}'s head" if head else ""
                out.reasons[req.job_id] = ("BurstBudgetExhausted", f"{extra} more node(s) of {g.name}{with_head} would pass budget_usd_per_hour "
                                                                   f"{inp.budget_usd_per_hour:g} (now {burn:.2f})")
                continue
            opened[key] = filled
            used[key] = used.get(key, 0) + extra
            burn += extra * g.price_usd_per_hour + head
            if extra:
                headed.add(g.site)
            plans.setdefault(key, []).append(req.job_id)
            out.reasons.pop(req.job_id, None)
            placed = True
            break
        if not placed and req.job_id not in out.reasons:
            out.reasons[req.job_id] = ("BurstCapacityExhausted", "every cloud node group that fits this gang is at max_nodes")
    for (site, group), jobs in plans.items():
        count = len(opened[(site, group)]) - existing.get((site, group), 0)
        if count:
            out.scale_up.append(ScaleUp(site, group, count, tuple(jobs)))
    if inp.enabled and month_left:
        out.scale_up += _prewarm(fed, inp, out.scale_up, used, burn, headed)
    out.release = _idle_to_release(fed, now, inp)
    return out


def _lineage(fed: Federation, queue: str) -> list[str]:
    """The queue and its ancestors, nearest first."""
    out = []
    q = fed.queue(queue)
    while q is not None:
        out.append(q.name)
        q = fed.queue(q.parent) if q.parent else None
    return out


def _queues_at_budget(fed: Federation, spend: dict[str, float]) -> dict[str, float]:
    """Queues whose month's cloud spend, theirs and their descendants', reached their own
    monthly budget -> that spend."""
    if not any(q.burst_budget_usd_per_month is not None for q in fed.queues):
        return {}
    names, subtree = {q.name for q in fed.queues}, {}
    for name, usd in spend.items():
        if name in names:  # idle time of nodes bought for no queue (pre-warm) is nobody's
            for a in _lineage(fed, name):
                subtree[a] = subtree.get(a, 0.0) + usd
    return {q.name: subtree.get(q.name, 0.0) for q in fed.queues
            if q.burst_budget_usd_per_month is not None and subtree.get(q.name, 0.0) >= q.burst_budget_usd_per_month}


def prewarm_gpus(fed: Federation, predicted: dict[str, float], fixed_gpus: float, queues: Sequence[Queue] | None = None) -> float:
    """The cloud GPUs to have up ahead of a predicted peak: what all queues are predicted to be
    able to use beyond the fixed fleet, but no more than the burst queues are. A queue's
    prediction counts up to what its quota lets it hold (capability, deserved plus borrowing
    limit, the same of each ancestor): a backlog beyond that waits for quota, not for nodes.
    `queues` are the quotas in force at the predicted hour (default: the config's)."""
    by_name = {q.name: q for q in (queues or fed.queues)}

    def ceiling(q: Queue) -> float:
        return min(q.capability.gpu, (q.deserved + q.borrowing_limit).gpu)

    usable = {}
    for leaf, v in predicted.items():
        q, cap = by_name[leaf], float("inf")
        while q is not None:
            cap = min(cap, ceiling(q))
            q = by_name.get(q.parent) if q.parent else None
        usable[leaf] = min(v, cap)
    # an ancestor's ceiling binds its leaves together
    held: dict[str, float] = {}
    for leaf, v in usable.items():
        q = by_name[leaf]
        while q.parent:
            held[q.parent] = held.get(q.parent, 0.0) + v
            q = by_name[q.parent]
    scale = {}
    for leaf in usable:
        f, q = 1.0, by_name[leaf]
        while q.parent:
            p = by_name[q.parent]
            if held[p.name] > ceiling(p):
                f = min(f, ceiling(p) / held[p.name])
            q = p
        scale[leaf] = f
    total = sum(v * scale[q] for q, v in usable.items())
    burstable = sum(v * scale[q] for q, v in usable.items() if by_name[q].burst)
    return min(burstable, max(0.0, total - fixed_gpus))


def _cloud_gpus(fed: Federation, inp: BurstInputs, ups: list[ScaleUp]) -> float:
    return (sum(_group(fed, n.site, n.group).gpus_per_node for n in inp.nodes)
            + sum(_group(fed, f.site, f.group).gpus_per_node * f.count for f in inp.in_flight)
            + sum(_group(fed, u.site, u.group).gpus_per_node * u.count for u in ups))


def _prewarm(fed: Federation, inp: BurstInputs, ups: list[ScaleUp], used: dict, burn: float, headed: set[str]) -> list[ScaleUp]:
    """Nodes for the forecast's gap, cheapest GPUs first (or as listed), for no job yet."""
    gap = inp.prewarm_gpus - _cloud_gpus(fed, inp, ups)
    groups = [g for s in fed.sites if s.is_cloud for g in s.node_groups if g.elastic and g.gpus_per_node and (s.name, g.name) not in inp.blocked]
    if fed.policies.burst.order == "cheapest":
        groups.sort(key=lambda g: g.price_usd_per_hour / g.gpus_per_node)
    out = []
    for g in groups:
        if gap <= EPS_S:
            break
        key = (g.site, g.name)
        count = min(math.ceil(gap / g.gpus_per_node), g.max_nodes - used.get(key, 0))
        head = fed.site(g.site).head_price_usd_per_hour if g.site not in headed else 0.0
        if g.price_usd_per_hour > 0 and math.isfinite(inp.budget_usd_per_hour):
            count = min(count, math.floor((inp.budget_usd_per_hour - burn - head) / g.price_usd_per_hour + EPS_S))
        elif head > 0 and burn + head > inp.budget_usd_per_hour:
            count = 0
        if count <= 0:
            continue
        out.append(ScaleUp(g.site, g.name, count, ()))
        used[key] = used.get(key, 0) + count
        burn += count * g.price_usd_per_hour + head
        headed.add(g.site)
        gap -= count * g.gpus_per_node
    return out


def _options(fed: Federation, job: JobSpec, queue_sites, blocked) -> list[tuple[NodeGroup, int]]:
    opts = []
    for s in fed.sites:
        if queue_sites is not None and s.name not in queue_sites:
            continue
        for g in s.node_groups:
            if not g.elastic or (s.name, g.name) in blocked or not group_fits(g, job.per_task, job.gpu_models, job.mig_profile):
                continue
            per_node = tasks_per_node(g, job)
            if per_node:
                opts.append((g, per_node))
    if fed.policies.burst.order == "cheapest":
        opts.sort(key=lambda o: math.ceil((job.min_tasks or job.tasks) / o[1]) * o[0].price_usd_per_hour)
    # a blocked group's `fallback` is where its config says to go next (spot -> on-demand)
    fallbacks = {(site, g.fallback) for s in fed.sites for g in s.node_groups if (site := s.name, g.name) in blocked and g.fallback}
    opts.sort(key=lambda o: (o[0].site, o[0].name) not in fallbacks)
    return opts


def _fill(free: list[Resources], g: NodeGroup, job: JobSpec, per_node: int) -> list[Resources]:
    """The new nodes' free capacity after first-fit of the gang into them, adding nodes as needed."""
    out = list(free)
    left = job.min_tasks or job.tasks
    for i in range(len(out)):
        while left and job.per_task.fits_in(out[i]):
            out[i] = out[i] - job.per_task
            left -= 1
    while left:
        n = min(per_node, left)
        out.append(g.node_resources - job.per_task.times(n))
        left -= n
    return out


def _idle_to_release(fed: Federation, now: float, inp: BurstInputs) -> list[str]:
    idle_s = fed.policies.burst.scale_in_idle_s
    count: dict[tuple[str, str], int] = {}
    for n in inp.nodes:
        count[(n.site, n.group)] = count.get((n.site, n.group), 0) + 1
    delivering = {(f.site, f.group) for f in inp.in_flight}
    spare = _cloud_gpus(fed, inp, []) - inp.prewarm_gpus  # what may go without undoing the pre-warm
    out = []
    for n in sorted(inp.nodes, key=lambda n: (n.idle_since_s or 0, n.name)):
        g = _group(fed, n.site, n.group)
        if n.busy or n.idle_since_s is None or now < n.idle_since_s + idle_s - EPS_S or (n.site, n.group) in delivering:
            continue
        if count[(n.site, n.group)] <= g.min_nodes or spare < g.gpus_per_node - EPS_S:
            continue
        count[(n.site, n.group)] -= 1
        spare -= g.gpus_per_node
        out.append(n.name)
    return out
