"""The live controller bursting to a real moto_server through the EC2 provider: the request is
journaled, a restart resumes it without a second launch, a timeout releases what arrived, and the
meter charges the month's spend. The sites' Ray clusters are unreachable here: these tests stop
at admission, which is where the cloud's part ends."""

from __future__ import annotations

import uuid
from datetime import UTC

import boto3
import pytest

from federation.config import parse
from federation.runtime.controller import Controller
from federation.runtime.sites import RaySite
from federation.store import CloudRequest, JobRow, RequestLedger, Store
from providers.aws import Ec2Provider
from tests.fakes.faulty import FaultyProxy, ec2_error

CONFIG = """
federation: {{name: {fed}, timezone: UTC}}
sites:
  - name: idc
    kind: idc
    ray_address: http://127.0.0.1:9
    node_groups:
      - {{name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 1}}
  - name: aws
    kind: aws
    ray_address: http://127.0.0.1:9
    provider: {{kind: aws, region: us-east-1, launch_template: {template}, subnet_ids: [{subnet}], endpoint_url: {endpoint}}}
    node_groups: {groups}
queues: {queues}
policies:
  burst: {{enabled: true, pending_wait_s: 60, budget_usd_per_hour: 200, provisioning_timeout_s: 600, scale_in_idle_s: 300}}
  tidal: {tidal}
"""


RESEARCH = "[{name: research, deserved: {gpu: 8}, burst: true}]"
P4D = """
      - {name: p4d, instance_type: p4d.24xlarge, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 96,
         memory_gib_per_node: 1152, max_nodes: 4, price_usd_per_hour: 30, boot_s: 300}"""


@pytest.fixture
def cloud(moto_server, tmp_path, request):
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_server)
    vpc = ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.40.1.0/24")["Subnet"]["SubnetId"]
    template = f"tpl-{uuid.uuid4().hex[:6]}"
    ec2.create_launch_template(LaunchTemplateName=template, LaunchTemplateData={"ImageId": "ami-12c6146b"})
    proxy = FaultyProxy(moto_server)
    given = getattr(request, "param", {})  # a test may give the config tidal policies or other node groups
    fed = parse(CONFIG.format(fed=f"ctl-{uuid.uuid4().hex[:6]}", template=template, subnet=subnet, endpoint=proxy.url,
                              tidal=given.get("tidal", "[]"), groups=given.get("groups", P4D), queues=given.get("queues", RESEARCH)))
    clock = [1_800_000_000.0]
    made = []

    class SiteRay(RaySite):
        """The sites' Ray clusters, faked: they take every job and run it until it is stopped;
        every machine the cloud runs has joined its site's cluster, but those a test names in
        `controller.not_joined`."""

        runs: dict[str, str] = {}  # dispatch id -> state, across restarts of the controller

        def answers(self):
            return True

        def submit(self, dispatch_id, entrypoint, runtime_env, allocation, metadata=None):
            self.runs.setdefault(dispatch_id, "RUNNING")

        def status(self, dispatch_id):
            return self.runs.get(dispatch_id)

        def stop(self, dispatch_id):
            if dispatch_id in self.runs:
                self.runs[dispatch_id] = "STOPPED"

        def joined(self):
            return {i["InstanceId"] for i in instances()} - controller.not_joined

    def controller():
        ledger = RequestLedger(tmp_path / "state.db")
        site = fed.site("aws")
        prov = Ec2Provider(fed.name, "aws", site.provider, {g.name: g for g in site.node_groups}, ledger=ledger)
        made.append(prov)
        sites = {s.name: SiteRay(s.name, s.ray_address) for s in fed.sites}
        return Controller(fed, Store(tmp_path / "state.db"), sites, clock=lambda: clock[0], providers={"aws": prov}, ledger=ledger), prov

    def instances():
        filters = [{"Name": "tag:federation", "Values": [fed.name]}, {"Name": "instance-state-name", "Values": ["pending", "running"]}]
        return [i for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]

    controller.not_joined = set()
    yield controller, clock, proxy, instances
    for p in made:
        p.close()
    proxy.close()


def submit_gang(ctl, job_id, tasks=2, queue="research", gpus=8):
    ctl.submit({"entrypoint": "python train.py", "submission_id": job_id,
                "metadata": {"queue": queue, "tasks": str(tasks), "gpus_per_task": str(gpus)}})


def test_a_gang_that_waits_past_pending_wait_bursts_and_is_admitted_on_the_new_nodes(cloud):
    controller, clock, _, instances = cloud
    ctl, prov = controller()
    submit_gang(ctl, "big")
    ctl.tick()
    assert ctl.store.get("big").reason != "WaitingForBurst" and instances() == []  # not before pending_wait_s
    clock[0] += 61
    ctl.tick()
    prov.wait(60)
    assert ctl.store.get("big").reason == "WaitingForBurst" and len(instances()) == 2
    [req] = ctl.ledger.requests("aws")
    assert req.jobs == ["big"] and req.count == 2
    clock[0] += 300
    ctl.tick()
    row = ctl.store.get("big")
    assert row.site == "aws" and row.status == "RUNNING" and {p["node"] for p in row.placements} == {i["InstanceId"] for i in instances()}
    assert ctl.ledger.get(req.id).state == "DELIVERED"
    # two p4d nodes at 30 USD/h for the 300 s since the meter last ran
    assert ctl.ledger.spend("2027-01") == pytest.approx(2 * 30 * 300 / 3600)


def test_a_machine_that_runs_is_ready_once_it_has_joined_its_sites_ray_cluster(cloud):
    """A cloud node is ready when its site's Ray cluster lists it (with its federation-node
    resource), not when the VM runs: until then the gang waits for its burst, and the request is
    still in flight (the provisioning timeout covers the join)."""
    controller, clock, _, instances = cloud
    ctl, prov = requested_on_cloud(controller, clock)
    controller.not_joined = {i["InstanceId"] for i in instances()}
    clock[0] += 300
    ctl.tick()
    assert len(instances()) == 2 and ctl.cloud_nodes == () and list(ctl.in_flight)
    assert ctl.store.get("big").reason == "WaitingForBurst"
    controller.not_joined = set()
    clock[0] += 1
    ctl.tick()
    assert ctl.store.get("big").site == "aws" and len(ctl.cloud_nodes) == 2 and not ctl.in_flight


def test_a_restart_mid_scale_up_resumes_the_request_without_a_second_launch(cloud, tmp_path):
    controller, clock, proxy, instances = cloud
    ctl, prov = controller()
    submit_gang(ctl, "big")
    # the controller journaled a request for the gang and launched one of its two nodes, then died
    ctl.ledger.record(CloudRequest("burst-1", "aws", "p4d", 2, clock[0], jobs=["big"]))
    site = ctl.fed.site("aws")
    tags = [{"Key": k, "Value": v} for k, v in prov.tags("p4d", "burst-1").items()]
    prov.ec2.run_instances(MinCount=1, MaxCount=1, LaunchTemplate={"LaunchTemplateName": site.provider.launch_template},
                           SubnetId=site.provider.subnet_ids[0], TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
    prov.close()
    proxy.seen.clear()
    ctl2, prov2 = controller()
    assert list(ctl2.in_flight) == ["burst-1"]
    prov2.wait(60)
    clock[0] += 120
    ctl2.tick()
    prov2.wait(60)
    assert len(instances()) == 2
    [run] = [b for b in proxy.seen if "Action=RunInstances" in b]
    assert "MinCount=1" in run  # only the missing node
    assert [r.id for r in ctl2.ledger.requests("aws")] == ["burst-1"]  # the gang is not asked for again
    assert ctl2.store.get("big").site == "aws"


@pytest.mark.parametrize("cloud", [{"queues": "[{name: research, deserved: {gpu: 8}, burst: true}, {name: batch}]"}], indirect=True)
def test_nodes_bought_for_a_gang_stay_its_own_across_a_restart(cloud):
    """A job of another queue, first in fair-share order (its queue uses nothing), arrives while
    the gang's nodes boot, and the controller restarts meanwhile. The journal says whom the nodes
    were bought for, so the gang gets them; the other job keeps waiting."""
    controller, clock, _, instances = cloud
    ctl, prov = controller()
    submit_gang(ctl, "fill", tasks=1)
    ctl.tick()  # the IDC node is full
    ctl, prov = requested_on_cloud(lambda: (ctl, prov), clock)
    prov.close()
    ctl2, prov2 = controller()
    submit_gang(ctl2, "small", tasks=1, queue="batch", gpus=2)
    clock[0] += 300
    ctl2.tick()
    big, small = ctl2.store.get("big"), ctl2.store.get("small")
    assert big.status == "RUNNING" and {p["node"] for p in big.placements} == {i["InstanceId"] for i in instances()}
    assert small.status == "PENDING"


SPOT_THEN_ON_DEMAND = """
      - {name: spot, instance_type: p4d.24xlarge, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 96,
         memory_gib_per_node: 1152, max_nodes: 4, price_usd_per_hour: 12, boot_s: 300, spot: true, fallback: ondemand}
      - {name: other, instance_type: p4d.24xlarge, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 96,
         memory_gib_per_node: 1152, max_nodes: 4, price_usd_per_hour: 20, boot_s: 300}
      - {name: ondemand, instance_type: p4d.24xlarge, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 96,
         memory_gib_per_node: 1152, max_nodes: 4, price_usd_per_hour: 30, boot_s: 300}"""


@pytest.mark.parametrize("cloud", [{"groups": SPOT_THEN_ON_DEMAND}], indirect=True)
def test_no_spot_capacity_fails_the_request_and_the_next_cycle_asks_the_spot_groups_fallback(cloud):
    """Failover is the cycle's decision (as the simulator replays it): the provider reports the
    capacity error as data, the cycle blocks the spot group and asks its `fallback` next, ahead of
    the other groups in the config's order."""
    controller, clock, proxy, instances = cloud
    proxy.add(ec2_error("InsufficientInstanceCapacity", when=["Action=RunInstances", "MarketType=spot"]))
    ctl, prov = requested_on_cloud(controller, clock)
    assert instances() == [] and [r.group for r in ctl.ledger.requests("aws")] == ["spot"]
    clock[0] += 1
    ctl.tick()  # learns of the failure: blocks spot, asks for its fallback in the same cycle
    prov.wait(60)
    spot, ondemand = sorted(ctl.ledger.requests("aws"), key=lambda r: r.group != "spot")
    assert (spot.state, ondemand.group, ondemand.jobs) == ("FAILED", "ondemand", ["big"])
    assert ("aws", "spot") in ctl.cycle.blocked and ("aws", "ondemand") not in ctl.cycle.blocked
    assert len(instances()) == 2 and ctl.store.get("big").reason == "WaitingForBurst"


def requested_on_cloud(controller, clock):
    """A controller whose gang "big" did not fit the IDC and made the burst request (delivered once the provider is done)."""
    ctl, prov = controller()
    submit_gang(ctl, "big")
    ctl.tick()
    clock[0] += 61
    ctl.tick()
    prov.wait(60)
    return ctl, prov


def test_capacity_that_is_not_ready_in_time_is_released_and_the_option_blocked(cloud):
    controller, clock, proxy, instances = cloud
    # the instances never get past booting, as the proxy shows them
    proxy.rewrites.append((lambda body: "Action=DescribeInstances" in body,
                           lambda xml: xml.replace(b"<name>running</name>", b"<name>pending</name>")))
    ctl, prov = requested_on_cloud(controller, clock)
    assert len(instances()) == 2 and ctl.cloud_nodes == ()
    clock[0] += 601
    ctl.tick()
    prov.wait(60)
    assert instances() == []
    [req] = ctl.ledger.requests("aws")
    assert req.state == "CANCELLED" and ("aws", "p4d") in ctl.cycle.blocked


def test_reconcile_at_start_terminates_instances_unknown_to_the_journal(cloud, tmp_path):
    controller, clock, _, instances = cloud
    ctl, prov = requested_on_cloud(controller, clock)
    assert len(instances()) == 2
    prov.close()
    (tmp_path / "state.db").unlink()  # the journal is lost
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"state.db{suffix}").unlink(missing_ok=True)
    ctl2, _ = controller()
    ctl2.tick()
    assert instances() == []


def admitted_on_cloud(controller, clock):
    ctl, prov = requested_on_cloud(controller, clock)
    clock[0] += 300
    ctl.tick()
    assert ctl.store.get("big").site == "aws"
    return ctl, prov


def test_a_gang_whose_spot_node_is_interrupted_is_requeued_after_the_stale_gang_grace_with_its_reason(cloud, caplog):
    """KAI's stale gang eviction: below its minimum of tasks, the gang keeps the rest for
    stale_gang_grace_s (a node that comes back would make it whole), then goes back to the queue."""
    caplog.set_level("INFO", logger="federation")
    controller, clock, _, instances = cloud
    ctl, prov = admitted_on_cloud(controller, clock)
    victim = ctl.store.get("big").placements[0]["node"]
    prov.ec2.terminate_instances(InstanceIds=[victim])  # what a spot interruption looks like from here
    clock[0] += 5
    ctl.tick()
    assert ctl.store.get("big").status == "RUNNING" and ctl.store.get("big").attempt == 0  # within its grace
    clock[0] += ctl.fed.policies.preemption.stale_gang_grace_s
    ctl.tick()
    row = ctl.store.get("big")
    assert row.status == "PENDING" and row.attempt == 1 and row.site is None
    assert any("requeued (NodeLost)" in r.getMessage() and victim in r.getMessage() and r.job == "big" and r.levelname == "INFO" for r in caplog.records)
    # queued again, it is decided on at once and waits with a pending reason like any other job (one node is left: not a gang of two)
    assert row.reason in ("WaitingForCapacity", "WaitingForBurst")


def test_a_failed_listing_is_not_an_empty_cloud(cloud):
    controller, clock, proxy, _ = cloud
    ctl, prov = admitted_on_cloud(controller, clock)
    nodes = ctl.cloud_nodes
    proxy.add(ec2_error("Unavailable", 503, when=["Action=DescribeInstances"]))
    clock[0] += 5
    ctl.tick()
    assert ctl.cloud_nodes == nodes  # the last listing stands
    assert ctl.store.get("big").status == "RUNNING" and ctl.ledger.requests("aws")[0].state == "DELIVERED"


@pytest.mark.parametrize("cloud", [{"tidal": "[{name: prewarm, forecast: {history_days: 7, lead_s: 900}}]"}], indirect=True)
def test_the_forecast_learned_from_the_journal_boots_nodes_ahead_of_the_evening_peak(cloud, tmp_path):
    """A week of 16-GPU research gangs from 20:00 to 22:00 in the journal; at 19:46 the next day
    the controller asks for the one node the IDC's 8 GPUs leave short, for no job yet."""
    from datetime import datetime

    controller, clock, _, instances = cloud
    day0 = datetime(2027, 3, 1, tzinfo=UTC).timestamp()  # a Monday
    store = Store(tmp_path / "state.db")
    for d in range(7):
        start = day0 + d * 86400 + 20 * 3600
        store.insert(JobRow(f"past-{d}", "python train.py", {}, {}, {"queue": "research", "tasks": 2, "gpus_per_task": 8.0},
                            status="SUCCEEDED", site="aws", submitted_s=start, started_s=start, ended_s=start + 7200))
    clock[0] = day0 + 7 * 86400 + 10 * 3600  # 10:00: no peak ahead
    ctl, prov = controller()
    ctl.tick()
    prov.wait(60)
    assert instances() == [] and ctl.status()["tidal"]["forecast_prewarm_gpus"] == 0
    clock[0] = day0 + 7 * 86400 + 19 * 3600 + 46 * 60
    ctl.tick()
    prov.wait(60)
    assert ctl.status()["tidal"]["forecast_prewarm_gpus"] == 8
    assert len(instances()) == 1
    [req] = RequestLedger(tmp_path / "state.db").requests()
    assert (req.count, req.jobs or []) == (1, [])
    clock[0] += 60
    ctl.tick()
    prov.wait(60)
    assert len(instances()) == 1  # asked once


@pytest.mark.parametrize("cloud", [{"queues": "[{name: research, deserved: {gpu: 8}, burst: {budget_usd_per_month: 5}}, "
                                              "{name: online, deserved: {gpu: 8}, burst: true}]"}], indirect=True)
def test_a_queue_at_its_monthly_budget_buys_no_more_nodes_and_its_spend_survives_a_restart(cloud):
    """Queue budgets (issue 21): research's two nodes (30 USD/h each) run 300 s once listed, 5 USD,
    its whole month's budget. Its next gang waits with BurstBudgetExhausted while online's bursts; the
    month's spend per queue and site is journaled, so a restarted controller holds to it too,
    and /metrics and the status document show it."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from federation.runtime.api import make_app
    from tests.test_observability import samples

    controller, clock, _, instances = cloud
    ctl, prov = requested_on_cloud(controller, clock)
    clock[0] += 300
    ctl.tick()
    clock[0] += 300
    ctl.tick()
    assert ctl.store.get("big").site == "aws"
    assert ctl.ledger.spend_by("2027-01", "queue")["research"] == pytest.approx(2 * 30 * 300 / 3600)
    ctl, prov = controller()  # a restart: the month's split spend is in the journal
    submit_gang(ctl, "fill", tasks=1, queue="online")  # the IDC's node
    ctl.tick()
    submit_gang(ctl, "more", tasks=1)
    submit_gang(ctl, "other", tasks=1, queue="online")
    ctl.tick()
    clock[0] += 61
    ctl.tick()
    prov.wait(60)
    row = ctl.store.get("more")
    assert row.reason == "BurstBudgetExhausted" and "queue research" in row.message
    assert ctl.store.get("other").reason == "WaitingForBurst" and [r.jobs for r in ctl.ledger.requests("aws")][-1] == ["other"]
    doc = ctl.status()["cloud"]
    spent = 5.0 + 2 * 30 * 61 / 3600  # and the 61 s since the restart, while big runs on
    assert doc["queues"]["research"] == {"month_spend_usd": pytest.approx(spent, abs=0.01), "budget_usd_per_month": 5.0}
    assert doc["queues"]["online"]["budget_usd_per_month"] is None and doc["sites"]["aws"]["month_spend_usd"] >= spent - 0.01

    async def scrape():
        async with TestClient(TestServer(make_app(ctl, None))) as client:
            return await (await client.get("/metrics")).text()

    got = samples(asyncio.run(scrape()))
    assert {s.labels["queue"]: s.value for s in got["federation_queue_cloud_budget_usd_month"]} == {"research": 5.0}
    assert {s.labels["queue"]: s.value for s in got["federation_queue_cloud_spend_usd_month"]}["research"] == pytest.approx(spent, abs=0.01)
    assert got["federation_site_cloud_spend_usd_month"][0].labels["site"] == "aws"


def test_a_node_that_comes_back_within_the_grace_keeps_its_gang_whole(cloud):
    """A node that leaves its site's Ray cluster for a moment (a missed heartbeat, a restarted
    raylet) is not a spot interruption: the gang waits out stale_gang_grace_s and goes on."""
    controller, clock, _, instances = cloud
    ctl, prov = admitted_on_cloud(controller, clock)
    flapping = ctl.store.get("big").placements[0]["node"]
    controller.not_joined = {flapping}
    clock[0] += 5
    ctl.tick()
    controller.not_joined = set()
    clock[0] += ctl.fed.policies.preemption.stale_gang_grace_s
    ctl.tick()
    row = ctl.store.get("big")
    assert row.attempt == 0 and row.site == "aws" and len(row.placements) == 2
