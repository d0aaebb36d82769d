"""The MIG partition planner (pure): target layouts for a site's MIG GPUs from the demand, exact.

Every valid layout of one GPU model is enumerated once and cached (76 on an A30, 2,319 on the
8-slice GPUs) as rows of a matrix: instance counts per profile, and a bitmask of the (profile,
start) instances it holds. Choosing a layout per GPU is then a small integer programme:

- GPUs alike (the same current layout, the same busy instances, both locked or not) form a class;
  a class may take any layout that contains its busy instances unmoved (a bitmask superset test),
  and a locked class only its current one;
- layouts with the same instance counts are the same to the objective, so each class keeps one
  per count vector (128 on the 8-slice GPUs): its current layout if it has those counts, else the
  one with the largest contiguous free block (three 1g instances at 0, 1 and 2 leave a 4g's room;
  at 0, 1 and 5 they leave no room for a 3g), then the lowest;
- x[class, layout] GPUs take each layout. Solved lexicographically with HiGHS (scipy's milp):
  first the most weighted demand met (demand weighted per profile, by priority), then, keeping
  that, the fewest GPUs reconfigured, then the most GPUs left whole (free for whole-GPU work),
  then the fewest instances (a slice nobody asked for is free space lost).
The result is optimal for that order; tests check it against brute force on small cases.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np

from federation.mig.catalog import CATALOG, GpuMigSpec, Instance, layout_problems


@dataclass(frozen=True)
class LayoutTable:
    spec: GpuMigSpec
    profiles: tuple[str, ...]
    instances: tuple[tuple[str, int], ...]  # bit i of a mask is instances[i]
    layouts: tuple[tuple[tuple[str, int], ...], ...]
    counts: np.ndarray  # layouts x profiles
    masks: np.ndarray  # layouts, uint64
    free_block: np.ndarray  # layouts: the longest run of free memory slices


@cache
def table(gpu_model: str) -> LayoutTable:
    spec = CATALOG[gpu_model]
    profiles = tuple(spec.profiles)
    instances = tuple((p.name, s) for p in spec.profiles.values() for s in p.starts)
    bit = {inst: i for i, inst in enumerate(instances)}
    found: set[tuple[tuple[str, int], ...]] = set()

    def grow(layout: list[tuple[str, int]], used: int, from_index: int) -> None:
        found.add(tuple(layout))
        for i in range(from_index, len(instances)):
            name, start = instances[i]
            size = spec.profiles[name].memory
            mask = ((1 << size) - 1) << start
            if used & mask:
                continue
            cand = layout + [(name, start)]
            if not layout_problems(spec, [Instance(n, s) for n, s in cand]):
                grow(cand, used | mask, i + 1)

    grow([], 0, 0)
    layouts = tuple(sorted(found, key=lambda lay: (len(lay), lay)))
    counts = np.zeros((len(layouts), len(profiles)), dtype=np.int64)
    masks = np.zeros(len(layouts), dtype=np.uint64)
    free_block = np.zeros(len(layouts), dtype=np.int64)
    pindex = {p: i for i, p in enumerate(profiles)}
    for li, lay in enumerate(layouts):
        used = [False] * spec.memory_slices
        m = 0
        for name, start in lay:
            counts[li, pindex[name]] += 1
            m |= 1 << bit[(name, start)]
            for s in range(start, start + spec.profiles[name].memory):
                used[s] = True
        masks[li] = m
        run = best = 0
        for u in used:
            run = 0 if u else run + 1
            best = max(best, run)
        free_block[li] = best
    return LayoutTable(spec, profiles, instances, layouts, counts, masks, free_block)


@dataclass(frozen=True)
class PlanResult:
    layouts: list[list[dict]]
    satisfied: dict[str, int]
    unsatisfied: dict[str, int]
    reconfigured_gpus: int

    def to_dict(self) -> dict:
        return {"layouts": self.layouts, "satisfied": self.satisfied, "unsatisfied": self.unsatisfied, "reconfigured_gpus": self.reconfigured_gpus}


class PlanError(ValueError):
    pass


def plan(gpu_model: str, gpus: int, demand: dict[str, int], current: list[list[dict]] | None = None,
         weights: dict[str, float] | None = None, locked: frozenset[int] = frozenset()) -> PlanResult:
    """Target layouts for `gpus` GPUs of `gpu_model`. `current` is one list of
    {"profile", "start", "busy"?} per GPU (missing GPUs are unpartitioned). GPUs in `locked`
    (whole-GPU work on them, a reconfiguration under way) keep their layout."""
    if gpu_model not in CATALOG:
        raise PlanError(f"{gpu_model!r} has no MIG profiles; MIG models are {sorted(CATALOG)}")
    t = table(gpu_model)
    pindex = {p: i for i, p in enumerate(t.profiles)}
    for name, n in demand.items():
        if name not in pindex:
            raise PlanError(f"{gpu_model} has no MIG profile {name!r} (it has {list(t.profiles)})")
        if n < 0:
            raise PlanError(f"demand for {name} is negative")
    current = [list(g) for g in (current or [])]
    if len(current) > gpus:
        raise PlanError(f"--current describes {len(current)} GPUs, more than --gpus {gpus}")
    current += [[] for _ in range(gpus - len(current))]
    bit = {inst: i for i, inst in enumerate(t.instances)}
    layout_index = {lay: i for i, lay in enumerate(t.layouts)}
    cur_idx, busy_masks = [], []
    for g, insts in enumerate(current):
        key = [(i["profile"], int(i["start"])) for i in insts]
        li = layout_index.get(tuple(sorted(key, key=bit.__getitem__))) if all(x in bit for x in key) else None
        if li is None:
            problems = layout_problems(t.spec, [Instance(p, s) for p, s in key])
            raise PlanError(f"GPU {g} of --current is not a valid {gpu_model} layout: {'; '.join(problems) or 'unknown instance'}")
        cur_idx.append(li)
        bm = 0
        for i in insts:
            if i.get("busy"):
                bm |= 1 << bit[(i["profile"], int(i["start"]))]
        busy_masks.append(np.uint64(bm))
    w = np.array([float((weights or {}).get(p, 1.0)) for p in t.profiles])
    want = np.array([demand.get(p, 0) for p in t.profiles], dtype=np.int64)
    met = not gpus or (t.counts[cur_idx].sum(axis=0) >= want).all()
    # the current layouts meet every demand: keeping them all is optimal (nothing is reconfigured,
    # and making a GPU whole would cost a reconfiguration); the MIG managers ask this most cycles
    chosen = list(cur_idx) if met else _solve_cached(gpu_model, tuple(int(x) for x in want), tuple(float(x) for x in w), tuple(cur_idx),
                                                     tuple(int(b) for b in busy_masks), frozenset(locked))
    total = t.counts[chosen].sum(axis=0) if gpus else np.zeros(len(t.profiles), dtype=np.int64)
    satisfied = {p: int(min(total[i], want[i])) for i, p in enumerate(t.profiles) if want[i]}
    unsatisfied = {p: int(want[i] - satisfied[p]) for i, p in enumerate(t.profiles) if want[i] and want[i] > satisfied[p]}
    layouts = [[{"profile": n, "start": s} for n, s in t.layouts[li]] for li in chosen]
    return PlanResult(layouts, satisfied, unsatisfied, sum(1 for a, b in zip(chosen, cur_idx, strict=True) if a != b))


@cache
def _by_counts(gpu_model: str) -> tuple[np.ndarray, np.ndarray]:
    """Per layout, the index of its count vector among the distinct ones; and, per layout, its rank
    as a representative of its count vector (largest free block first, then fewer instances, then
    the table's order)."""
    t = table(gpu_model)
    _, group = np.unique(t.counts, axis=0, return_inverse=True)
    rank = np.empty(len(t.layouts), dtype=np.int64)
    rank[np.lexsort((np.arange(len(t.layouts)), -t.free_block))] = np.arange(len(t.layouts))
    return group.ravel(), rank


@lru_cache(maxsize=512)
def _solve_cached(gpu_model: str, want: tuple, w: tuple, cur_idx: tuple, busy: tuple, locked: frozenset) -> list[int]:
    """`_solve` for hashable inputs: a MIG manager asks the same question cycle after cycle."""
    return list(_solve(table(gpu_model), np.array(want), np.array(w), list(cur_idx), [np.uint64(b) for b in busy], locked))


def _solve(t: LayoutTable, want: np.ndarray, w: np.ndarray, cur_idx: list[int], busy_masks: list, locked: frozenset[int]) -> list[int]:
    """The layout index per GPU, optimal for (weighted demand met, fewest reconfigured, most whole)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_array, hstack, identity

    group, rank = _by_counts(t.spec.gpu)
    classes: dict[tuple, list[int]] = {}
    for g, (cur, busy) in enumerate(zip(cur_idx, busy_masks, strict=True)):
        classes.setdefault((cur, int(busy), g in locked), []).append(g)
    empty = next(i for i, lay in enumerate(t.layouts) if not lay)
    cols: list[tuple[int, int]] = []  # (class number, layout index)
    for k, (cur, busy, is_locked) in enumerate(classes):
        if is_locked:
            cols.append((k, cur))
            continue
        ok = np.flatnonzero((t.masks & np.uint64(busy)) == np.uint64(busy))
        best: dict[int, int] = {}
        for li in ok[np.argsort(rank[ok])]:  # the first of each count vector is its representative...
            best.setdefault(int(group[li]), int(li))
        if int(group[cur]) in best:  # ...unless the current layout has those counts: keeping it costs nothing
            best[int(group[cur])] = cur
        cols += [(k, li) for li in best.values()]
    sizes = [len(gs) for gs in classes.values()]
    n, p = len(cols), len(t.profiles)
    counts = np.array([t.counts[li] for _, li in cols], dtype=float)  # n x p
    keys = list(classes)
    changed = np.array([li != keys[k][0] for k, li in cols], dtype=float)
    whole = np.array([li == empty for _, li in cols], dtype=float)
    instances = np.array([len(t.layouts[li]) for _, li in cols], dtype=float)
    # variables: x (n, integer GPUs per column), then s (p, demand met per profile)
    met = LinearConstraint(hstack([csr_array(-counts.T), identity(p, format="csr")]), -np.inf, 0)  # s_p <= instances of p planned
    member = csr_array((np.ones(n), ([k for k, _ in cols], np.arange(n))), shape=(len(keys), n + p))
    each = LinearConstraint(member, sizes, sizes)  # every GPU takes exactly one layout
    bounds = Bounds(np.zeros(n + p), np.concatenate([np.array([sizes[k] for k, _ in cols], dtype=float), want.astype(float)]))
    integral = np.concatenate([np.ones(n), np.zeros(p)])

    def solve(cost: np.ndarray, extra: list) -> np.ndarray:
        r = milp(cost, constraints=[met, each, *extra], bounds=bounds, integrality=integral)
        if r.x is None:
            raise PlanError(f"the MIG planner found no plan ({r.message})")
        return r.x

    value = np.concatenate([np.zeros(n), w])
    x = solve(-value, [])
    best_value = float(value @ x)
    keep = LinearConstraint(value, best_value - 1e-6 * max(1.0, abs(best_value)), np.inf)
    # fewest reconfigured, then most GPUs whole, then fewest instances (unneeded slices stay free
    # space): each weight outweighs the most the terms after it can sum to
    g = len(cur_idx)
    per_whole = t.spec.memory_slices * g + 1
    cost = changed * (g + 1) * per_whole - whole * per_whole + instances
    x = solve(np.concatenate([cost, np.zeros(p)]), [keep])
    chosen = list(cur_idx)
    left = {k: list(gs) for k, gs in enumerate(classes.values())}
    for j, (k, li) in enumerate(cols):
        for _ in range(round(x[j])):
            chosen[left[k].pop(0)] = li
    return chosen
