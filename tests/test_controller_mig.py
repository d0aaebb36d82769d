"""The live controller's MIG manager on a Kubernetes IDC: the kubernetes client against the fake
API server, whose `operator_step()` plays the GPU Operator. The site's Ray cluster is unreachable
here, so these tests stop at admission (the MIG part ends there)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from federation.config import parse
from federation.runtime.controller import Controller
from federation.runtime.sites import RaySite
from federation.store import JobRow, Store
from providers.kubernetes import KubernetesInventory
from tests.fakes.http import serve
from tests.fakes.kube import FakeKubernetes, gpu_node

CONFIG = """
federation: {name: migctl, timezone: UTC}
sites:
  - name: idc
    kind: idc
    ray_address: http://127.0.0.1:9
    provider: {kind: kubernetes, host: URL}
    node_groups:
      - {name: a100, gpu_model: A100-80GB, gpus_per_node: 2, cpus_per_node: 64, memory_gib_per_node: 512, count: 1, mig: {enabled: true}}
queues:
  - {name: online, deserved: {gpu: 2}}
"""


@pytest.fixture
def idc(tmp_path, request):
    fake = FakeKubernetes([gpu_node("gpu-1", "NVIDIA-A100-SXM4-80GB", 2)])
    fake.models = {"gpu-1": "A100-80GB"}
    server, url = serve(fake)
    fed = parse(CONFIG.replace("URL", url) + getattr(request, "param", ""))  # a test may add policies
    clock = [1_800_000_000.0]

    def controller():
        inv = KubernetesInventory(fed.site("idc"))
        return Controller(fed, Store(tmp_path / "state.db"), {"idc": RaySite("idc", "http://127.0.0.1:9")}, clock=lambda: clock[0],
                          inventories={"idc": inv})

    yield fake, controller, clock
    server.shutdown()


def submit_inference(ctl, job_id):
    ctl.submit({"entrypoint": "python serve.py", "submission_id": job_id, "metadata": {"queue": "online", "mig_profile": "1g.10gb"}})


def test_a_mig_job_gets_a_slice_through_the_gpu_operator_and_is_admitted_on_it(idc):
    fake, controller, clock = idc
    ctl = controller()
    submit_inference(ctl, "svc")
    ctl.tick()
    [(node, gpu, layout, _, state, _)] = ctl.store.mig_layouts()
    assert (node, state) == ("gpu-1", "APPLYING") and ["1g.10gb", 0] in layout
    labels = fake.nodes["gpu-1"]["metadata"]["labels"]
    assert labels["nvidia.com/mig.config"].startswith("federation-") and fake.nodes["gpu-1"]["spec"]["unschedulable"]
    clock[0] += 10
    ctl.tick()  # the operator has not finished: the instance may not exist yet
    assert ctl.store.get("svc").status == "PENDING"
    fake.operator_step()
    ctl.tick()
    assert [s for *_, s, _ in ctl.store.mig_layouts()] == ["READY"]
    assert not fake.nodes["gpu-1"]["spec"].get("unschedulable")
    ctl.tick()
    row = ctl.store.get("svc")
    assert row.status == "ADMITTED" and row.placements[0]["mig"]["profile"] == "1g.10gb"
    assert ctl.status()["mig"]["idc"][0]["state"] == "READY"


def test_a_restarted_controller_picks_up_a_reconfiguration_under_way(idc):
    fake, controller, clock = idc
    ctl = controller()
    submit_inference(ctl, "svc")
    ctl.tick()
    fake.operator_step()
    again = controller()  # a restart: the journal says APPLYING, the node's labels say how it went
    again.tick()
    assert [s for *_, s, _ in again.store.mig_layouts()] == ["READY"]
    again.tick()
    assert again.store.get("svc").status == "ADMITTED"
    assert len({p[2]["metadata"]["labels"]["nvidia.com/mig.config"] for p in fake.patches if "labels" in p[2].get("metadata", {})}) == 1


def test_a_failed_reconfiguration_keeps_the_previous_layout(idc):
    fake, controller, clock = idc
    ctl = controller()
    submit_inference(ctl, "svc")
    ctl.tick()
    fake.models["gpu-1"] = "A30-24GB"  # the operator finds the profile unknown and reports failed
    fake.operator_step()
    ctl.tick()
    rows = ctl.store.mig_layouts()
    assert all(state == "READY" for *_, state, _ in rows) and all(layout == [] for _, _, layout, *_ in rows)
    assert not fake.nodes["gpu-1"]["spec"].get("unschedulable")
    assert ctl.store.get("svc").status == "PENDING"
    labels_set = sum(1 for p in fake.patches if "labels" in p[2].get("metadata", {}))
    clock[0] += 60
    ctl.tick()  # no retry storm: the node rests before the next attempt
    assert sum(1 for p in fake.patches if "labels" in p[2].get("metadata", {})) == labels_set
    clock[0] += 600
    ctl.tick()
    assert [s for *_, s, _ in ctl.store.mig_layouts()] == ["APPLYING"]


def test_the_mig_backend_follows_the_site(tmp_path):
    from federation.errors import ConfigError
    from providers.mig_backends import GpuOperatorBackend, NoDeviceBackend, RayNvmlBackend

    def backend(provider: str, setting: str = "auto"):
        text = CONFIG.replace("provider: {kind: kubernetes, host: URL}", provider).replace("mig: {enabled: true}", f"mig: {{enabled: true, backend: {setting}}}")
        fed = parse(text.replace("URL", "http://127.0.0.1:9"))
        inv = {"idc": KubernetesInventory(fed.site("idc"))} if "kubernetes" in provider else {}
        return Controller(fed, Store(tmp_path / f"{len(provider)}{setting}.db"), {"idc": RaySite("idc", "http://127.0.0.1:9")}, inventories=inv).mig["idc"].backend

    assert isinstance(backend("provider: {kind: kubernetes, host: URL}"), GpuOperatorBackend)
    assert isinstance(backend("provider: {kind: local}"), NoDeviceBackend)  # logical GPUs
    assert isinstance(backend(""), RayNvmlBackend)  # a bare-metal Ray site
    assert isinstance(backend("provider: {kind: kubernetes, host: URL}", "none"), NoDeviceBackend)
    with pytest.raises(ConfigError, match="mig.backend.*kind: kubernetes"):
        backend("", "gpu-operator")  # fedctl validate says so first


@pytest.mark.parametrize("idc", ["policies: {tidal: [{name: prewarm, forecast: {history_days: 7, lead_s: 900}}]}\n"], indirect=True)
def test_the_forecast_learned_from_the_journal_slices_ahead_of_the_evening_inference_peak(idc, tmp_path):
    """A week of three 1g.10gb services from 20:00 to 22:00 in the journal; at 19:46 the next
    day the MIG manager slices for them with no job waiting yet, and not at 10:00."""
    fake, controller, clock = idc
    day0 = datetime(2027, 3, 1, tzinfo=UTC).timestamp()  # a Monday
    store = Store(tmp_path / "state.db")
    for d in range(7):
        start = day0 + d * 86400 + 20 * 3600
        for k in range(3):
            store.insert(JobRow(f"past-{d}-{k}", "python serve.py", {}, {}, {"queue": "online", "mig_profile": "1g.10gb"},
                                status="SUCCEEDED", site="idc", submitted_s=start, started_s=start, ended_s=start + 7200))
    clock[0] = day0 + 7 * 86400 + 10 * 3600
    ctl = controller()
    ctl.tick()
    assert ctl.store.mig_layouts() == []  # no peak one lead time ahead
    clock[0] = day0 + 7 * 86400 + 19 * 3600 + 46 * 60
    ctl.tick()
    sliced = [p for *_, layout, _, state, _ in ctl.store.mig_layouts() for p, _ in layout]
    assert sliced.count("1g.10gb") >= 3 and not ctl.store.jobs({"PENDING"})
    assert fake.nodes["gpu-1"]["metadata"]["labels"]["nvidia.com/mig.config"].startswith("federation-")


def test_a_dispatched_mig_task_is_told_its_nodes_gpu_model(idc):
    # a MIG task finds its slice's UUID by the model (mig_device): dispatch names it per placement
    from tests.test_controller_faults import FakeSite

    class Recording(FakeSite):
        def submit(self, dispatch_id, entrypoint, runtime_env, allocation, metadata=None):
            self.allocations = [*getattr(self, "allocations", []), allocation]
            super().submit(dispatch_id, entrypoint, runtime_env, allocation, metadata)

    fake, controller, clock = idc
    site = Recording("idc")
    ctl = controller()
    ctl.sites["idc"] = site
    submit_inference(ctl, "svc")
    ctl.tick()
    fake.operator_step()
    for _ in range(3):
        clock[0] += 10
        ctl.tick()
    [allocation] = site.allocations
    assert [p["gpu_model"] for p in allocation["placements"]] == ["A100-80GB"] and allocation["mig"]
