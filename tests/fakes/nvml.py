"""A fake of the `pynvml` module (nvidia-ml-py) for MIG: devices, GPU and compute instances.

It has the names, signatures and error behaviour of the real module for the calls the NVML
backend makes: profile info ids differ from the profile constants (as on real GPUs, where
1g.10gb is id 19), instances are listed through ctypes arrays and a `byref` count, a GPU
instance with compute instances cannot be destroyed (IN_USE), placements are checked against
the model's allowed starts and for overlap (INSUFFICIENT_RESOURCES), and a MIG mode change can
be held until a reset. No real GPU is touched: nothing here loads libnvidia-ml.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

from federation.mig.catalog import CATALOG

NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_IN_USE = 19
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE = 0, 1
(NVML_GPU_INSTANCE_PROFILE_1_SLICE, NVML_GPU_INSTANCE_PROFILE_2_SLICE, NVML_GPU_INSTANCE_PROFILE_3_SLICE,
 NVML_GPU_INSTANCE_PROFILE_4_SLICE, NVML_GPU_INSTANCE_PROFILE_7_SLICE) = 0, 1, 2, 3, 4
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1, NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 7, 8, 9
(NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
 NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE) = 0, 1, 2, 3, 4
NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0
# profile constant -> the profile id the driver reports (nvidia-smi mig -lgip on an A100-80GB)
PROFILE_IDS = {0: 19, 7: 20, 9: 15, 1: 14, 8: 21, 2: 9, 3: 5, 4: 0}

c_nvmlGpuInstance_t = ctypes.py_object
c_nvmlComputeInstance_t = ctypes.py_object


class c_nvmlGpuInstancePlacement_t(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class NVMLError(Exception):
    def __init__(self, value: int, what: str = ""):
        super().__init__(value)
        self.value, self.what = value, what

    def __str__(self) -> str:
        names = {2: "Invalid Argument", 3: "Not Supported", 6: "Not Found", 19: "In use by another client", 23: "Insufficient Resources"}
        return names.get(self.value, f"NVML error {self.value}") + (f" ({self.what})" if self.what else "")


def _fill(found: list, arrayRef, countRef) -> int:
    """What the C API does with a caller's array and a `byref` count."""
    if len(found) > len(arrayRef):
        raise NVMLError(7, "array too small")
    for i, item in enumerate(found):
        arrayRef[i] = item
    countRef._obj.value = len(found)
    return NVML_SUCCESS


def _constant(p) -> int:
    if p.name.endswith("+me"):
        return 7 if p.compute == 1 else 8
    if p.compute == 1 and p.memory == 2:
        return 9
    return {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[p.compute]


class FakeNvml:
    """`sys.modules["pynvml"] = FakeNvml("A100-80GB", gpus=2)`; `devices[i]` is GPU i's state."""

    NVMLError = NVMLError
    c_nvmlGpuInstance_t = c_nvmlGpuInstance_t
    c_nvmlComputeInstance_t = c_nvmlComputeInstance_t
    c_nvmlGpuInstancePlacement_t = c_nvmlGpuInstancePlacement_t

    def __init__(self, model: str, gpus: int, mig_enabled: bool = True, reset_required: bool = False):
        for k, v in globals().items():
            if k.startswith("NVML_"):
                setattr(self, k, v)
        self.spec = CATALOG[model]
        self.by_id = {PROFILE_IDS[_constant(p)]: p for p in self.spec.profiles.values()}
        self.devices = [SimpleNamespace(index=i, mode=int(mig_enabled), pending=int(mig_enabled), gis=[]) for i in range(gpus)]
        self.reset_required = reset_required
        self.calls: list[str] = []
        self.initialised = 0

    # ---- the module's functions ----

    def nvmlInit(self):
        self.initialised += 1

    def nvmlShutdown(self):
        self.initialised -= 1

    def _check_init(self):
        if self.initialised <= 0:
            raise NVMLError(1, "NVML is not initialised")

    def nvmlDeviceGetHandleByIndex(self, index):
        self._check_init()
        if not 0 <= index < len(self.devices):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT, f"no GPU {index}")
        return self.devices[index]

    def nvmlDeviceGetMigMode(self, device):
        return [device.mode, device.pending]

    def nvmlDeviceSetMigMode(self, device, mode):
        if device.gis:
            raise NVMLError(NVML_ERROR_IN_USE, "GPU instances exist")
        self.calls.append(f"mig-mode {device.index} {mode}")
        device.pending = mode
        if not self.reset_required:
            device.mode = mode
        return NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceProfileInfo(self, device, profile, version=2):
        for pid, p in self.by_id.items():
            if _constant(p) == profile:
                return SimpleNamespace(id=pid, sliceCount=p.compute, instanceCount=p.max_count)
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED, f"profile {profile}")

    def nvmlDeviceGetGpuInstances(self, device, profileId, gpuInstancesRef, countRef):
        return _fill([gi for gi in device.gis if gi.profile_id == profileId], gpuInstancesRef, countRef)

    def nvmlGpuInstanceGetInfo(self, gi):
        return SimpleNamespace(id=gi.id, profileId=gi.profile_id, placement=c_nvmlGpuInstancePlacement_t(gi.start, gi.size))

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, device, profileId, placement):
        if device.mode != NVML_DEVICE_MIG_ENABLE:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED, "MIG mode is off")
        p = self.by_id.get(profileId)
        if p is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT, f"profile id {profileId}")
        start, size = placement.start, placement.size
        used = {s for gi in device.gis for s in range(gi.start, gi.start + gi.size)}
        if start not in p.starts or size != p.memory or used & set(range(start, start + size)) \
                or sum(1 for gi in device.gis if gi.profile_id == profileId) >= p.max_count:
            raise NVMLError(NVML_ERROR_INSUFFICIENT_RESOURCES, f"{p.name} at {start}")
        gi = SimpleNamespace(id=len(device.gis) + 100 * device.index, profile_id=profileId, name=p.name, compute=p.compute,
                             start=start, size=size, cis=[], device=device)
        device.gis.append(gi)
        self.calls.append(f"create-gi {device.index} {p.name}@{start}")
        return gi

    def nvmlGpuInstanceDestroy(self, gi):
        if gi.cis:
            raise NVMLError(NVML_ERROR_IN_USE, "compute instances exist")
        gi.device.gis.remove(gi)
        self.calls.append(f"destroy-gi {gi.device.index} {gi.name}@{gi.start}")
        return NVML_SUCCESS

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gi, profile, engProfile, version=2):
        slices = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}[profile]
        if slices > gi.compute:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED, f"a {slices}-slice compute instance in a {gi.compute}-slice GPU instance")
        return SimpleNamespace(id=profile + 50, sliceCount=slices)

    def nvmlGpuInstanceCreateComputeInstance(self, gi, profileId):
        slices = {50: 1, 51: 2, 52: 3, 53: 4, 54: 7}[profileId]
        if sum(c.slices for c in gi.cis) + slices > gi.compute:
            raise NVMLError(NVML_ERROR_INSUFFICIENT_RESOURCES, "no room for the compute instance")
        ci = SimpleNamespace(gi=gi, profile_id=profileId, slices=slices, busy=False)
        gi.cis.append(ci)
        self.calls.append(f"create-ci {gi.device.index} {gi.name}@{gi.start}")
        return ci

    def nvmlGpuInstanceGetComputeInstances(self, gi, profileId, computeInstancesRef, countRef):
        return _fill([c for c in gi.cis if c.profile_id == profileId], computeInstancesRef, countRef)

    def nvmlComputeInstanceDestroy(self, ci):
        if ci.busy:
            raise NVMLError(NVML_ERROR_IN_USE, "a process runs on it")
        ci.gi.cis.remove(ci)
        self.calls.append(f"destroy-ci {ci.gi.device.index} {ci.gi.name}@{ci.gi.start}")
        return NVML_SUCCESS

    def _mig_devices(self, device) -> list:
        """One MIG device per compute instance, as the driver enumerates them."""
        return [ci for gi in sorted(device.gis, key=lambda g: g.start) for ci in gi.cis]

    def nvmlDeviceGetMaxMigDeviceCount(self, device):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device, index):
        found = self._mig_devices(device)
        if device.mode != NVML_DEVICE_MIG_ENABLE or index >= len(found):
            raise NVMLError(NVML_ERROR_NOT_FOUND, f"no MIG device {index}")
        return SimpleNamespace(ci=found[index])

    def nvmlDeviceGetGpuInstanceId(self, mig):
        return mig.ci.gi.id

    def nvmlDeviceGetUUID(self, handle):
        if hasattr(handle, "ci"):
            gi = handle.ci.gi
            return f"MIG-fake-{gi.device.index}-{gi.name}-{gi.start}"
        return f"GPU-fake-{handle.index}"

    # ---- for tests ----

    def layout(self, index: int) -> list[tuple[str, int]]:
        return sorted((gi.name, gi.start) for gi in self.devices[index].gis)
