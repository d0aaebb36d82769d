"""The MIG profile catalog: GPU instance profiles and their allowed placements.

Source: NVIDIA Multi-Instance GPU User Guide, section "Supported MIG Profiles" (the per-GPU
tables for A30, A100, H100 and H200) and section "GPU Instance Placements" / the output of
`nvidia-smi mig -lgipp`, which prints each profile's placements as `{starts}:size` in memory
slices. The validity rule ("A Valid Layout" below) follows the guide's section "Partitioning":
an instance occupies the memory slices `[start, start + size)`, instances may not overlap, each
profile has a maximum count, and only one `+me` (media extensions) instance fits on a GPU.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

#: the most GPUs one MIG plan covers (`fedctl mig plan --gpus`, the layouts of `--current`): a site's
MAX_PLAN_GPUS = 100_000


@dataclass(frozen=True)
class Profile:
    name: str
    compute: int  # compute slices (the "Xg" of the name)
    memory: int  # memory slices
    max_count: int
    starts: tuple[int, ...]  # allowed start memory slices; each placement spans `memory` slices

    @property
    def placements(self) -> list[list[int]]:
        return [[s, self.memory] for s in self.starts]


@dataclass(frozen=True)
class GpuMigSpec:
    gpu: str
    memory_slices: int
    compute_slices: int
    profiles: dict[str, Profile]


def _seven_slice(gpu: str, mem_1g: str, mem_2: str, mem_4: str, mem_8: str) -> GpuMigSpec:
    """The 7-compute / 8-memory-slice layout shared by A100, H100 and H200 (guide tables 1-4)."""
    profiles = [
        Profile(f"1g.{mem_1g}gb", 1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
        Profile(f"1g.{mem_1g}gb+me", 1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
        Profile(f"1g.{mem_2}gb", 1, 2, 4, (0, 2, 4, 6)),
        Profile(f"2g.{mem_2}gb", 2, 2, 3, (0, 2, 4)),
        Profile(f"3g.{mem_4}gb", 3, 4, 2, (0, 4)),
        Profile(f"4g.{mem_4}gb", 4, 4, 1, (0,)),
        Profile(f"7g.{mem_8}gb", 7, 8, 1, (0,)),
    ]
    return GpuMigSpec(gpu, 8, 7, {p.name: p for p in profiles})


def _a30() -> GpuMigSpec:
    """A30-24GB: 4 compute and 4 memory slices (guide table "A30 MIG profiles")."""
    profiles = [
        Profile("1g.6gb", 1, 1, 4, (0, 1, 2, 3)),
        Profile("1g.6gb+me", 1, 1, 1, (0, 1, 2, 3)),
        Profile("2g.12gb", 2, 2, 2, (0, 2)),
        Profile("2g.12gb+me", 2, 2, 1, (0, 2)),
        Profile("4g.24gb", 4, 4, 1, (0,)),
    ]
    return GpuMigSpec("A30-24GB", 4, 4, {p.name: p for p in profiles})


CATALOG: dict[str, GpuMigSpec] = {
    spec.gpu: spec
    for spec in (
        _seven_slice("A100-40GB", "5", "10", "20", "40"),
        _seven_slice("A100-80GB", "10", "20", "40", "80"),
        _seven_slice("H100-80GB", "10", "20", "40", "80"),
        _seven_slice("H100-94GB", "12", "24", "47", "94"),
        _seven_slice("H200-141GB", "18", "35", "71", "141"),
        _a30(),
    )
}


@dataclass(frozen=True)
class Instance:
    profile: str
    start: int


def layout_problems(spec: GpuMigSpec, layout: list[Instance]) -> list[str]:
    """Every reason `layout` is not a valid layout of one GPU of `spec` (empty when valid)."""
    problems: list[str] = []
    used = [False] * spec.memory_slices
    compute = 0
    for inst in layout:
        prof = spec.profiles.get(inst.profile)
        if prof is None:
            problems.append(f"{spec.gpu} has no MIG profile {inst.profile!r}")
            continue
        if inst.start not in prof.starts:
            problems.append(f"{inst.profile} cannot start at slice {inst.start} (allowed: {list(prof.starts)})")
            continue
        for s in range(inst.start, inst.start + prof.memory):
            if used[s]:
                problems.append(f"{inst.profile} at {inst.start} overlaps another instance")
                break
            used[s] = True
        compute += prof.compute
    counts = Counter(i.profile for i in layout)
    for name, n in counts.items():
        prof = spec.profiles.get(name)
        if prof is not None and n > prof.max_count:
            problems.append(f"{n} x {name} exceeds the maximum of {prof.max_count} per GPU")
    if sum(n for name, n in counts.items() if name.endswith("+me")) > 1:
        problems.append("at most one +me instance fits on a GPU")
    if compute > spec.compute_slices:
        problems.append(f"{compute} compute slices exceed the GPU's {spec.compute_slices}")
    return problems


def pack(spec: GpuMigSpec, counts: dict[str, int]) -> list[Instance] | None:
    """A valid layout of one GPU holding exactly `counts`, or None if none exists.

    Largest profiles first, each at its lowest allowed start: a depth-first search over at most
    seven instances, so it is instant.
    """
    wanted: list[str] = []
    for name, n in counts.items():
        if name not in spec.profiles or n > spec.profiles[name].max_count:
            return None
        wanted += [name] * n
    wanted.sort(key=lambda n: (-spec.profiles[n].memory, -spec.profiles[n].compute, n))

    def place(i: int, layout: list[Instance], used: int) -> list[Instance] | None:
        if i == len(wanted):
            return layout if not layout_problems(spec, layout) else None
        prof = spec.profiles[wanted[i]]
        for start in prof.starts:
            mask = ((1 << prof.memory) - 1) << start
            if used & mask:
                continue
            found = place(i + 1, layout + [Instance(prof.name, start)], used | mask)
            if found is not None:
                return found
        return None

    return place(0, [], 0)


def profile_gpu_milli(profile: str) -> int | None:
    """A MIG instance's share of its GPU in milli-GPU (compute slices / the GPU's 7 or 4), for quota."""
    for spec in CATALOG.values():
        p = spec.profiles.get(profile)
        if p is not None:
            return round(1000 * p.compute / spec.compute_slices)
    return None
