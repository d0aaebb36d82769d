"""The MIG partition planner (pure): target layouts for a site's MIG GPUs from the demand, exact.

Every valid layout of one GPU model is enumerated once and cached (76 on an A30, 2,319 on the
8-slice GPUs) as rows of a matrix: instance counts per profile, and a bitmask of the (profile,
start) instances it holds. Choosing a layout per GPU is then a small integer programme:

- a GPU may take any layout that contains its busy instances unmoved (a bitmask superset test);
  unlocked GPUs that may take the same count vectors form a group; locked GPUs keep their layouts;
- layouts with the same instance counts are the same to the objective, so each count vector (128
  on the 8-slice GPUs) has one representative per busy set: a GPU's own layout if it has those
  counts (keeping it costs nothing), else the one with the largest contiguous free block (three
  1g instances at 0, 1 and 2 leave a 4g's room; at 0, 1 and 5 they leave no room for a 3g), then
  the lowest;
- y[group, vector] GPUs take each vector, and u[group, vector] <= y of those that have it now
  keep their layouts. Solved lexicographically with HiGHS (scipy's milp), each step to a zero gap
  with the ones before it held: the most weighted demand met (demand weighted per profile, by
  priority), the most GPUs kept as they are, the most left whole (free for whole-GPU work), the
  fewest instances (a slice nobody asked for is free space lost).
The result is optimal for that order; tests check it against brute force on small cases.
"""

from __future__ import annotations

from collections import Counter
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
    bit: dict[tuple[str, int], int]  # instance -> its bit
    index: dict[tuple[tuple[str, int], ...], int]  # layout (instances in bit order) -> its row: a MIG manager reads its GPUs' layouts every cycle


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
    return LayoutTable(spec, profiles, instances, layouts, counts, masks, free_block, bit, {lay: i for i, lay in enumerate(layouts)})


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
    bit, layout_index = t.bit, t.index
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
        busy_masks.append(bm)
    w = np.array([float((weights or {}).get(p, 1.0)) for p in t.profiles])
    want = np.array([demand.get(p, 0) for p in t.profiles], dtype=np.int64)
    met = not gpus or (t.counts[cur_idx].sum(axis=0) >= want).all()
    # the current layouts meet every demand: keeping them all is optimal (nothing is reconfigured,
    # and making a GPU whole would cost a reconfiguration); the MIG managers ask this most cycles
    chosen = list(cur_idx) if met else _solve_cached(gpu_model, tuple(int(x) for x in want), tuple(float(x) for x in w), tuple(cur_idx),
                                                     tuple(busy_masks), frozenset(locked))
    total = t.counts[chosen].sum(axis=0) if gpus else np.zeros(len(t.profiles), dtype=np.int64)
    satisfied = {p: int(min(total[i], want[i])) for i, p in enumerate(t.profiles) if want[i]}
    unsatisfied = {p: int(want[i] - satisfied[p]) for i, p in enumerate(t.profiles) if want[i] and want[i] > satisfied[p]}
    layouts = [[{"profile": n, "start": s} for n, s in t.layouts[li]] for li in chosen]
    return PlanResult(layouts, satisfied, unsatisfied, sum(1 for a, b in zip(chosen, cur_idx, strict=True) if a != b))


@cache
def _by_counts(gpu_model: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct count vectors (vectors x profiles); per layout, the index of its vector; and,
    per layout, its rank as a representative of its vector (largest free block first, then fewer
    instances, then the table's order)."""
    t = table(gpu_model)
    vectors, group = np.unique(t.counts, axis=0, return_inverse=True)
    rank = np.empty(len(t.layouts), dtype=np.int64)
    rank[np.lexsort((np.arange(len(t.layouts)), -t.free_block))] = np.arange(len(t.layouts))
    return vectors, group.ravel(), rank


@lru_cache(maxsize=4096)
def _choices(gpu_model: str, busy: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a GPU whose busy instances are `busy` (a bitmask): the count vectors it may take, the
    representative layout of each, and which vectors no other of them dominates. Any layout that
    keeps the busy instances lies inside a maximal one that does too, so the dominated vectors
    never meet more demand than the maximal ones."""
    t = table(gpu_model)
    vectors, group, rank = _by_counts(gpu_model)
    ok = np.flatnonzero((t.masks & np.uint64(busy)) == np.uint64(busy))
    ok = ok[np.argsort(rank[ok], kind="stable")]
    vecs, first = np.unique(group[ok], return_index=True)
    c = vectors[vecs]
    dominated = ((c[None, :, :] >= c[:, None, :]).all(axis=2) & (c[None, :, :] != c[:, None, :]).any(axis=2)).any(axis=1)
    return vecs, ok[first], ~dominated


@lru_cache(maxsize=512)
def _solve_cached(gpu_model: str, want: tuple, w: tuple, cur_idx: tuple, busy: tuple, locked: frozenset) -> list[int]:
    """`_solve` for hashable inputs: a MIG manager asks the same question cycle after cycle."""
    return _solve(gpu_model, np.array(want), np.array(w), list(cur_idx), list(busy), locked)


def _solve(gpu_model: str, want: np.ndarray, w: np.ndarray, cur_idx: list[int], busy: list[int], locked: frozenset[int]) -> list[int]:
    """The layout index per GPU, optimal for (weighted demand met, fewest reconfigured, most whole,
    fewest instances), each solved to a zero gap with the ones before it held.

    Unlocked GPUs that may take the same count vectors (by their busy instances) form one group,
    and the variables are y[group, vector] (GPUs of the group taking a count vector) and, where
    some of the group's GPUs have that vector now, u[group, vector] <= y, kept (GPUs that keep
    their layout): a few thousand columns where one per GPU class and vector made 15,000 and
    HiGHS's presolve spent seconds on them. Locked GPUs keep their layouts and only add counts."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array, vstack

    t = table(gpu_model)
    vectors, group_of, _ = _by_counts(gpu_model)
    p = len(t.profiles)
    fixed = t.counts[[c for g, c in enumerate(cur_idx) if g in locked]].sum(axis=0)
    groups: dict[bytes, list[int]] = {}
    for g, b in enumerate(busy):
        if g not in locked:
            groups.setdefault(_choices(gpu_model, b)[0].tobytes(), []).append(g)
    ycols: list[tuple[int, int]] = []  # (group number, vector)
    ucols: list[tuple[int, int, int]] = []  # (group number, vector, GPUs of the group that have it now)
    maximal: list[bool] = []
    for k, gs in enumerate(groups.values()):
        vecs, _, top = _choices(gpu_model, busy[gs[0]])
        ycols += [(k, int(v)) for v in vecs]
        maximal += list(top)
        have = Counter(int(group_of[cur_idx[g]]) for g in gs)
        ucols += [(k, v, n) for v, n in have.items()]
    sizes = [len(gs) for gs in groups.values()]
    ny, nu = len(ycols), len(ucols)
    n = ny + nu + p  # variables: y, u, then s (demand met per profile)
    yv = np.array([vectors[v] for _, v in ycols], dtype=float).reshape(ny, p)

    def rows(entries: list[tuple[int, int, float]], m: int):
        r, c, x = zip(*entries, strict=True) if entries else ((), (), ())
        return coo_array((x, (r, c)), shape=(m, n))

    yindex = {(k, v): j for j, (k, v) in enumerate(ycols)}
    matrix = vstack([
        # s_p - the p instances the y columns plan <= what the locked GPUs hold of p
        rows([(q, j, -yv[j, q]) for j in range(ny) for q in range(p) if yv[j, q]] + [(q, ny + nu + q, 1.0) for q in range(p)], p),
        rows([(k, j, 1.0) for j, (k, _) in enumerate(ycols)], len(sizes)),  # every GPU takes one layout
        rows([e for i, (k, v, _) in enumerate(ucols) for e in ((i, ny + i, 1.0), (i, yindex[(k, v)], -1.0))], nu),  # u <= y
    ]).tocsc()
    lower = np.concatenate([np.full(p, -np.inf), sizes, np.full(nu, -np.inf)])
    upper_row = np.concatenate([fixed.astype(float), sizes, np.zeros(nu)])
    upper = np.concatenate([[float(sizes[k]) for k, _ in ycols], [float(c) for _, _, c in ucols], want.astype(float)])
    integral = np.concatenate([np.ones(ny + nu), np.zeros(p)])
    held: list[tuple[np.ndarray, float]] = []  # (objective, at least) of the phases solved

    def solve(cost: np.ndarray, cols: np.ndarray, presolve: bool = False) -> np.ndarray:
        """Minimise `cost` over the columns `cols` (the others held at 0), the phases before held.
        HiGHS's presolve pays for itself on the demand step only (measured on benchmarks/mig_plan.py)."""
        constraints = [LinearConstraint(matrix[:, cols], lower, upper_row)] + [LinearConstraint(o[cols], least, np.inf) for o, least in held]
        r = milp(cost[cols], constraints=constraints, bounds=Bounds(0, upper[cols]), integrality=integral[cols], options={"mip_rel_gap": 0.0, "presolve": presolve})
        if r.x is None:
            raise PlanError(f"the MIG planner found no plan ({r.message})")
        x = np.zeros(n)
        x[cols] = r.x
        return x

    s_cols, u_cols = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    s_cols[ny + nu:], u_cols[ny:ny + nu] = True, True
    top = np.concatenate([np.array(maximal, dtype=bool), np.zeros(nu + p, dtype=bool)])
    zero = np.concatenate([np.array([not vectors[v].any() for _, v in ycols], dtype=bool), np.zeros(nu + p, dtype=bool)])
    has = {(k, v) for k, v, _ in ucols}
    now = np.concatenate([np.array([(k, v) in has for k, v in ycols], dtype=bool), np.zeros(nu + p, dtype=bool)])
    value = np.concatenate([np.zeros(ny + nu), w])
    # 1. the most demand met: a GPU's dominated vectors never meet more than its maximal ones
    best = float(value @ solve(-value, top | s_cols, presolve=True))
    positive = w[(want > 0) & (w > 0)]
    held.append((value, best - (min(1e-6 * max(1.0, abs(best)), 0.5 * float(positive.min())) if positive.size else 1e-6)))
    # 2. the most GPUs that keep their layout, 3. then the most left whole: a GPU that changes
    # needs only a maximal vector or none (a dominated one meets no more and is not whole)
    for objective in (u_cols.astype(float), zero.astype(float)):
        x = solve(-objective, top | zero | now | u_cols | s_cols)
        held.append((objective, round(float(objective @ x)) - 0.5))
    # 4. the fewest instances: here a smaller vector may be what a GPU should take
    x = solve(np.concatenate([yv.sum(axis=1), np.zeros(nu + p)]), np.ones(n, dtype=bool))
    takes: list[dict[int, int]] = [{} for _ in groups]  # per group: GPUs planned per vector
    for j, (k, v) in enumerate(ycols):
        if m := round(x[j]):
            takes[k][v] = m
    chosen = list(cur_idx)
    for take, gs in zip(takes, groups.values(), strict=True):
        moved = []
        for g in gs:  # a GPU keeps its layout while its vector is wanted, in GPU order
            v = int(group_of[cur_idx[g]])
            if take.get(v, 0) > 0:
                take[v] -= 1
            else:
                moved.append(g)
        for v, m in take.items():
            for g in moved[:m]:  # the representative that keeps this GPU's busy instances
                vecs, reps, _ = _choices(gpu_model, busy[g])
                chosen[g] = int(reps[np.searchsorted(vecs, v)])
            moved = moved[m:]
    return chosen
