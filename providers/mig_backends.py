"""Where a MIG manager's layouts are applied: the NVIDIA GPU Operator, or NVML on a bare-metal node.

Both take one node's target layouts (GPU index -> [(profile, start)], an empty list meaning MIG
off, the GPU used whole) and report `pending`, `success` or `failed`. The manager only asks for
changes that leave busy instances where they are; the backends add the I/O around that.

- GPU Operator (Kubernetes): the operator's mig-manager applies a named config from a
  mig-parted ConfigMap to the node whose `nvidia.com/mig.config` label names it, and reports in
  `nvidia.com/mig.config.state` (`pending`, `rebooting`, `success`, `failed`). It restarts the
  node's GPU clients and does not evict pods, so the node is cordoned while it works. Point the
  operator at our ConfigMap (ClusterPolicy `migManager.config.name`). mig-parted takes counts
  per profile and picks the placements itself; the inventory re-reads what it made.
- NVML (`nvidia-ml-py`, imported only when used): GPU instances are created at the planned
  placements, each with one compute instance over all its slices; compute instances are
  destroyed before their GPU instance. MIG mode is switched on for a sliced layout and off for an
  empty one; where the driver holds the change until a GPU reset, the GPU is reported as failed
  with that instruction (resetting a GPU is left to its operator).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
from collections import Counter
from dataclasses import dataclass

import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from federation.mig.catalog import CATALOG, Profile
from providers.errors import TRANSIENT, ProviderFailure
from providers.kubernetes import KubernetesInventory, classify

Layouts = dict[int, list[tuple[str, int]]]
CONFIG_LABEL, STATE_LABEL = "nvidia.com/mig.config", "nvidia.com/mig.config.state"


@dataclass(frozen=True)
class ApplyState:
    state: str  # pending | success | failed
    message: str = ""


def mig_parted_config(layouts: Layouts) -> list[dict]:
    """One mig-parted entry per GPU (by index), in the operator's `config.yaml` format."""
    out = []
    for gpu in sorted(layouts):
        counts = dict(sorted(Counter(p for p, _ in layouts[gpu]).items()))
        entry: dict = {"devices": [gpu], "mig-enabled": bool(counts)}
        if counts:
            entry["mig-devices"] = counts
        out.append(entry)
    return out


def config_name(layouts: Layouts) -> str:
    """Named by content, so asking twice for the same layouts is the same request."""
    digest = hashlib.sha256(json.dumps(mig_parted_config(layouts), sort_keys=True).encode()).hexdigest()[:12]
    return f"federation-{digest}"


class GpuOperatorBackend:
    PREFIX = "federation-"

    def __init__(self, inventory: KubernetesInventory, namespace: str = "gpu-operator", configmap: str = "federation-mig-parted-config"):
        self.inv, self.namespace, self.configmap = inventory, namespace, configmap

    def apply(self, node: str, layouts: Layouts) -> None:
        name = config_name(layouts)
        self._write_config(name, mig_parted_config(layouts))
        self.inv.cordon(node)  # the operator restarts the node's GPU clients and evicts nothing
        self.inv.set_labels(node, {CONFIG_LABEL: name})

    def state(self, node: str, layouts: Layouts) -> ApplyState:
        """Read from the node's labels alone, so that a restarted controller picks it up."""
        name = config_name(layouts)
        labels = self.inv.node(node).labels
        if labels.get(CONFIG_LABEL) != name:
            self.inv.cordon(node, False)
            return ApplyState("failed", f"{node}'s {CONFIG_LABEL} label is {labels.get(CONFIG_LABEL)!r}, not {name!r}: changed by someone else")
        got = labels.get(STATE_LABEL, "pending")
        if got in ("success", "failed"):
            self.inv.cordon(node, False)
            msg = "" if got == "success" else f"the GPU Operator could not apply {name} on {node}; see its mig-manager pod's log"
            return ApplyState(got, msg)
        return ApplyState("pending", f"{STATE_LABEL}={got}")

    def _write_config(self, name: str, entries: list[dict]) -> None:
        """Add our config to the ConfigMap (read, change, replace at its resourceVersion, again on a
        409 Conflict), dropping our configs that no node refers to any more."""
        api = self.inv.api
        in_use = {n.labels.get(CONFIG_LABEL) for n in self.inv.gpu_nodes()}
        for _ in range(5):
            try:
                cm = api.read_namespaced_config_map(self.configmap, self.namespace, _request_timeout=30)
            except ApiException as e:
                if e.status != 404:
                    raise classify(e) from None
                cm = None
            doc = yaml.safe_load((cm.data or {}).get("config.yaml", "") if cm else "") or {"version": "v1", "mig-configs": {}}
            configs = doc.setdefault("mig-configs", {})
            for key in [k for k in configs if k.startswith(self.PREFIX) and k not in in_use and k != name]:
                del configs[key]
            configs[name] = entries
            meta = k8s.V1ObjectMeta(name=self.configmap, namespace=self.namespace, resource_version=cm.metadata.resource_version if cm else None)
            body = k8s.V1ConfigMap(metadata=meta, data={"config.yaml": yaml.safe_dump(doc, sort_keys=False)})
            try:
                if cm is None:
                    api.create_namespaced_config_map(self.namespace, body, _request_timeout=30)
                else:
                    api.replace_namespaced_config_map(self.configmap, self.namespace, body, _request_timeout=30)
                return
            except ApiException as e:
                if e.status != 409:  # someone else wrote it in between: read again
                    raise classify(e) from None
        raise ProviderFailure(TRANSIENT, f"ConfigMap {self.namespace}/{self.configmap} kept changing while we wrote it")


class RayNvmlBackend:
    """NVML on a bare-metal node of a Ray site: `providers.mig_agent` runs there as a Ray job
    pinned to the node (its `federation-node/<name>` resource); the job's status is the state.
    The job id is named by the layouts, so asking twice does not run it twice."""

    def __init__(self, site, model_of, runtime_env: dict | None = None):
        # model_of: node -> its GPU model; runtime_env: for the agent's job, e.g. {"pip": ["nvidia-ml-py"]}
        self.site, self.model_of, self.runtime_env = site, model_of, runtime_env

    @staticmethod
    def job_id(node: str, layouts: Layouts) -> str:
        return f"mig-{node.replace('/', '-')}-{config_name(layouts)[len('federation-'):]}"

    def apply(self, node: str, layouts: Layouts) -> None:
        arg = json.dumps({str(g): [list(i) for i in lay] for g, lay in sorted(layouts.items())})
        entrypoint = f"python -m providers.mig_agent --model {self.model_of(node)} --layouts '{arg}'"
        self.site.run_on_node(self.job_id(node, layouts), node, entrypoint, self.runtime_env)

    def state(self, node: str, layouts: Layouts) -> ApplyState:
        got = self.site.status(self.job_id(node, layouts))
        if got == "SUCCEEDED":
            return ApplyState("success")
        if got in ("FAILED", "STOPPED", None):
            tail = self.site.logs(self.job_id(node, layouts)).strip().splitlines()[-1:] if got else []
            return ApplyState("failed", f"the MIG agent on {node} {'did not run' if got is None else got.lower()}: {' '.join(tail)}")
        return ApplyState("pending", f"MIG agent job {got}")


class NoDeviceBackend:
    """For sites whose GPUs cannot be sliced from here (local Ray workers with logical GPUs, or
    a fleet no backend reaches): the layout is only the federation's bookkeeping, so that MIG
    jobs can be scheduled and pinned there, and it is applied as soon as it is asked for."""

    def apply(self, node: str, layouts: Layouts) -> None:
        pass

    def state(self, node: str, layouts: Layouts) -> ApplyState:
        return ApplyState("success")


# ---- NVML ----------------------------------------------------------------------------------

class NvmlError(RuntimeError):
    pass


def gi_profile(nvml, p: Profile) -> int:
    """NVML's GPU instance profile constant for a catalog profile."""
    if p.name.endswith("+me"):
        return {1: nvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 2: nvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1}[p.compute]
    if p.compute == 1 and p.memory == 2:  # 1g with two memory slices (1g.20gb, 1g.24gb, 1g.35gb)
        return nvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2
    return {1: nvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 2: nvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 3: nvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE,
            4: nvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 7: nvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE}[p.compute]


def ci_profile(nvml, compute: int) -> int:
    return {1: nvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: nvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, 3: nvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
            4: nvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, 7: nvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE}[compute]


class NvmlBackend:
    """Applies layouts to this machine's GPUs, synchronously (`state` reports the last outcome)."""

    def __init__(self, gpu_model: str, nvml=None):
        if nvml is None:
            import pynvml as nvml  # only on nodes that have GPUs
        self.nvml, self.spec = nvml, CATALOG[gpu_model]
        self.outcome: dict[str, ApplyState] = {}

    def apply(self, node: str, layouts: Layouts) -> None:
        nv = self.nvml
        nv.nvmlInit()
        try:
            problems = []
            for gpu, layout in sorted(layouts.items()):
                try:
                    self._apply_gpu(nv.nvmlDeviceGetHandleByIndex(gpu), gpu, layout)
                except (nv.NVMLError, NvmlError) as e:
                    problems.append(f"GPU {gpu}: {e}")
            self.outcome[node] = ApplyState("failed", "; ".join(problems)) if problems else ApplyState("success")
        finally:
            nv.nvmlShutdown()

    def state(self, node: str, layouts: Layouts) -> ApplyState:
        return self.outcome.get(node, ApplyState("failed", f"no reconfiguration of {node} was started here"))

    def instances(self, handle) -> dict[tuple[str, int], object]:
        """(profile, start) -> GPU instance handle, for every GPU instance on the device."""
        nv = self.nvml
        out = {}
        for p in self.spec.profiles.values():
            info = nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, gi_profile(nv, p))
            arr = (nv.c_nvmlGpuInstance_t * max(1, p.max_count))()
            count = ctypes.c_uint(0)
            nv.nvmlDeviceGetGpuInstances(handle, info.id, arr, ctypes.byref(count))
            for i in range(count.value):
                out[(p.name, nv.nvmlGpuInstanceGetInfo(arr[i]).placement.start)] = arr[i]
        return out

    def mig_uuid(self, gpu: int, profile: str, start: int) -> str:
        """The UUID of the MIG device of GPU `gpu`'s `profile` instance at `start`: what a task
        on that slice sets CUDA_VISIBLE_DEVICES to."""
        nv = self.nvml
        nv.nvmlInit()
        try:
            parent = nv.nvmlDeviceGetHandleByIndex(gpu)
            if nv.nvmlDeviceGetMigMode(parent)[0] != nv.NVML_DEVICE_MIG_ENABLE:
                raise NvmlError(f"MIG mode is off on GPU {gpu}, so it has no {profile} slice; the MIG manager turns it on "
                                "when it applies a layout (a change may wait for a GPU reset)")
            gi = self.instances(parent).get((profile, start))
            if gi is None:
                raise NvmlError(f"GPU {gpu} has no {profile} instance at slice {start}; is its layout applied?")
            want = nv.nvmlGpuInstanceGetInfo(gi).id
            for i in range(nv.nvmlDeviceGetMaxMigDeviceCount(parent)):
                try:
                    mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
                except nv.NVMLError:
                    continue  # an index with no MIG device
                if nv.nvmlDeviceGetGpuInstanceId(mig) == want:
                    uuid = nv.nvmlDeviceGetUUID(mig)
                    return uuid.decode() if isinstance(uuid, bytes) else uuid
            raise NvmlError(f"GPU {gpu}'s {profile} instance at slice {start} has no compute instance")
        except nv.NVMLError as e:
            raise NvmlError(f"GPU {gpu}: {e}") from None
        finally:
            nv.nvmlShutdown()

    def _apply_gpu(self, handle, gpu: int, layout: list[tuple[str, int]]) -> None:
        nv = self.nvml
        want_mode = nv.NVML_DEVICE_MIG_ENABLE if layout else nv.NVML_DEVICE_MIG_DISABLE
        mode, _pending = nv.nvmlDeviceGetMigMode(handle)
        have = self.instances(handle) if mode == nv.NVML_DEVICE_MIG_ENABLE else {}
        for key, gi in have.items():
            if key not in set(layout):
                self._destroy(gi)
        if mode != want_mode:
            nv.nvmlDeviceSetMigMode(handle, want_mode)
            if nv.nvmlDeviceGetMigMode(handle)[0] != want_mode:
                raise NvmlError(f"MIG mode {'on' if layout else 'off'} takes effect after a GPU reset (`nvidia-smi -i {gpu} -r` once it is idle)")
        for name, start in sorted(set(layout) - set(have), key=lambda i: -self.spec.profiles[i[0]].memory):
            p = self.spec.profiles[name]
            info = nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, gi_profile(nv, p))
            gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(handle, info.id, nv.c_nvmlGpuInstancePlacement_t(start, p.memory))
            ci = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_profile(nv, p.compute), nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            nv.nvmlGpuInstanceCreateComputeInstance(gi, ci.id)

    def _destroy(self, gi) -> None:
        """Compute instances first: NVML refuses to destroy a GPU instance that still has them."""
        nv = self.nvml
        for c in (1, 2, 3, 4, 7):
            try:
                info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_profile(nv, c), nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            except nv.NVMLError:
                continue  # this GPU instance is too small for that profile
            arr = (nv.c_nvmlComputeInstance_t * 8)()
            count = ctypes.c_uint(0)
            nv.nvmlGpuInstanceGetComputeInstances(gi, info.id, arr, ctypes.byref(count))
            for i in range(count.value):
                nv.nvmlComputeInstanceDestroy(arr[i])
        nv.nvmlGpuInstanceDestroy(gi)
