"""What a dispatched job is told about its allocation, and how that becomes Ray resources."""

import json

import pytest

import federation.runtime as fr
from federation.config import parse
from federation.errors import FederationError
from federation.jobs import make_job
from federation.runtime.pinning import allocation_for, bundles, entrypoint_options

FED = parse("""
federation: {name: pin, timezone: UTC}
sites:
  - name: idc
    kind: local
    provider: {kind: local}
    node_groups: [{name: gpu, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 32, memory_gib_per_node: 256, count: 2}]
queues: [{name: q, deserved: {gpu: 16}}]
""", "pin.yaml")


def alloc(**req):
    spec = make_job(FED, id="j", queue="q", submit_s=0, **req)
    nodes = ["idc/gpu-0", "idc/gpu-1", "idc/gpu-1"][: spec.tasks]
    return allocation_for("j", "idc", [{"node": n, "gpus": [i]} for i, n in enumerate(nodes)], spec)


def test_each_bundle_is_pinned_to_its_task_node_with_the_task_resources():
    a = alloc(tasks=3, gpus_per_task=2, cpus_per_task=4)
    assert bundles(a) == [{"federation-node/idc/gpu-0": 0.001, "GPU": 2.0, "CPU": 4.0},
                          {"federation-node/idc/gpu-1": 0.001, "GPU": 2.0, "CPU": 4.0},
                          {"federation-node/idc/gpu-1": 0.001, "GPU": 2.0, "CPU": 4.0}]
    assert entrypoint_options(a) == {}  # a gang's driver holds nothing


def test_a_one_task_job_entrypoint_is_the_task():
    a = alloc(gpu_milli_per_task=500)
    assert entrypoint_options(a) == {"entrypoint_resources": {"federation-node/idc/gpu-0": 0.001}, "entrypoint_num_gpus": 0.5}
    elastic = alloc(tasks=1, min_tasks=1, gpus_per_task=1)
    assert entrypoint_options(elastic) == {}  # it may grow: gang() starts its tasks


def test_a_mig_task_is_pinned_but_asks_ray_for_no_whole_gpu():
    a = alloc(mig_profile="1g.10gb")
    assert "GPU" not in entrypoint_options(a) and entrypoint_options(a)["entrypoint_resources"] == {"federation-node/idc/gpu-0": 0.001}


def test_gang_outside_a_dispatched_job_or_for_one_task_says_why(monkeypatch):
    monkeypatch.delenv("FEDERATION_ALLOCATION", raising=False)
    with pytest.raises(FederationError, match="FEDERATION_ALLOCATION is not set"):
        fr.gang()
    monkeypatch.setenv("FEDERATION_ALLOCATION", json.dumps(alloc(gpus_per_task=1)))
    with pytest.raises(FederationError, match="has one task"):
        fr.gang()


def test_only_uploaded_packages_are_referenced_and_odd_runtime_envs_are_not_an_error():
    from federation.runtime.packages import referenced

    env = {"working_dir": "gcs://_ray_pkg_a.zip", "py_modules": ["gcs://_ray_pkg_b.zip", "s3://bucket/m.zip", "/local/path"]}
    assert referenced(env) == ["_ray_pkg_a.zip", "_ray_pkg_b.zip"]
    assert referenced("not a dict") == [] and referenced({"py_modules": "gcs://x.zip"}) == []
