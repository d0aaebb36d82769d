"""The EC2 provider against a real moto_server, through boto3, with a fault proxy in between."""

from __future__ import annotations

import uuid

import boto3
import pytest

from federation.model import NodeGroup, Resources
from federation.schema import AwsProvider as AwsSpec
from federation.store import CloudRequest, RequestLedger
from providers.aws import Ec2Provider
from providers.base import TAG_FEDERATION, TAG_GROUP, TAG_REQUEST, TAG_SITE
from providers.errors import CAPACITY
from tests.fakes.faulty import FaultyProxy, ec2_error

TEMPLATE = "ray-gpu-worker-test"


def group(name, *, spot=False, fallback=None, max_nodes=4):
    return NodeGroup(name=name, site="aws", gpu_model="A100-80GB", gpus_per_node=8, node_resources=Resources.of(8, 96, 1152),
                     count=0, max_nodes=max_nodes, spot=spot, fallback=fallback, instance_type="p4d.24xlarge", price_usd_per_hour=12.0)


GROUPS = {"spot": group("spot", spot=True, fallback="ondemand"), "ondemand": group("ondemand", max_nodes=2)}


@pytest.fixture(scope="module")
def network(moto_server):
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_server)
    vpc = ec2.create_vpc(CidrBlock="10.10.0.0/16")["Vpc"]["VpcId"]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.10.{i}.0/24", AvailabilityZone=f"us-east-1{z}")["Subnet"]["SubnetId"]
               for i, z in enumerate("ab")]
    ec2.create_launch_template(LaunchTemplateName=TEMPLATE, LaunchTemplateData={"ImageId": "ami-12c6146b"})
    return subnets


@pytest.fixture
def cloud(moto_server, network):
    """A provider for a fresh federation name (tests share one moto_server), behind a fault proxy."""
    proxy = FaultyProxy(moto_server)
    federation = f"fed-{uuid.uuid4().hex[:8]}"
    made = []

    def make(ledger=None):
        spec = AwsSpec(kind="aws", region="us-east-1", subnet_ids=network, launch_template=TEMPLATE, endpoint_url=proxy.url)
        p = Ec2Provider(federation, "aws", spec, GROUPS, ledger=ledger or RequestLedger())
        made.append(p)
        return p

    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_server)
    yield make, proxy, ec2, federation
    for p in made:
        p.close()
    proxy.close()


def tagged(ec2, federation, **more):
    filters = [{"Name": f"tag:{TAG_FEDERATION}", "Values": [federation]}, {"Name": "instance-state-name", "Values": ["pending", "running"]}]
    filters += [{"Name": f"tag:{k}", "Values": [v]} for k, v in more.items()]
    pages = ec2.describe_instances(Filters=filters)["Reservations"]
    return [dict(i, Tags={t["Key"]: t["Value"] for t in i["Tags"]}) for r in pages for i in r["Instances"]]


def test_a_request_starts_exactly_its_nodes_tagged_for_the_federation_and_site(cloud):
    make, proxy, ec2, fed = cloud
    p = make()
    p.request("r1", GROUPS["ondemand"], 2)
    p.wait(60)
    insts = tagged(ec2, fed)
    assert len(insts) == 2
    assert all(i["Tags"][TAG_SITE] == "aws" and i["Tags"][TAG_REQUEST] == "r1" and i["Tags"][TAG_GROUP] == "ondemand" for i in insts)
    assert {i["InstanceType"] for i in insts} == {"p4d.24xlarge"}
    assert sorted(n.name for n in p.list_nodes()) == sorted(i["InstanceId"] for i in insts)
    assert p.ledger.get("r1").state == "DELIVERED" and sorted(p.ledger.get("r1").nodes) == sorted(i["InstanceId"] for i in insts)
    assert p.errors() == []
    # one all-or-nothing call, not one per node
    runs = [b for b in proxy.seen if "Action=RunInstances" in b]
    assert len(runs) == 1 and "MinCount=2" in runs[0] and "MaxCount=2" in runs[0]


def test_asking_again_with_the_same_request_id_starts_nothing_more(cloud):
    make, _, ec2, fed = cloud
    p = make()
    for _ in range(3):
        p.request("r1", GROUPS["ondemand"], 2)
        p.wait(60)
    assert len(tagged(ec2, fed)) == 2


def test_a_controller_restarted_mid_scale_up_adopts_what_was_made_and_launches_only_the_rest(cloud, tmp_path, network):
    make, _, ec2, fed = cloud
    ledger_path = tmp_path / "state.db"
    RequestLedger(ledger_path).record(CloudRequest("r7", "aws", "ondemand", 2, 0.0))
    # the crashed controller had launched one of the two nodes before it died
    tags = [{"Key": TAG_FEDERATION, "Value": fed}, {"Key": TAG_SITE, "Value": "aws"}, {"Key": TAG_GROUP, "Value": "ondemand"},
            {"Key": TAG_REQUEST, "Value": "r7"}]
    ec2.run_instances(MinCount=1, MaxCount=1, LaunchTemplate={"LaunchTemplateName": TEMPLATE}, SubnetId=network[0],
                      TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
    p = make(RequestLedger(ledger_path))
    p.request("r7", GROUPS["ondemand"], 2)
    p.wait(60)
    assert len(tagged(ec2, fed, **{TAG_REQUEST: "r7"})) == 2
    assert p.ledger.get("r7").state == "DELIVERED"


def test_throttling_is_retried_in_place_and_the_request_still_lands(cloud):
    make, proxy, ec2, fed = cloud
    rule = proxy.add(ec2_error("RequestLimitExceeded", 503, when=["Action=RunInstances"], times=2))
    p = make()
    p.request("r1", GROUPS["ondemand"], 1)
    p.wait(60)
    assert rule.fired == 2
    assert len(tagged(ec2, fed)) == 1 and p.errors() == []


def test_no_spot_capacity_in_any_zone_fails_the_request_as_data_and_leaves_nothing_running(cloud):
    """Zones are tried within the request; the move to on-demand is the decision cycle's (one
    implementation, replayed by the simulator), so the provider never launches another group."""
    make, proxy, ec2, fed = cloud
    rule = proxy.add(ec2_error("InsufficientInstanceCapacity", when=["Action=RunInstances", "MarketType=spot"]))
    p = make()
    p.request("r1", GROUPS["spot"], 2)
    p.wait(60)
    assert rule.fired == 2  # both zones were tried
    [err] = p.errors()
    assert err.kind == CAPACITY and err.request_id == "r1"
    assert p.ledger.get("r1").state == "FAILED"
    assert tagged(ec2, fed) == []
    assert not [b for b in proxy.seen if "Action=RunInstances" in b and "MarketType=spot" not in b]  # no on-demand launch of its own


def test_reconcile_terminates_instances_the_ledger_does_not_know_and_keeps_the_rest(cloud, network):
    make, _, ec2, fed = cloud
    p = make()
    p.request("known", GROUPS["ondemand"], 1)
    p.wait(60)

    def launch(federation, request):
        tags = [{"Key": TAG_FEDERATION, "Value": federation}, {"Key": TAG_SITE, "Value": "aws"},
                {"Key": TAG_GROUP, "Value": "ondemand"}, {"Key": TAG_REQUEST, "Value": request}]
        return ec2.run_instances(MinCount=1, MaxCount=1, LaunchTemplate={"LaunchTemplateName": TEMPLATE}, SubnetId=network[0],
                                 TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])["Instances"][0]["InstanceId"]

    leaked = launch(fed, "from-a-lost-ledger")
    other = launch(f"{fed}-other", "theirs")  # another federation's machine is not ours to touch
    actions = p.reconcile()
    assert any(leaked in a and "terminated" in a for a in actions)
    assert any("adopted" in a for a in actions)
    assert [i["Tags"][TAG_REQUEST] for i in tagged(ec2, fed)] == ["known"]
    assert len(tagged(ec2, f"{fed}-other")) == 1 and other


def test_releasing_nodes_terminates_them_and_tolerates_ones_already_gone(cloud):
    make, _, ec2, fed = cloud
    p = make()
    p.request("r1", GROUPS["ondemand"], 2)
    p.wait(60)
    a, b = sorted(n.name for n in p.list_nodes())
    ec2.terminate_instances(InstanceIds=[a])
    p.release([a, b])
    assert tagged(ec2, fed) == [] and p.errors() == []
