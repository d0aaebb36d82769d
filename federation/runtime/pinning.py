"""Inside a dispatched job: run the gang exactly where the controller placed it.

The controller passes each job its allocation in the environment (`FEDERATION_ALLOCATION`). A
site's Ray nodes each carry a custom resource naming them (`federation-node/<node>`: 1; the
local provider, the Terraform modules and `fedctl up` start nodes that way), so a placement group
bundle that asks for a sliver of that resource can only land on that node. The GPU counts come
from the allocation too; which device indices Ray hands out within a node is Ray's business, and
since the controller never gives a node's GPUs out twice, Ray always has them. A MIG slice is
not a Ray GPU: a MIG task asks `mig_device()` for its slice's UUID, read with NVML on its node.

A job with one task (and no `min_tasks`) needs none of this: its entrypoint is the task, and the
controller submits it with the task's GPUs and CPUs and pinned to its node. A gang's entrypoint is
a driver that holds nothing and starts its tasks in the placement group `gang()` returns:

    pg = federation.runtime.gang()
    strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)
    worker.options(scheduling_strategy=strategy).remote()
"""

from __future__ import annotations

import json
import os

from federation.errors import FederationError
from federation.model import JobSpec

#: what a bundle asks of its node's naming resource: enough to pin it there, too little to limit
NODE_SHARE = 0.001


def node_resource(node: str) -> str:
    return f"federation-node/{node}"


def joined_nodes(dashboard: str, headers: dict) -> set[str] | None:
    """The federation nodes alive in the Ray cluster at `dashboard` (those whose naming resource a
    live Ray node carries); None when the cluster cannot be asked now."""
    import requests

    prefix = node_resource("")
    try:
        data = requests.get(f"{dashboard}/api/v0/nodes", params={"limit": 10000}, headers=headers, timeout=10).json()
        return {res[len(prefix):] for n in data["data"]["result"]["result"] if n.get("state") == "ALIVE"
                for res in (n.get("resources_total") or {}) if res.startswith(prefix)}
    except (requests.RequestException, ValueError, KeyError, TypeError):
        return None


def allocation_for(job_id: str, site: str, placements: list[dict], spec: JobSpec, gpu_models: dict[str, str] | None = None) -> dict:
    """What the controller hands a job: where its tasks go and what each one holds. A MIG task's
    placement also names its node's GPU model (`gpu_models`: node -> model), for `mig_device()`."""
    models = gpu_models or {}
    placements = [{**p, "gpu_model": models[p["node"]]} if p.get("mig") and p["node"] in models else p for p in placements]
    return {
        "job": job_id, "site": site, "placements": placements,
        "per_task": {"gpu": spec.per_task.gpu_milli / 1000, "cpu": spec.per_task.cpu_milli / 1000, "memory_gib": spec.per_task.memory_mib / 1024},
        # a MIG slice is not a Ray GPU: such a task is pinned to its node and finds its slice in `placements`
        "mig": spec.mig_profile is not None,
        "entrypoint_is_task": spec.tasks == 1 and spec.min_tasks is None,
    }


def _task_resources(allocation: dict, node: str) -> dict:
    per = allocation["per_task"]
    res = {node_resource(node): NODE_SHARE}
    if per["gpu"] and not allocation["mig"]:
        res["GPU"] = per["gpu"]
    if per["cpu"]:
        res["CPU"] = per["cpu"]
    return res


def bundles(allocation: dict) -> list[dict]:
    """One placement group bundle per task, pinned to the task's node."""
    return [_task_resources(allocation, p["node"]) for p in allocation["placements"]]


def entrypoint_options(allocation: dict) -> dict:
    """JobSubmissionClient.submit_job arguments that make a one-task job's entrypoint the task."""
    if not allocation["entrypoint_is_task"]:
        return {}
    res = _task_resources(allocation, allocation["placements"][0]["node"])
    out: dict = {"entrypoint_resources": {k: v for k, v in res.items() if k not in ("GPU", "CPU")}}
    if "GPU" in res:
        out["entrypoint_num_gpus"] = res["GPU"]
    if "CPU" in res:
        out["entrypoint_num_cpus"] = res["CPU"]
    if memory := allocation["per_task"].get("memory_gib"):  # Ray's own memory resource, in bytes
        out["entrypoint_memory"] = int(memory * 1024**3)
    return out


def allocation() -> dict:
    """This job's allocation, as the controller passed it."""
    raw = os.environ.get("FEDERATION_ALLOCATION")
    if raw is None:
        raise FederationError("FEDERATION_ALLOCATION is not set: gang() works inside a job the federation dispatched")
    return json.loads(raw)


def mig_device(task: int = 0, nvml=None) -> str:
    """For a MIG task (`task`: its index in the gang, its bundle index), the UUID of its slice, read
    with NVML on its node: set `CUDA_VISIBLE_DEVICES` to it before CUDA starts. Ray hands out
    whole GPUs itself; a MIG slice is not a Ray GPU, so the task finds its own."""
    from providers.mig_backends import NvmlBackend, NvmlError

    a = allocation()
    if not 0 <= task < len(a["placements"]):
        raise FederationError(f"job {a['job']} has tasks 0-{len(a['placements']) - 1}, not {task}")
    p = a["placements"][task]
    if not p.get("mig") or "gpu_model" not in p:
        raise FederationError(f"task {task} of job {a['job']} was not given a MIG slice; mig_device() is for jobs with a mig_profile")
    m = p["mig"]
    try:
        return NvmlBackend(p["gpu_model"], nvml).mig_uuid(m["gpu"], m["profile"], m["start"])
    except NvmlError as e:
        raise FederationError(f"task {task} of job {a['job']} on {p['node']}: {e}") from None


def gang(timeout_s: float = 120.0):
    """A ready Ray placement group with one bundle per task, on exactly the allocated nodes."""
    a = allocation()
    if a["entrypoint_is_task"]:
        raise FederationError(f"job {a['job']} has one task and its entrypoint already holds it; gang() is for jobs with tasks >= 2 or min_tasks")
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    if not ray.is_initialized():
        ray.init()
    have = ray.cluster_resources()
    missing = sorted({node_resource(p["node"]) for p in a["placements"]} - set(have))
    if missing:
        raise FederationError(f"site {a['site']}: no Ray node carries {', '.join(missing)}; start each node with "
                              f"ray start --resources '{{\"federation-node/<node name>\": 1}}' so gangs can be pinned")
    pg = placement_group(bundles(a), strategy="PACK", name=f"federation-{a['job']}")
    if not pg.wait(timeout_s):
        remove_placement_group(pg)
        raise FederationError(f"job {a['job']}: the placement group on {sorted({p['node'] for p in a['placements']})} was not ready in {timeout_s:g} s")
    return pg
