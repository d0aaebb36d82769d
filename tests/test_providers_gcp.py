"""The Compute Engine provider through google-cloud-compute (REST) against the HTTP fake."""

from __future__ import annotations

import pytest

from federation.model import NodeGroup, Resources
from federation.schema import GcpProvider as GcpSpec
from federation.store import CloudRequest, RequestLedger
from providers.base import TAG_FEDERATION, TAG_GROUP, TAG_REQUEST, TAG_SITE
from providers.errors import CAPACITY, INVALID
from providers.gcp import GceProvider, instance_name
from tests.fakes.gce import FakeComputeEngine
from tests.fakes.http import serve

ZONES = ["us-central1-a", "us-central1-b"]


def group(name, *, spot=False, fallback=None, model="H100-80GB", max_nodes=4):
    return NodeGroup(name=name, site="gcp", gpu_model=model, gpus_per_node=8, node_resources=Resources.of(8, 208, 1872),
                     count=0, max_nodes=max_nodes, spot=spot, fallback=fallback, instance_type="a3-highgpu-8g")


GROUPS = {"spot": group("spot", spot=True), "std": group("std"), "odd": group("odd", model="MI300X")}


@pytest.fixture
def gce():
    fake = FakeComputeEngine(op_delay_s=0.05)
    server, url = serve(fake)
    made = []

    def make(ledger=None):
        p = GceProvider("fed", "gcp", GcpSpec(kind="gcp", project="proj", zones=ZONES, api_endpoint=url), GROUPS,
                        ray_address="http://10.0.0.2:8265", ledger=ledger or RequestLedger())
        made.append(p)
        return p

    yield fake, make
    for p in made:
        p.close()
    server.shutdown()


def live(fake, zone=None):
    return {name: inst for (_, z, name), inst in fake.instances.items() if zone in (None, z)}


def test_a_spot_request_inserts_gpu_instances_with_labels_in_one_zone(gce):
    fake, make = gce
    p = make()
    p.request("Req-1", GROUPS["spot"], 2)
    p.wait(30)
    insts = live(fake)
    assert sorted(insts) == [instance_name("fed", "gcp", "Req-1", i) for i in range(2)]
    for inst in insts.values():
        assert inst["status"] == "RUNNING" and "/zones/us-central1-a" in inst["zone"]
        assert inst["labels"] == {TAG_FEDERATION: "fed", TAG_SITE: "gcp", TAG_GROUP: "spot", TAG_REQUEST: "req-1"}
        [acc] = inst["guestAccelerators"]
        assert acc["acceleratorCount"] == 8 and acc["acceleratorType"].endswith("acceleratorTypes/nvidia-h100-80gb")
        assert inst["scheduling"]["provisioningModel"] == "SPOT"
        script = inst["metadata"]["items"][0]["value"]
        assert "ray start --address=10.0.0.2:6379 --num-gpus=8" in script and f"federation-node/{inst['name']}" in script
    assert [n.request_id for n in p.list_nodes()] == ["Req-1", "Req-1"] and p.errors() == []
    assert p.ledger.get("Req-1").state == "DELIVERED"
    # the lowercased label still names the ledger's request: reconcile keeps the nodes
    assert all("adopted" in a for a in p.reconcile()) and len(live(fake)) == 2


def test_an_exhausted_zone_is_left_whole_for_the_next_one(gce):
    fake, make = gce
    fake.exhausted_zones.add(ZONES[0])
    p = make()
    p.request("r1", GROUPS["std"], 2)
    p.wait(30)
    assert live(fake, ZONES[0]) == {} and len(live(fake, ZONES[1])) == 2
    assert p.errors() == []


def test_every_zone_exhausted_fails_as_capacity_and_leaves_nothing(gce):
    fake, make = gce
    fake.exhausted_zones.update(ZONES)
    p = make()
    p.request("r1", GROUPS["std"], 2)
    p.wait(30)
    [err] = p.errors()
    assert err.kind == CAPACITY and "ZONE_RESOURCE_POOL_EXHAUSTED" in err.message
    assert live(fake) == {} and p.ledger.get("r1").state == "FAILED"


def test_server_errors_are_retried_in_place(gce):
    fake, make = gce
    fake.fail_next(2, 503)
    p = make()
    p.request("r1", GROUPS["std"], 1)
    p.wait(30)
    assert len(live(fake)) == 1 and p.errors() == []


def test_a_repeated_or_resumed_request_never_makes_a_second_machine(gce):
    fake, make = gce
    p = make()
    p.request("r1", GROUPS["std"], 2)
    p.wait(30)
    p.request("r1", GROUPS["std"], 2)
    p.wait(30)
    assert len(live(fake)) == 2
    # a restarted controller resumes a request the ledger still has as REQUESTED
    ledger = RequestLedger()
    ledger.record(CloudRequest("r2", "gcp", "std", 2, 0.0))
    q = make(ledger)
    q._insert(ZONES[1], instance_name("fed", "gcp", "r2", 0), GROUPS["std"], "r2")  # made before the crash
    q.request("r2", GROUPS["std"], 2)
    q.wait(30)
    assert sorted(n for n in live(fake) if "r2" in n) == [instance_name("fed", "gcp", "r2", i) for i in range(2)]
    assert len(live(fake, ZONES[1])) == 2  # the rest of the gang joined its first node's zone


def test_a_gpu_model_without_an_accelerator_type_is_an_invalid_request(gce):
    fake, make = gce
    p = make()
    p.request("r1", GROUPS["odd"], 1)
    p.wait(30)
    [err] = p.errors()
    assert err.kind == INVALID and "MI300X" in err.message and "gpu_model" in err.message
    assert live(fake) == {}


def test_reconcile_deletes_labelled_instances_the_ledger_does_not_know(gce):
    fake, make = gce
    p = make()
    p.request("keep", GROUPS["std"], 1)
    p.wait(30)
    p._insert(ZONES[1], "fed-gcp-orphan-0", GROUPS["std"], "lost")
    actions = p.reconcile()
    assert any("fed-gcp-orphan-0" in a and "terminated" in a for a in actions)
    assert sorted(live(fake)) == [instance_name("fed", "gcp", "keep", 0)]


def test_release_deletes_and_tolerates_missing_instances(gce):
    fake, make = gce
    p = make()
    p.request("r1", GROUPS["std"], 2)
    p.wait(30)
    names = sorted(n.name for n in p.list_nodes())
    p.release(names + ["never-existed"])
    assert live(fake) == {} and p.errors() == []


def test_long_names_stay_valid_and_distinct():
    a = instance_name("a-very-long-federation-name", "gcp-europe-west4", "job-0123456789abcdef-attempt-3", 0)
    b = instance_name("a-very-long-federation-name", "gcp-europe-west4", "job-0123456789abcdef-attempt-3", 1)
    assert a != b and all(len(n) <= 63 and n[0].isalpha() and n == n.lower() for n in (a, b))
