"""An independent checker: the invariants, recomputed from the event stream alone.

It does not trust the scheduler's bookkeeping: it rebuilds node occupancy, queue usage and the
pending set from `submit`, `node_up`, `admit`, `finish` and `requeue` events, and the quota
rules from the config (with tidal windows applied at each event's time).

- partial_gang_starts: admissions with fewer tasks than the gang (or its `min_tasks`), or
  placements on a node of another site.
- overcommitted_nodes: nodes whose GPUs (milli-GPU per index), MIG instances, CPU or memory
  were ever handed out beyond what `node_up` said the node has.
- capability_violations: admissions after which a queue (descendants included) used more GPU,
  CPU or memory than its capability.
- mig_violations: MIG layouts that break the catalog's rules, reconfigurations that destroy or
  move an instance in use (or re-slice a GPU used whole), and tasks placed on an instance that
  does not exist (or is still being created), or on a whole GPU that is sliced or being re-sliced.
- guarantee_violations_s: for each pending job, the seconds it waited while it fit inside the
  unused guarantee of its queue (or an ancestor's), beyond the preemption grace period; summed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Generator, Iterable
from datetime import datetime, timedelta

from federation.mig.catalog import CATALOG, Instance, layout_problems
from federation.model import Federation, Queue, Resources
from policies.tidal import effective_queues


def check(events: Iterable[dict], fed: Federation, queues_at: Callable[[float], tuple[Queue, ...]] | None = None) -> dict:
    checker = Checker(fed, queues_at)
    for e in events:
        checker.feed(e)
    return checker.result()


class Checker:
    """The same check, fed one event at a time as a run makes them (none need be kept)."""

    def __init__(self, fed: Federation, queues_at: Callable[[float], tuple[Queue, ...]] | None = None):
        self._co = _checking(fed, queues_at or (lambda t: fed.queues))
        next(self._co)

    def feed(self, event: dict) -> None:
        self._co.send(event)

    def result(self) -> dict:
        try:
            self._co.send(None)
        except StopIteration as done:
            return done.value
        raise AssertionError("the checker did not finish")


def _checking(fed: Federation, queues_at: Callable[[float], tuple[Queue, ...]]) -> Generator[None, dict | None, dict]:
    """A coroutine: sent each event in turn, then None; returns the counts."""
    parent = {q.name: q.parent for q in fed.queues}
    grace = fed.policies.preemption.grace_s

    def path(leaf: str) -> list[str]:
        out = []
        while leaf is not None:
            out.append(leaf)
            leaf = parent.get(leaf)
        return out

    nodes: dict[str, dict] = {}
    gpu_used: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    mig_used: dict[str, set] = defaultdict(set)
    cpu_used: dict[str, int] = defaultdict(int)
    mem_used: dict[str, int] = defaultdict(int)
    jobs: dict[str, dict] = {}
    held: dict[str, list[dict]] = {}  # job -> its placements while it runs
    usage: dict[str, Resources] = defaultdict(Resources)
    pending: dict[str, set[str]] = defaultdict(set)  # leaf queue -> pending job ids
    out = {"partial_gang_starts": 0, "capability_violations": 0, "guarantee_violations_s": 0.0, "overcommitted_nodes": 0, "mig_violations": 0}
    layouts: dict[tuple[str, int], set[tuple[str, int]]] = defaultdict(set)  # (node, gpu) -> usable instances
    reslicing: set[tuple[str, int]] = set()  # GPUs between mig_reconfigure and mig_ready
    target: dict[tuple[str, int], set[tuple[str, int]]] = {}
    over: set[str] = set()
    spell: dict[str, float] = {}  # pending job -> since when it has fit inside an unused guarantee

    def need(job: dict, tasks: int) -> Resources:
        return Resources(job["gpu_milli_per_task"] * tasks, job["cpu_milli_per_task"] * tasks, job["memory_mib_per_task"] * tasks)

    wants: dict[str, Resources] = {}  # live job -> what it needs to start (its gang, or its min_tasks)
    last_queues: list = [None, {}]  # (t, name -> queue): many events share an instant

    def queues(t: float) -> dict[str, Queue]:
        if last_queues[0] != t:
            last_queues[0], last_queues[1] = t, {q.name: q for q in queues_at(t)}
        return last_queues[1]

    def take(job: dict, placements: list[dict], sign: int) -> None:
        for p in placements:
            n = p["node"]
            if p.get("mig"):
                key = (p["mig"]["gpu"], p["mig"]["profile"], p["mig"]["start"])
                if sign > 0 and key in mig_used[n]:
                    over.add(n)
                if sign > 0 and (key[1], key[2]) not in layouts[(n, key[0])]:
                    out["mig_violations"] += 1
                (mig_used[n].add if sign > 0 else mig_used[n].discard)(key)
            else:
                for g in p["gpus"]:
                    if sign > 0 and (layouts[(n, g)] or (n, g) in reslicing):
                        out["mig_violations"] += 1
                    gpu_used[n][g] += sign * p.get("gpu_milli", 1000)
                    if sign > 0 and (g >= nodes.get(n, {}).get("gpus", 0) or gpu_used[n][g] > 1000):
                        over.add(n)
            cpu_used[n] += sign * job["cpu_milli_per_task"]
            mem_used[n] += sign * job["memory_mib_per_task"]
            # only taking can overcommit: a job given back from a node that went away (a spot
            # interruption; the gang was kept for its stale-gang grace) frees what is gone anyway
            if sign > 0 and (n not in nodes or cpu_used[n] > nodes[n]["cpu_milli"] or mem_used[n] > nodes[n]["memory_mib"]):
                over.add(n)

    moved = [True, None]  # whether pending jobs or usage changed since the last look; the guarantees then

    def guarantees(t: float) -> None:
        """Start or end each pending job's spell of fitting inside its queues' unused guarantee
        (looked at again only when what waits, what is used or a guarantee changed)."""
        qs = queues(t)
        now = {name: q.guarantee for name, q in qs.items()}
        if not moved[0] and now == moved[1]:
            return
        moved[0], moved[1] = False, now
        for leaf, ids in pending.items():
            frees = [(qs[a].guarantee - usage[a]).clip0() for a in path(leaf)]
            verdicts: dict[Resources, bool] = {}  # a queue's waiting jobs ask for few distinct amounts
            for j in ids:
                r = wants[j]
                fits = verdicts.get(r)
                if fits is None:
                    fits = verdicts[r] = any(r.fits_in(f) and (r.gpu_milli or r.cpu_milli or r.memory_mib) for f in frees)
                if fits and j not in spell:
                    spell[j] = t
                elif not fits and j in spell:
                    end_spell(j, t)

    def end_spell(j: str, t: float) -> None:
        out["guarantee_violations_s"] += max(0.0, t - spell.pop(j) - grace)

    last_t = 0.0
    while (e := (yield)) is not None:
        t, kind = e["t"], e["type"]
        if t != last_t:
            guarantees(last_t)
            last_t = t
        if kind in ("submit", "admit", "finish", "requeue"):
            moved[0] = True
        if kind == "node_up":
            nodes[e["node"]] = {"site": e["site"], "gpus": e["gpus"], "gpu_model": e.get("gpu_model"), "cpu_milli": e.get("cpu_milli", 1 << 60), "memory_mib": e.get("memory_mib", 1 << 60)}
        elif kind == "node_down":
            nodes.pop(e["node"], None)
        elif kind == "mig_reconfigure":
            n, g = e["node"], e["gpu"]
            new = {(i["profile"], i["start"]) for i in e["layout"]}
            spec = CATALOG.get(nodes.get(n, {}).get("gpu_model") or "")
            used = {(p, s) for gg, p, s in mig_used[n] if gg == g}
            if spec is None or layout_problems(spec, [Instance(p, s) for p, s in new]) or not used <= new or gpu_used[n].get(g, 0) > 0:
                out["mig_violations"] += 1
            layouts[(n, g)] = used  # only the kept instances are usable until mig_ready
            reslicing.add((n, g))
            target[(n, g)] = new
        elif kind == "mig_ready":
            key = (e["node"], e["gpu"])
            layouts[key] = target.pop(key, set())
            reslicing.discard(key)
        elif kind == "submit":
            jobs[e["job"]] = e
            wants[e["job"]] = need(e, e["min_tasks"] or e["tasks"])
            pending[e["queue"]].add(e["job"])
        elif kind == "admit":
            job = jobs[e["job"]]
            placements = e["placements"]
            if len(placements) < (job["min_tasks"] or job["tasks"]) or any(nodes.get(p["node"], {}).get("site") != e["site"] for p in placements):
                out["partial_gang_starts"] += 1
            take(job, placements, 1)
            held[e["job"]] = placements
            pending[job["queue"]].discard(e["job"])
            if e["job"] in spell:
                end_spell(e["job"], t)
            r = need(job, len(placements))
            qs = queues(t)
            for a in path(job["queue"]):
                usage[a] = usage[a] + r
                if not usage[a].fits_in(qs[a].capability):
                    out["capability_violations"] += 1
        elif kind in ("finish", "requeue"):
            job = jobs[e["job"]]
            placements = held.pop(e["job"])
            take(job, placements, -1)
            for a in path(job["queue"]):
                usage[a] = usage[a] - need(job, len(placements))
            if kind == "requeue":
                pending[job["queue"]].add(e["job"])
            else:
                del jobs[e["job"]], wants[e["job"]]  # done for good: a long run keeps only the live jobs
    guarantees(last_t)
    for j in list(spell):
        end_spell(j, last_t)
    out["overcommitted_nodes"] = len(over)
    out["guarantee_violations_s"] = round(out["guarantee_violations_s"], 3)
    return out


def tidal_queues(fed: Federation, start: datetime) -> Callable[[float], tuple[Queue, ...]]:
    """The effective queues at virtual time t, for a run whose t = 0 is `start`."""
    return lambda t: effective_queues(fed, start + timedelta(seconds=t))
