"""A site's MIG manager (pure): which GPUs to re-slice, and when, from the demand it sees.

After each scheduling cycle the manager of a site with MIG-enabled node groups looks at
- the MIG demand per profile: instances that running jobs hold (kept where they are), the tasks
  of pending MIG jobs the core could not place for want of an instance (capacity reasons only: a
  job waiting for quota would not start if its instance existed), the warm pool (idle instances
  kept ready so that an inference job starts without waiting for a reconfiguration), and the
  layouts of tidal windows active now or starting within one drain period (so that they are
  sliced by the window's start), and the forecast's prediction one lead time ahead;
- the whole-GPU demand: pending jobs wanting whole or shared GPUs of the group's model that the
  core could not place.
It plans each MIG-enabled group with the planner (GPUs holding whole-GPU work or being
reconfigured are locked; busy instances are never moved or destroyed), then gives sliced GPUs
with no busy instance back whole, while whole-GPU work waits and the MIG demand is still met
without them. A GPU is changed only when every instance it loses is idle, so a reconfiguration
never disturbs running work. An empty layout means MIG off: the GPU is used whole.

Draining: when MIG demand stays unmet and the group's other GPUs all hold whole-GPU work, the
manager cordons one node (the one with the fewest busy GPUs), so that no new work lands there;
its GPUs are sliced by the normal plan as their work ends. A drain ends when the demand is met or
after `reconfigure_drain_s`. The manager never stops running work itself: taking capacity from
a running job is the core's decision, under the quota rules.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from federation.cluster import GPU
from federation.mig.catalog import CATALOG
from federation.mig.planner import plan
from federation.model import Federation, JobSpec, Node, NodeGroup, RunningJob
from policies.tidal import effective_mig

#: pending reasons that mean "no room now": an instance (or a whole GPU) would let the job start
CAPACITY_REASONS = frozenset({"WaitingForCapacity", "WaitingForBurst"})

Layout = tuple[tuple[str, int], ...]  # (profile, start) per instance on one GPU


@dataclass(frozen=True)
class Reconfigure:
    node: str
    gpu: int
    layout: Layout  # the target; () gives the GPU back whole
    kept: Layout  # busy instances it keeps, unmoved


@dataclass(frozen=True)
class MigDecision:
    reconfigure: tuple[Reconfigure, ...] = ()
    cordon: tuple[str, ...] = ()  # nodes to start draining
    uncordon: tuple[str, ...] = ()  # drains that ended
    unmet: dict[str, int] | None = None  # profile -> instances the plan could not provide


def gpu_layouts(node: Node) -> dict[int, Layout]:
    out: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for gpu, profile, start in node.mig_layout:
        out[gpu].append((profile, start))
    return {g: tuple(sorted(v, key=lambda i: i[1])) for g, v in out.items()}


def with_layout(node: Node, gpu: int, layout: Layout, reconfiguring: bool) -> Node:
    """`node` with GPU `gpu` holding `layout`, marked as being re-sliced or not."""
    kept = tuple(i for i in node.mig_layout if i[0] != gpu) + tuple((gpu, p, s) for p, s in layout)
    rec = set(node.reconfiguring) - {gpu} | ({gpu} if reconfiguring else set())
    return replace(node, mig_layout=tuple(sorted(kept)), reconfiguring=tuple(sorted(rec)))


class MigManager:
    def __init__(self, fed: Federation, site: str):
        self.fed, self.site = fed, site
        self.groups: tuple[NodeGroup, ...] = tuple(
            g for g in fed.site(site).node_groups if g.mig_enabled and g.gpu_model in CATALOG)
        self.warm: dict[str, int] = dict(fed.policies.mig.warm_pool.get(site, {}))
        self.drain_s = fed.policies.mig.reconfigure_drain_s
        self.layouts = fed.policies.mig.layouts
        self.draining: dict[str, float] = {}  # node -> since when
        self.rest_until: dict[str, float] = {}  # group -> no new drain before (after one timed out)
        self.in_flight: dict[tuple[str, int], Layout] = {}  # (node, gpu) -> the layout it is being given
        self.queue_sites = {q.name: q.sites for q in fed.queues}

    @property
    def active(self) -> bool:
        return bool(self.groups)

    def _targets(self, local: datetime) -> dict[str, Counter]:
        """Group -> instances its tidal layouts want, now or one drain period ahead (the larger)."""
        out: dict[str, Counter] = defaultdict(Counter)
        for at in (local, local + timedelta(seconds=self.drain_s)):
            for group, target in effective_mig(self.fed, at).get(self.site, {}).items():
                want = Counter({p: n * target.gpus for p, n in self.layouts[target.layout].items()})
                out[group] = out[group] | want
        return out

    def _mine(self, job: JobSpec, g: NodeGroup) -> bool:
        sites = self.queue_sites.get(job.queue)
        return (sites is None or self.site in sites) and (not job.gpu_models or g.gpu_model in job.gpu_models)

    def decide(self, now: float, local: datetime, nodes: Sequence[Node], running: Iterable[RunningJob],
               waiting: Iterable[JobSpec], forecast: dict[str, int] | None = None) -> MigDecision:
        """What to change now. `waiting` are the pending jobs the core could not place for want of
        capacity (see CAPACITY_REASONS); `nodes` and `running` are the site's. `forecast` is the
        instances per profile predicted for the site one lead time ahead: a learned window,
        held like a tidal layout."""
        waiting = list(waiting)
        running = list(running)
        still = {(n.name, i) for n in nodes for i in n.reconfiguring}
        self.in_flight = {k: v for k, v in self.in_flight.items() if k in still}
        by_group: dict[str, list[Node]] = defaultdict(list)
        for n in sorted(nodes, key=lambda n: n.name):
            by_group[n.node_group].append(n)
        busy_inst: dict[str, set[tuple[int, str, int]]] = defaultdict(set)
        busy_gpu: dict[str, set[int]] = defaultdict(set)  # GPUs with whole or shared-GPU work
        for r in running:
            for p in r.placements:
                if p.mig is not None:
                    busy_inst[p.node].add(p.mig)
                else:
                    busy_gpu[p.node].update(p.gpus)
        targets = self._targets(local)
        mig_wait = Counter()
        for j in waiting:
            sites = self.queue_sites.get(j.queue)
            if j.mig_profile is not None and (sites is None or self.site in sites):  # not for a queue kept to other sites
                mig_wait[j.mig_profile] += j.min_tasks or j.tasks
        changes: list[Reconfigure] = []
        cordon: list[str] = []
        uncordon: list[str] = []
        unmet_all: Counter = Counter()
        for g in self.groups:
            group_nodes = by_group.get(g.name, [])
            gpus = [(n, i) for n in group_nodes for i in range(n.gpus)]
            if not gpus:
                continue
            profiles = CATALOG[g.gpu_model].profiles
            current, locked, busy_count = [], set(), Counter()
            layouts = {n.name: gpu_layouts(n) for n in group_nodes}
            for k, (n, i) in enumerate(gpus):
                # a GPU being re-sliced counts with what it will hold: else each arrival in the
                # meantime would slice one more GPU
                lay = self.in_flight.get((n.name, i), ()) if i in n.reconfiguring else layouts[n.name].get(i, ())
                busy = busy_inst.get(n.name, set())
                current.append([{"profile": p, "start": s, "busy": (i, p, s) in busy} for p, s in lay])
                busy_count.update(p for p, s in lay if (i, p, s) in busy)
                # a node being re-sliced gets no second change until that one ends: the GPU
                # Operator applies one config per node at a time (and the simulator so models it)
                if i in busy_gpu.get(n.name, ()) or n.reconfiguring:
                    locked.add(k)
            waiting_here = Counter({p: c for p, c in mig_wait.items() if p in profiles})
            # hard demand is given back whole for nobody; the warm pool yields to waiting whole-GPU work
            predicted = Counter({p: c for p, c in (forecast or {}).items() if p in profiles})
            hard = (busy_count + waiting_here) | targets.get(g.name, Counter()) | predicted
            soft = Counter({p: c for p, c in self.warm.items() if p in profiles})
            demand = (busy_count + waiting_here + soft) | hard
            top: dict[str, int] = {}  # the highest priority waiting for each profile here
            for j in waiting:
                if j.mig_profile in demand and self._mine(j, g):
                    top[j.mig_profile] = max(top.get(j.mig_profile, j.priority), j.priority)
            weights = {p: float(top.get(p, 1)) for p in demand}
            # GPUs already sliced first; whole ones only for what they cannot hold, since a
            # whole GPU someone else can use is worth keeping (and one 1g instance ends that)
            whole = {k for k, c in enumerate(current) if not c}
            first = plan(g.gpu_model, len(gpus), dict(demand), current, weights, frozenset(locked | whole))
            res = first
            if first.unsatisfied:
                # a whole GPU that must be sliced is sliced full of what is missing: the next
                # arrivals land there instead of slicing one more whole GPU each
                kept_busy = [{(x["profile"], x["start"]) for x in c if x["busy"]} for c in current]
                after = [[{**i, "busy": (i["profile"], i["start"]) in kept_busy[k]} for i in lay] for k, lay in enumerate(first.layouts)]
                full = {p: demand[p] - u + -(-u // profiles[p].max_count) * profiles[p].max_count for p, u in first.unsatisfied.items()}
                res = plan(g.gpu_model, len(gpus), {**demand, **full}, after, weights, frozenset(locked))
                got = {p: min(res.satisfied.get(p, 0), demand[p]) for p in demand}
                res = replace(res, satisfied=got, unsatisfied={p: demand[p] - got[p] for p in first.unsatisfied if got[p] < demand[p]})
            target = [tuple((i["profile"], int(i["start"])) for i in lay) for lay in res.layouts]
            self._give_back_whole(g, gpus, current, target, locked, hard, waiting)
            for k, (n, i) in enumerate(gpus):
                cur = tuple((x["profile"], x["start"]) for x in current[k])
                if target[k] != cur:
                    kept = tuple((x["profile"], x["start"]) for x in current[k] if x["busy"])
                    changes.append(Reconfigure(n.name, i, target[k], kept))
                    self.in_flight[(n.name, i)] = target[k]
            # what the plan leaves unmet for jobs (and windows) that wait, not for the warm pool
            unmet = Counter({p: c for p, c in res.unsatisfied.items() if waiting_here[p] or targets.get(g.name, {}).get(p)})
            mig_wait.subtract(Counter({p: max(0, res.satisfied.get(p, 0) - busy_count[p]) for p in waiting_here}))
            mig_wait = +mig_wait
            unmet_all.update(unmet)
            self._drain(now, g, group_nodes, busy_gpu, bool(unmet), cordon, uncordon)
        return MigDecision(tuple(changes), tuple(cordon), tuple(uncordon), dict(unmet_all))

    def _give_back_whole(self, g: NodeGroup, gpus: list[tuple[Node, int]], current: list[list[dict]],
                         target: list[Layout], locked: set[int], demand: Counter, waiting: list[JobSpec]) -> None:
        """Empty sliced GPUs with no busy instance while whole-GPU work waits, as long as the
        hard MIG demand (busy, waiting, tidal) is still met without them. Nodes with the most whole free GPUs go first, so
        that whole nodes come free for large tasks."""
        want = sum(j.tasks * -(-j.per_task.gpu_milli // GPU) for j in waiting
                   if j.mig_profile is None and j.per_task.gpu_milli and self._mine(j, g))
        free_whole = Counter()
        for k, (n, _) in enumerate(gpus):
            if not target[k] and k not in locked and not current[k]:
                free_whole[n.name] += 1
        want -= sum(free_whole.values())
        if want <= 0:
            return
        total = Counter(p for lay in target for p, _ in lay)
        cands = [k for k in range(len(gpus)) if target[k] and k not in locked and not any(x["busy"] for x in current[k])]
        cands.sort(key=lambda k: (-free_whole[gpus[k][0].name], len(target[k]), k))
        for k in cands:
            if want <= 0:
                break
            mine = Counter(p for p, _ in target[k])
            if all(total[p] - mine[p] >= demand[p] for p in mine):
                total -= mine
                target[k] = ()
                free_whole[gpus[k][0].name] += 1
                want -= 1

    def _drain(self, now: float, g: NodeGroup, nodes: list[Node], busy_gpu: dict[str, set[int]],
               unmet: bool, cordon: list[str], uncordon: list[str]) -> None:
        for n in nodes:
            since = self.draining.get(n.name)
            if since is not None and (not unmet or now - since >= self.drain_s):
                del self.draining[n.name]
                uncordon.append(n.name)
                if unmet:  # timed out: let whole-GPU work use the node for a while
                    self.rest_until[g.name] = now + self.drain_s
        if unmet and now >= self.rest_until.get(g.name, 0.0) and not any(n.name in self.draining for n in nodes):
            held = [n for n in nodes if busy_gpu.get(n.name) and n.schedulable]
            if held:
                pick = min(held, key=lambda n: (len(busy_gpu[n.name]), n.name))
                self.draining[pick.name] = now
                cordon.append(pick.name)
