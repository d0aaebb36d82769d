"""The MIG partition planner (pure): target layouts for a site's MIG GPUs from the demand.

Every valid layout of one GPU model is enumerated once and cached (a few hundred to a few
thousand on the 8-slice GPUs) as rows of a matrix: instance counts per profile, and a bitmask of
the (profile, start) instances it holds. Then, GPU by GPU:
- the demand already met by the current layouts is counted first (a GPU that is left alone
  costs nothing), so that
- only GPUs whose change adds satisfied demand are reconfigured, cheapest first (fewest busy
  instances, then least useful current layout);
- a new layout must contain every busy instance of the GPU, unmoved (a bitmask superset test);
- a GPU keeps its layout unless another one meets more demand; among the best layouts, the one
  left with the largest contiguous free block wins, then the one with fewer instances, so free
  space stays usable by large profiles (three 1g instances at 0, 1 and 5 would leave no room for
  a 3g; at 0, 1 and 2 they leave a 4g's).
Demand is weighted per profile (priority); the value of a layout is the weighted demand it meets.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

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
    chosen = list(cur_idx)
    remaining = want - t.counts[cur_idx].sum(axis=0) if gpus else want.copy()
    # cheapest to change first: fewest busy instances, then the least useful current layout
    order = sorted(range(gpus), key=lambda g: (bin(int(busy_masks[g])).count("1"), float(np.minimum(t.counts[cur_idx[g]], want).dot(w)), g))
    for g in order:
        if not (remaining > 0).any():
            break
        if g in locked:
            continue
        base = remaining + t.counts[chosen[g]]  # the need if this GPU held nothing
        ok = (t.masks & busy_masks[g]) == busy_masks[g]
        value = np.minimum(t.counts, np.maximum(base, 0)).dot(w)
        value[~ok] = -1.0
        keep_value = value[chosen[g]]
        best = value.max()
        if best <= keep_value + 1e-9:
            continue
        cands = np.flatnonzero(value >= best - 1e-9)
        # contiguous free space first, then fewer instances (the table is sorted by size)
        pick = cands[np.lexsort((cands, -t.free_block[cands]))][0]
        remaining = base - t.counts[pick]
        chosen[g] = int(pick)
    total = t.counts[chosen].sum(axis=0) if gpus else np.zeros(len(t.profiles), dtype=np.int64)
    satisfied = {p: int(min(total[i], want[i])) for i, p in enumerate(t.profiles) if want[i]}
    unsatisfied = {p: int(want[i] - satisfied[p]) for i, p in enumerate(t.profiles) if want[i] and want[i] > satisfied[p]}
    layouts = [[{"profile": n, "start": s} for n, s in t.layouts[li]] for li in chosen]
    return PlanResult(layouts, satisfied, unsatisfied, sum(1 for a, b in zip(chosen, cur_idx, strict=True) if a != b))
