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


MIG_FED = parse("""
federation: {name: pinmig, timezone: UTC}
sites:
  - name: idc
    kind: idc
    node_groups: [{name: a100, gpu_model: A100-80GB, gpus_per_node: 2, cpus_per_node: 32, memory_gib_per_node: 256, count: 1, mig: {enabled: true}}]
queues: [{name: q, deserved: {gpu: 2}}]
""", "pinmig.yaml")


def test_a_mig_task_finds_the_uuid_of_exactly_its_slice(monkeypatch):
    from providers.mig_backends import NvmlBackend
    from tests.fakes.nvml import FakeNvml

    fake = FakeNvml("A100-80GB", gpus=2)
    NvmlBackend("A100-80GB", fake).apply("here", {0: [("3g.40gb", 0), ("3g.40gb", 4)], 1: [("1g.10gb", 2)]})
    spec = make_job(MIG_FED, id="m", queue="q", submit_s=0, tasks=2, mig_profile="3g.40gb")
    placed = [{"node": "idc/a100-0", "gpus": [0], "mig": {"gpu": 0, "profile": "3g.40gb", "start": 4}},
              {"node": "idc/a100-0", "gpus": [1], "mig": {"gpu": 1, "profile": "3g.40gb", "start": 0}}]
    a = allocation_for("m", "idc", placed, spec, {"idc/a100-0": "A100-80GB"})
    assert [p["gpu_model"] for p in a["placements"]] == ["A100-80GB", "A100-80GB"]
    monkeypatch.setenv("FEDERATION_ALLOCATION", json.dumps(a))
    assert fr.mig_device(0, nvml=fake) == "MIG-fake-0-3g.40gb-4"  # not the 3g.40gb at slice 0 beside it
    with pytest.raises(FederationError, match="GPU 1 has no 3g.40gb instance at slice 0"):
        fr.mig_device(1, nvml=fake)  # that GPU was sliced otherwise
    with pytest.raises(FederationError, match="tasks 0-1, not 2"):
        fr.mig_device(2, nvml=fake)


def test_whole_gpu_tasks_have_no_mig_device(monkeypatch):
    a = alloc(tasks=2, gpus_per_task=1)
    assert all("gpu_model" not in p for p in a["placements"])
    monkeypatch.setenv("FEDERATION_ALLOCATION", json.dumps(a))
    with pytest.raises(FederationError, match="not given a MIG slice"):
        fr.mig_device(0)
