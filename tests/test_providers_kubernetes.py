"""The Kubernetes inventory through the kubernetes client against the HTTP fake of the API server."""

from __future__ import annotations

import pytest

from federation import schema
from federation.model import NodeGroup, Resources, Site
from providers.errors import INVALID, ProviderFailure
from providers.kubernetes import KubernetesInventory, matches
from tests.fakes.http import serve
from tests.fakes.kube import FakeKubernetes, gpu_node

RACK = "topology.kubernetes.io/rack"


def groups():
    def g(name, model):
        return NodeGroup(name=name, site="idc", gpu_model=model, gpus_per_node=8, node_resources=Resources.of(8, 128, 1024),
                         count=2, rack_label=RACK)
    return (g("a100", "A100-80GB"), g("h100", "H100-80GB"))


@pytest.fixture
def kube():
    fake = FakeKubernetes([
        gpu_node("gpu-a-1", "NVIDIA-A100-SXM4-80GB", 8, rack="r1"),
        gpu_node("gpu-a-2", "NVIDIA-A100-SXM4-80GB", 7, rack="r2", mig={"1g.10gb": 7}),
        gpu_node("gpu-h-1", "NVIDIA-H100-80GB-HBM3", 8, rack="r1", ready=False),
        gpu_node("gpu-x-1", "NVIDIA-L40S", 4),
    ])
    fake.nodes["cpu-1"] = {"kind": "Node", "metadata": {"name": "cpu-1", "labels": {}}, "spec": {}, "status": {"allocatable": {"cpu": "64"}}}
    server, url = serve(fake)
    spec = schema.KubernetesProvider(kind="kubernetes", host=url, node_selector="nvidia.com/gpu.present=true")
    yield fake, KubernetesInventory(Site("idc", "idc", None, spec, groups()))
    server.shutdown()


def test_inventory_reads_gpu_nodes_with_group_rack_mig_and_health(kube):
    fake, inv = kube
    nodes = {n.name: n for n in inv.gpu_nodes()}
    assert set(nodes) == {"gpu-a-1", "gpu-a-2", "gpu-h-1", "gpu-x-1"}  # the selector leaves the CPU node out
    assert (nodes["gpu-a-1"].group, nodes["gpu-a-1"].gpus, nodes["gpu-a-1"].rack) == ("a100", 8, "r1")
    assert nodes["gpu-a-2"].mig == {"1g.10gb": 7}
    assert nodes["gpu-h-1"].group == "h100" and not nodes["gpu-h-1"].ready
    assert nodes["gpu-x-1"].group is None


def test_list_nodes_offers_ready_matched_nodes_and_reports_the_unmatched_product(kube):
    fake, inv = kube
    assert sorted(n.name for n in inv.list_nodes()) == ["gpu-a-1", "gpu-a-2"]
    [err] = inv.errors()
    assert err.kind == INVALID and "NVIDIA-L40S" in err.message and "gpu_model" in err.message


def test_cordon_and_labels_patch_the_node_and_a_cordoned_node_is_listed_unschedulable(kube):
    fake, inv = kube
    inv.cordon("gpu-a-1")
    inv.set_labels("gpu-a-1", {"nvidia.com/mig.config": "all-1g.10gb", RACK: None})
    n = inv.node("gpu-a-1")
    assert not n.schedulable and n.labels["nvidia.com/mig.config"] == "all-1g.10gb" and RACK not in n.labels
    assert {x.name: x.schedulable for x in inv.list_nodes()} == {"gpu-a-1": False, "gpu-a-2": True}
    assert all(ctype == "application/strategic-merge-patch+json" for _, ctype, _ in fake.patches)
    inv.cordon("gpu-a-1", False)
    assert inv.node("gpu-a-1").schedulable


def test_api_server_errors_are_classified_and_transient_ones_retried(kube):
    fake, inv = kube
    fake.fail_next(2, 503)
    assert len(inv.gpu_nodes()) == 4
    with pytest.raises(ProviderFailure) as e:
        inv.node("no-such-node")
    assert e.value.kind == INVALID and 'nodes "no-such-node" not found' in e.value.message


def test_a_fixed_fleet_refuses_to_grow_as_data():
    site = Site("idc", "idc", None, schema.KubernetesProvider(kind="kubernetes", host="http://127.0.0.1:1"), groups())
    inv = KubernetesInventory(site)
    inv.request("r1", groups()[0], 2)
    [err] = inv.errors()
    assert err.kind == INVALID and "fixed" in err.message


@pytest.mark.parametrize("product, model, expected", [
    ("NVIDIA-A100-SXM4-80GB", "A100-80GB", True), ("NVIDIA-A100-SXM4-40GB", "A100-80GB", False),
    ("NVIDIA-H100-80GB-HBM3", "H100-80GB", True), ("NVIDIA-H100-NVL", "H100-94GB", False), ("Tesla-V100-SXM2-32GB", None, False),
])
def test_gpu_products_match_models_by_their_parts(product, model, expected):
    assert matches(product, model) is expected
