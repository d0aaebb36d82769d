"""MIG backends: the GPU Operator through the kubernetes client against the fake API server, and
NVML through a fake `pynvml` module (no real GPU is ever touched)."""

from __future__ import annotations

import sys

import pytest
import yaml

from federation import schema
from federation.model import NodeGroup, Resources, Site
from providers.kubernetes import KubernetesInventory
from providers.mig_backends import GpuOperatorBackend, NvmlBackend, config_name, mig_parted_config
from tests.fakes.http import serve
from tests.fakes.kube import FakeKubernetes, gpu_node
from tests.fakes.nvml import FakeNvml

SMALL = [("1g.10gb", s) for s in range(7)]


@pytest.fixture
def operator():
    fake = FakeKubernetes([gpu_node("gpu-1", "NVIDIA-A100-SXM4-80GB", 2), gpu_node("gpu-2", "NVIDIA-A100-SXM4-80GB", 2)])
    fake.models = {"gpu-1": "A100-80GB", "gpu-2": "A100-80GB"}
    server, url = serve(fake)
    group = NodeGroup("a100", "idc", "A100-80GB", 2, Resources.of(2, 128, 1024), 2, mig_enabled=True)
    spec = schema.KubernetesProvider(kind="kubernetes", host=url)
    inv = KubernetesInventory(Site("idc", "idc", None, spec, (group,)))
    yield fake, inv, GpuOperatorBackend(inv)
    server.shutdown()


def test_the_mig_parted_config_has_one_entry_per_gpu():
    assert mig_parted_config({1: [], 0: SMALL}) == [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
        {"devices": [1], "mig-enabled": False},
    ]
    assert config_name({0: SMALL, 1: []}) == config_name({1: [], 0: list(reversed(SMALL))})
    assert config_name({0: SMALL, 1: []}) != config_name({0: [], 1: SMALL})


def test_the_operator_applies_a_layout_with_the_node_cordoned_until_success(operator):
    fake, inv, backend = operator
    backend.apply("gpu-1", {0: SMALL, 1: []})
    node = inv.node("gpu-1")
    name = config_name({0: SMALL, 1: []})
    assert node.labels["nvidia.com/mig.config"] == name and not node.schedulable
    assert backend.state("gpu-1", {0: SMALL, 1: []}).state == "pending"
    doc = yaml.safe_load(fake.configmaps[("gpu-operator", "federation-mig-parted-config")]["data"]["config.yaml"])
    assert doc["mig-configs"][name] == mig_parted_config({0: SMALL, 1: []})
    fake.operator_step()
    assert backend.state("gpu-1", {0: SMALL, 1: []}).state == "success"
    node = inv.node("gpu-1")
    assert node.schedulable and node.mig == {"1g.10gb": 7} and node.gpus == 1


def test_configs_no_node_uses_are_dropped_and_the_configmap_is_written_at_its_version(operator):
    fake, inv, backend = operator
    backend.apply("gpu-1", {0: SMALL, 1: []})
    fake.operator_step()
    backend.apply("gpu-1", {0: [], 1: []})
    fake.operator_step()
    backend.apply("gpu-2", {0: SMALL, 1: SMALL})
    configs = yaml.safe_load(fake.configmaps[("gpu-operator", "federation-mig-parted-config")]["data"]["config.yaml"])["mig-configs"]
    # gpu-1's first config is no longer named by any node; its current one and gpu-2's stay
    assert set(configs) == {config_name({0: [], 1: []}), config_name({0: SMALL, 1: SMALL})}


def test_a_conflicting_writer_is_read_again(operator):
    fake, inv, backend = operator
    backend.apply("gpu-1", {0: SMALL, 1: []})
    real_read = inv.api.read_namespaced_config_map
    calls = []

    def read_then_someone_writes(*a, **k):
        cm = real_read(*a, **k)
        if not calls:  # another controller replaces the ConfigMap between our read and our write
            stored = fake.configmaps[("gpu-operator", "federation-mig-parted-config")]
            fake._store_configmap("gpu-operator", "federation-mig-parted-config", stored, 200)
        calls.append(1)
        return cm

    inv.api.read_namespaced_config_map = read_then_someone_writes
    backend.apply("gpu-2", {0: [], 1: SMALL})
    assert len(calls) == 2
    configs = yaml.safe_load(fake.configmaps[("gpu-operator", "federation-mig-parted-config")]["data"]["config.yaml"])["mig-configs"]
    assert config_name({0: [], 1: SMALL}) in configs and config_name({0: SMALL, 1: []}) in configs


def test_a_failed_apply_is_reported_and_the_node_uncordoned(operator):
    fake, inv, backend = operator
    backend.apply("gpu-1", {0: [("9g.99gb", 0)]})  # a profile the A100 does not have
    fake.operator_step()
    st = backend.state("gpu-1", {0: [("9g.99gb", 0)]})
    assert st.state == "failed" and "gpu-1" in st.message
    assert inv.node("gpu-1").schedulable


def test_a_label_someone_else_changed_is_a_failure(operator):
    fake, inv, backend = operator
    backend.apply("gpu-1", {0: SMALL, 1: []})
    inv.set_labels("gpu-1", {"nvidia.com/mig.config": "all-disabled"})
    st = backend.state("gpu-1", {0: SMALL, 1: []})
    assert st.state == "failed" and "someone else" in st.message and inv.node("gpu-1").schedulable


@pytest.fixture
def nvml(monkeypatch):
    fake = FakeNvml("A100-80GB", gpus=2)
    monkeypatch.setitem(sys.modules, "pynvml", fake)  # the backend imports it lazily
    return fake


def test_nvml_refuses_a_placement_the_gpu_does_not_allow(nvml):
    backend = NvmlBackend("A100-80GB")
    backend.apply("here", {0: [("4g.40gb", 4)]})  # a 4g instance starts only at slice 0
    st = backend.state("here", {})
    assert st.state == "failed" and "Insufficient Resources" in st.message


def test_nvml_creates_instances_at_the_planned_placements_with_compute_instances(nvml):
    backend = NvmlBackend("A100-80GB")
    layout = [("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2)]
    backend.apply("here", {0: layout})
    assert backend.state("here", {}).state == "success"
    assert nvml.layout(0) == sorted(layout)
    assert all(len(gi.cis) == 1 and gi.cis[0].slices == gi.compute for gi in nvml.devices[0].gis)
    assert nvml.initialised == 0  # init and shutdown are paired


def test_nvml_destroys_compute_instances_before_their_gpu_instance_and_keeps_the_rest(nvml):
    backend = NvmlBackend("A100-80GB")
    backend.apply("here", {0: [("1g.10gb", 0), ("1g.10gb", 1), ("3g.40gb", 4)]})
    assert backend.state("here", {}).state == "success"
    nvml.calls.clear()
    backend.apply("here", {0: [("1g.10gb", 0), ("2g.20gb", 4)]})
    assert backend.state("here", {}).state == "success"
    assert nvml.layout(0) == [("1g.10gb", 0), ("2g.20gb", 4)]
    destroys = [c for c in nvml.calls if c.startswith("destroy")]
    assert destroys.index("destroy-ci 0 3g.40gb@4") < destroys.index("destroy-gi 0 3g.40gb@4")
    assert "destroy-gi 0 1g.10gb@1" in destroys
    assert not any("1g.10gb@0" in c for c in nvml.calls)  # the kept instance was not touched


def test_nvml_reports_a_busy_instance_it_was_asked_to_destroy(nvml):
    backend = NvmlBackend("A100-80GB")
    backend.apply("here", {0: [("1g.10gb", 0)]})
    nvml.devices[0].gis[0].cis[0].busy = True
    backend.apply("here", {0: [("7g.80gb", 0)]})
    st = backend.state("here", {})
    assert st.state == "failed" and "GPU 0" in st.message and "In use" in st.message
    assert nvml.layout(0) == [("1g.10gb", 0)]


def test_nvml_switches_mig_mode_and_reports_a_change_held_until_reset(monkeypatch):
    fake = FakeNvml("A100-80GB", gpus=2, mig_enabled=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    NvmlBackend("A100-80GB").apply("here", {0: SMALL})
    assert fake.layout(0) == SMALL and fake.devices[0].mode == 1
    held = FakeNvml("A100-80GB", gpus=1, mig_enabled=True, reset_required=True)
    backend = NvmlBackend("A100-80GB", nvml=held)
    backend.apply("here", {0: []})
    st = backend.state("here", {})
    assert st.state == "failed" and "GPU reset" in st.message


def test_every_profile_maps_to_an_nvml_profile_and_a_valid_placement(nvml):
    from federation.mig.catalog import CATALOG

    for model in ("A100-80GB", "A30-24GB", "H100-94GB"):
        fake = FakeNvml(model, gpus=1)
        backend = NvmlBackend(model, nvml=fake)
        for p in CATALOG[model].profiles.values():
            backend.apply("here", {0: [(p.name, p.starts[-1])]})
            assert backend.state("here", {}).state == "success", (model, p.name)
            assert fake.layout(0) == [(p.name, p.starts[-1])]


# `nvidia-smi mig -lgip` and `-lgipp` on a real H200 (issue 22): name, the driver's profile id,
# and the placements as `{starts}:size`, row for row
H200_READ = [
    ("1g.18gb", 19, (0, 1, 2, 3, 4, 5, 6), 1), ("1g.18gb+me", 20, (0, 1, 2, 3, 4, 5, 6), 1), ("1g.35gb", 15, (0, 2, 4, 6), 2),
    ("2g.35gb", 14, (0, 2, 4), 2), ("3g.71gb", 9, (0, 4), 4), ("4g.71gb", 5, (0,), 4), ("7g.141gb", 0, (0,), 8),
]


def test_the_h200_catalog_is_what_nvidia_smi_reads_on_a_real_h200():
    """Our rows, and the NVML profile each maps to (whose id the driver reports, as the fake
    holds the driver's constant-to-id table), against the hardware's."""
    import tests.fakes.nvml as fake_nvml
    from federation.mig.catalog import CATALOG
    from providers.mig_backends import gi_profile

    spec = CATALOG["H200-141GB"]
    ours = [(p.name, fake_nvml.PROFILE_IDS[gi_profile(fake_nvml, p)], p.starts, p.memory) for p in spec.profiles.values()]
    assert ours == H200_READ


def test_asking_for_a_slice_on_a_gpu_with_mig_off_says_so():
    from providers.mig_backends import NvmlError

    fake = FakeNvml("A100-80GB", gpus=2, mig_enabled=False)  # as a GPU ships
    with pytest.raises(NvmlError, match="MIG mode is off on GPU 1"):
        NvmlBackend("A100-80GB", nvml=fake).mig_uuid(1, "1g.10gb", 0)
