"""A job the live tests submit with `--working-dir`: it checks, inside the site's Ray cluster,
that it runs where the federation placed it, and exits non-zero (printing why) where it does not."""

import os
import sys

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

import federation.runtime as fr
from federation.runtime.pinning import node_resource

ray.init()
a = fr.allocation()
carries = {n["NodeID"]: set(n["Resources"]) for n in ray.nodes() if n["Alive"]}


def where() -> tuple[str, int]:
    return ray.get_runtime_context().get_node_id(), len(ray.get_gpu_ids())


if a["entrypoint_is_task"]:
    # Ray gives an entrypoint its GPUs through CUDA_VISIBLE_DEVICES; its node is the test's to check
    # (the site reports the driver's node; on one machine a driver may attach to any local raylet)
    gpus = len([d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d])
    print(f"entrypoint holds {gpus} GPU(s) of {a['per_task']['gpu']:g}")
    sys.exit(0 if gpus == a["per_task"]["gpu"] else 1)

pg = fr.gang()
task = ray.remote(where)
got = ray.get([task.options(num_gpus=a["per_task"]["gpu"], num_cpus=0,
                            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)).remote()
               for i in range(len(a["placements"]))])
bad = [(p["node"], gpus) for p, (node, gpus) in zip(a["placements"], got, strict=True) if node_resource(p["node"]) not in carries[node] or gpus != a["per_task"]["gpu"]]
print(f"pinned {len(got)} tasks to {sorted({p['node'] for p in a['placements']})}; misplaced: {bad}; cwd has {sorted(os.listdir('.'))}")
sys.exit(1 if bad else 0)
