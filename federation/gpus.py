"""The built-in GPU model catalog. A config may declare more models under `gpu_models:`."""

from __future__ import annotations

from dataclasses import dataclass

from federation.mig.catalog import CATALOG as MIG_CATALOG


@dataclass(frozen=True)
class GpuModel:
    name: str
    memory_gib: int
    mig: bool


BUILTIN_GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        GpuModel("A100-40GB", 40, True),
        GpuModel("A100-80GB", 80, True),
        GpuModel("A30-24GB", 24, True),
        GpuModel("H100-80GB", 80, True),
        GpuModel("H100-94GB", 94, True),
        GpuModel("H200-141GB", 141, True),
        GpuModel("V100-16GB", 16, False),
        GpuModel("V100-32GB", 32, False),
        GpuModel("P100", 16, False),
        GpuModel("T4", 16, False),
        GpuModel("A10", 24, False),
        GpuModel("L4", 24, False),
        GpuModel("L40S", 48, False),
    )
}
# Every MIG-capable built-in model must have catalog entries, and only those.
assert {m.name for m in BUILTIN_GPU_MODELS.values() if m.mig} == set(MIG_CATALOG)
