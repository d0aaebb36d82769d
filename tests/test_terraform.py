"""The Terraform modules (fmt, validate, `terraform test` with mocked providers) and the Terraform
provider applying the AWS module against a real moto_server.

Terraform's AWS provider comes from a local filesystem mirror (FEDERATION_TF_MIRROR, which
`.ci/run` finds); without terraform or the mirror these tests skip and say so.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import boto3
import hcl2
import pytest
import yaml

from federation.config import parse
from federation.errors import ConfigError
from federation.model import NodeGroup, Resources
from federation.runtime.controller import Controller
from federation.runtime.sites import RaySite, SiteUnavailable
from federation.store import RequestLedger, Store
from providers.base import TAG_FEDERATION, TAG_REQUEST
from providers.errors import INVALID
from providers.factory import cluster_jobs_api, cluster_provider
from providers.terraform import TerraformProvider
from tests.conftest import ROOT
from tests.fakes.faulty import FaultyProxy, ec2_error

MODULES = ROOT / "infra" / "terraform"
TERRAFORM = shutil.which("terraform")
needs_terraform = pytest.mark.skipif(TERRAFORM is None, reason="terraform is not on the PATH")


@pytest.fixture(scope="module")
def tf_env(tmp_path_factory):
    """Terraform's environment: the AWS provider from the local mirror, no network installs."""
    mirror = os.environ.get("FEDERATION_TF_MIRROR") or ("/opt/tf-plugins" if Path("/opt/tf-plugins").is_dir() else None)
    if TERRAFORM is None or mirror is None or not (Path(mirror) / "registry.terraform.io/hashicorp/aws").is_dir():
        pytest.skip("terraform or its AWS provider mirror (FEDERATION_TF_MIRROR) is absent")
    rc = tmp_path_factory.mktemp("tf") / "terraformrc"
    rc.write_text(f'provider_installation {{\n  filesystem_mirror {{\n    path = "{mirror}"\n  }}\n}}\n')
    return {**os.environ, "TF_CLI_CONFIG_FILE": str(rc), "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1"}


def tf(env, cwd, *args):
    proc = subprocess.run([TERRAFORM, *args, "-no-color"], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"terraform {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@needs_terraform
def test_both_modules_are_terraform_fmt_clean():
    proc = subprocess.run([TERRAFORM, "fmt", "-check", "-recursive", "-diff", str(MODULES)], capture_output=True, text=True,
                          env={**os.environ, "TF_CLI_CONFIG_FILE": os.devnull})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_aws_module_validates_and_its_mocked_plan_tests_pass(tf_env, tmp_path):
    work = tmp_path / "aws"
    shutil.copytree(MODULES / "aws", work)
    tf(tf_env, work, "init", "-backend=false", "-input=false")
    tf(tf_env, work, "validate")
    out = tf(tf_env, work, "test")
    assert "0 failed" in out and "passed" in out


def gcp_module() -> dict:
    """Every block of the GCP module, parsed: no Google provider can be installed here, so
    `terraform validate` and `terraform test` cannot run on it (what is not checked: provider
    schemas, attribute names and types, and any apply)."""
    blocks: dict = {"resource": {}, "variable": set(), "output": set()}
    for f in (MODULES / "gcp").glob("*.tf"):
        doc = hcl2.load(f.open())
        for r in doc.get("resource", []):
            for kind, named in r.items():
                blocks["resource"].update({f"{kind}.{n}": body for n, body in named.items()})
        blocks["variable"] |= {k for v in doc.get("variable", []) for k in v}
        blocks["output"] |= {k for v in doc.get("output", []) for k in v}
    return blocks


def test_gcp_module_makes_gpu_spot_workers_that_join_ray_with_the_token():
    res = gcp_module()["resource"]["google_compute_instance.node"]
    assert res["for_each"] == "${var.nodes}"
    [acc] = res["guest_accelerator"]
    assert "accelerator_type" in acc["type"] and ".gpus" in acc["count"]
    [sched] = res["scheduling"]
    assert '"SPOT"' in sched["provisioning_model"] and "spot" in sched["preemptible"]
    script = res["metadata"]["startup-script"]
    assert "until ray start --address=${local.ray_address}" in script and "federation-node/${each.key}" in script and "${local.auth}" in script


def test_gcp_module_makes_a_whole_cluster_when_asked():
    mod = gcp_module()
    res = mod["resource"]
    head = res["google_compute_instance.head"]
    assert "var.head.enabled" in head["count"] and "ray start --head --port=6379" in head["metadata"]["startup-script"]
    assert "--num-gpus=0" in head["metadata"]["startup-script"]
    assert {"google_compute_network.site", "google_compute_subnetwork.site", "google_service_account.node"} <= set(res)
    members, controller = res["google_compute_firewall.members"], res["google_compute_firewall.controller"]
    assert members["source_tags"] == members["target_tags"] == ["${local.ray_tag}"]
    assert controller["source_ranges"] == "${var.controller_cidrs}" and controller["allow"][0]["ports"] == ["6379", "8265", "10001"]
    assert res["google_secret_manager_secret_iam_member.token"]["role"] == "roles/secretmanager.secretAccessor"
    assert {"federation", "site", "project", "zones", "network", "controller_cidrs", "service_account", "ray_auth_token_secret",
            "head", "ray_address", "node_groups", "nodes", "labels"} <= mod["variable"]
    assert {"nodes", "ray_address", "jobs_api_url", "network", "service_account"} <= mod["output"]


GROUP = NodeGroup(name="gpu", site="aws", gpu_model="A100-80GB", gpus_per_node=8, node_resources=Resources.of(8, 96, 1152),
                  count=0, max_nodes=4, instance_type="p4d.24xlarge")


def provider(tf_env, moto_server, endpoint, tmp_path, federation):
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_server)
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.1.0/24")["Subnet"]["SubnetId"]
    variables = {"federation": federation, "site": "aws", "region": "us-east-1", "endpoint": endpoint, "ami_id": "ami-12c6146b",
                 "vpc_id": vpc, "subnet_ids": [subnet], "launch_template_name": f"tpl-{federation}", "ray_address": "10.0.0.10:6379",
                 "head": {"enabled": False}, "ray_auth_token_parameter": "/acme/ray-token",
                 "node_groups": {"gpu": {"instance_type": "p4d.24xlarge", "gpus": 8, "cpus": 96}}}
    return TerraformProvider(federation, "aws", MODULES / "aws", tmp_path / "work", {"gpu": GROUP}, variables, env=tf_env), ec2


def running(ec2, federation):
    filters = [{"Name": f"tag:{TAG_FEDERATION}", "Values": [federation]}, {"Name": "instance-state-name", "Values": ["pending", "running"]}]
    return [i for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


def test_terraform_provider_applies_requests_and_releases_against_moto(tf_env, moto_server, tmp_path):
    fed = f"tf-{uuid.uuid4().hex[:6]}"
    p, ec2 = provider(tf_env, moto_server, moto_server, tmp_path, fed)
    try:
        p.request("R1", GROUP, 2)
        p.wait(300)
        assert p.errors() == []
        nodes = p.list_nodes()
        assert sorted(n.name for n in nodes) == ["gpu-r1-0", "gpu-r1-1"] and {n.request_id for n in nodes} == {"R1"}
        insts = running(ec2, fed)
        assert len(insts) == 2 and {t["Value"] for i in insts for t in i["Tags"] if t["Key"] == TAG_REQUEST} == {"R1"}
        assert not (ROOT / "infra/terraform/aws/terraform.tfstate").exists()  # state lives in the work dir
        p.release([n.name for n in nodes])
        assert running(ec2, fed) == [] and p.list_nodes() == [] and p.errors() == []
    finally:
        p.close()


def test_a_failed_apply_is_classified_and_leaves_no_machine(tf_env, moto_server, tmp_path):
    fed = f"tf-{uuid.uuid4().hex[:6]}"
    proxy = FaultyProxy(moto_server)
    # (not a capacity error: Terraform's AWS provider retries those for up to 50 minutes,
    # hashicorp/terraform-provider-aws#43193; the provider's apply timeout bounds that case)
    proxy.add(ec2_error("InvalidParameterValue", when=["Action=RunInstances"], message="bad instance type"))
    p, ec2 = provider(tf_env, moto_server, proxy.url, tmp_path, fed)
    try:
        p.request("r1", GROUP, 1)
        p.wait(300)
        [err] = p.errors()
        assert err.kind == INVALID and "InvalidParameterValue" in err.message
        assert running(ec2, fed) == [] and p.desired() == {}
    finally:
        p.close()
        proxy.close()


@pytest.mark.parametrize("output,kind", [
    ("api error InvalidParameterValue: bad instance type, RequestID: 5003, endpoint http://127.0.0.1:45003/", "InvalidRequest"),
    ("https response error StatusCode: 503, RequestID: x", "Transient"),
    ("api error InsufficientInstanceCapacity: none left", "Capacity"),
    ("https response error StatusCode: 403, api error UnauthorizedOperation", "Auth"),
])
def test_terraform_errors_are_classified_by_the_cloud_code_not_by_stray_digits(output, kind):
    from providers.terraform import classify

    assert classify(output) == kind


# ---- a whole burst cluster: `fedctl site up|down` against moto_server ----

def cluster_config(tmp_path, federation: str, endpoint: str, **provider) -> Path:
    doc = {"federation": {"name": federation},
           "sites": [{"name": "idc", "kind": "local", "node_groups": [{"name": "a100", "gpu_model": "A100-80GB", "count": 1,
                                                                         "gpus_per_node": 8, "cpus_per_node": 64, "memory_gib_per_node": 512}]},
                     {"name": "aws", "kind": "aws",
                      "provider": {"kind": "aws", "region": "us-east-1", "endpoint_url": endpoint, "terraform_dir": str(MODULES / "aws"),
                                   "launch_template": f"tpl-{federation}", "image_id": "ami-12c6146b", "ray_auth_token_parameter": f"/{federation}/ray-token",
                                   "cluster": {"zones": ["us-east-1a", "us-east-1b"], "controller_cidrs": ["127.0.0.1/32"]}, **provider},
                      "node_groups": [{"name": "gpu", "gpu_model": "A100-80GB", "gpus_per_node": 8, "cpus_per_node": 96, "memory_gib_per_node": 1152,
                                       "max_nodes": 4, "instance_type": "p4d.24xlarge", "price_usd_per_hour": 32.8}]}],
           "queues": [{"name": "team", "deserved": {"gpu": 8}}]}
    path = tmp_path / "federation.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def fedctl(env, *args):
    return subprocess.run([sys.executable, "-m", "federation.cli", *args], capture_output=True, text=True, env=env, timeout=600)


def tagged(moto_server, federation) -> dict[str, list]:
    """Everything of the federation's left in the (shared) moto_server, by kind."""
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_server)
    iam = boto3.client("iam", region_name="us-east-1", endpoint_url=moto_server)
    tag = [{"Name": f"tag:{TAG_FEDERATION}", "Values": [federation]}]
    live = [{"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}]
    return {"instances": [i["InstanceId"] for r in ec2.describe_instances(Filters=tag + live)["Reservations"] for i in r["Instances"]],
            "vpcs": [v["VpcId"] for v in ec2.describe_vpcs(Filters=tag)["Vpcs"]],
            "subnets": [v["SubnetId"] for v in ec2.describe_subnets(Filters=tag)["Subnets"]],
            "security_groups": [g["GroupId"] for g in ec2.describe_security_groups(Filters=tag)["SecurityGroups"]],
            "gateways": [g["InternetGatewayId"] for g in ec2.describe_internet_gateways(Filters=tag)["InternetGateways"]],
            "route_tables": [t["RouteTableId"] for t in ec2.describe_route_tables(Filters=tag)["RouteTables"]],
            "launch_templates": [t["LaunchTemplateName"] for t in ec2.describe_launch_templates()["LaunchTemplates"]
                                 if t["LaunchTemplateName"] == f"tpl-{federation}"],
            "roles": [r["RoleName"] for r in iam.list_roles()["Roles"] if r["RoleName"].startswith(federation)],
            "instance_profiles": [p["InstanceProfileName"] for p in iam.list_instance_profiles()["InstanceProfiles"]
                                  if p["InstanceProfileName"].startswith(federation)]}


def test_site_up_makes_a_whole_burst_cluster_that_workers_join_and_site_down_leaves_nothing(tf_env, moto_server, tmp_path, monkeypatch):
    fed = f"tf-{uuid.uuid4().hex[:6]}"
    cfg, state = cluster_config(tmp_path, fed, moto_server), tmp_path / "state.sqlite"
    boto3.client("ssm", region_name="us-east-1", endpoint_url=moto_server).put_parameter(
        Name=f"/{fed}/ray-token", Value="s3cret", Type="SecureString")
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_server)

    proc = fedctl(tf_env, "site", "up", "aws", "--config", str(cfg), "--state", str(state), "--json")
    assert proc.returncode == 0, proc.stderr
    outputs = json.loads(proc.stdout)
    [head] = [i for r in ec2.describe_instances(Filters=[{"Name": "tag:federation-role", "Values": ["head"]},
                                                         {"Name": f"tag:{TAG_FEDERATION}", "Values": [fed]}])["Reservations"]
              for i in r["Instances"]]
    ip = head["PrivateIpAddress"]
    assert outputs["ray_address"] == f"{ip}:6379" and outputs["jobs_api_url"] == f"http://{ip}:8265" and outputs["nodes"] == {}
    made = tagged(moto_server, fed)
    assert len(made["vpcs"]) == 1 and len(made["subnets"]) == 2 and made["gateways"] and made["instance_profiles"] == [f"{fed}-aws-node"]
    [sg] = ec2.describe_security_groups(GroupIds=[outputs["security_group_id"]])["SecurityGroups"]
    opened = sorted((p.get("FromPort"), r["CidrIp"]) for p in sg["IpPermissions"] for r in p.get("IpRanges", []))
    assert opened == [(6379, "127.0.0.1/32"), (8265, "127.0.0.1/32"), (10001, "127.0.0.1/32")]
    assert any(g["GroupId"] == sg["GroupId"] for p in sg["IpPermissions"] for g in p.get("UserIdGroupPairs", []))
    assert head["IamInstanceProfile"]["Arn"].endswith(f"/{fed}-aws-node")

    # the controller's RaySite finds the site's Jobs API where the module's state says
    locate = cluster_jobs_api(state, parse(cfg.read_text(), str(cfg)).site("aws"))
    assert locate() == outputs["jobs_api_url"]

    # the federation scales workers in the same state: they join this head, and the head stays
    monkeypatch.setenv("TF_CLI_CONFIG_FILE", tf_env["TF_CLI_CONFIG_FILE"])
    fedcfg = parse(cfg.read_text(), str(cfg))
    p = cluster_provider(fedcfg, fedcfg.site("aws"), state)
    try:
        p.request("R1", fedcfg.site("aws").node_groups[0], 1)
        p.wait(300)
        assert p.errors() == []
        [worker] = p.list_nodes()
    finally:
        p.close()
    [w] = [i for r in ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_REQUEST}", "Values": ["R1"]},
                                                      {"Name": f"tag:{TAG_FEDERATION}", "Values": [fed]}])["Reservations"]
           for i in r["Instances"]]
    data = ec2.describe_instance_attribute(InstanceId=w["InstanceId"], Attribute="userData")["UserData"]["Value"]
    script = base64.b64decode(data).decode()
    assert f"ray start --address={ip}:6379" in script and f"FEDERATION_NODE={worker.name}" in script and "RAY_AUTH_MODE=token" in script
    assert head["InstanceId"] in tagged(moto_server, fed)["instances"]  # not replaced by the workers' apply

    again = fedctl(tf_env, "site", "up", "aws", "--config", str(cfg), "--state", str(state), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["ray_address"] == f"{ip}:6379" and list(json.loads(again.stdout)["nodes"]) == [worker.name]

    refused = fedctl(tf_env, "site", "down", "aws", "--config", str(cfg), "--state", str(state))
    assert refused.returncode == 2 and worker.name in refused.stderr and "--force" in refused.stderr
    gone = fedctl(tf_env, "site", "down", "aws", "--config", str(cfg), "--state", str(state), "--force")
    assert gone.returncode == 0, gone.stderr
    assert tagged(moto_server, fed) == {k: [] for k in made}
    assert locate() is None


def test_a_cluster_that_is_down_is_an_unavailable_site_that_says_how_it_comes_up():
    site = RaySite("aws", None, lambda: None)
    with pytest.raises(SiteUnavailable, match="cluster is down; its next scale-up brings it up"):
        site.status("j-0")
    assert site.joined() is None  # cannot be asked: nothing is judged lost or ready on it


@needs_terraform
def test_the_controller_brings_a_cluster_up_with_its_first_workers_and_takes_it_down_when_idle(tmp_path, caplog):
    """The lifecycle through the live controller and real terraform (a stand-in module of
    terraform_data with the AWS module's interface, so it runs here in seconds): a gang's burst
    applies the head with the workers; the job goes away, the idle workers are released after
    scale_in_idle_s, and after scale_in_idle_s more with nothing there the whole cluster is
    destroyed; the site's Jobs API is then gone from the state its RaySite reads."""
    from providers.terraform import JobsApiOf

    caplog.set_level("INFO", logger="federation")
    head = {"zones": ["us-east-1a"], "controller_cidrs": ["127.0.0.1/32"], "head_price_usd_per_hour": 3.6}
    fed = parse(yaml.safe_dump({**yaml.safe_load(cluster_config(tmp_path, "life", "http://127.0.0.1:9", cluster=head).read_text()),
                                "queues": [{"name": "team", "deserved": {"gpu": 8}, "burst": True}],
                                "policies": {"burst": {"enabled": True, "pending_wait_s": 60, "scale_in_idle_s": 300, "budget_usd_per_hour": 100}}}), "f.yaml")
    clock = [1_800_000_000.0]
    ledger = RequestLedger(tmp_path / "state.db")
    site = fed.site("aws")
    work = tmp_path / "work"
    prov = TerraformProvider(fed.name, "aws", ROOT / "tests/data/tf-cluster", work, {g.name: g for g in site.node_groups},
                             {"federation": fed.name, "site": "aws"}, ledger=ledger, clock=lambda: clock[0])

    class Joined(RaySite):
        def joined(self):
            return {n.name for n in prov.list_nodes() or []}

    sites = {"idc": Joined("idc", "http://127.0.0.1:9"), "aws": Joined("aws", None, JobsApiOf(work))}
    ctl = Controller(fed, Store(tmp_path / "state.db"), sites, clock=lambda: clock[0], providers={"aws": prov}, ledger=ledger)
    try:
        ctl.submit({"entrypoint": "python train.py", "submission_id": "big", "metadata": {"queue": "team", "tasks": "2", "gpus_per_task": "8"}})
        ctl.tick()
        assert not prov.head_up()
        clock[0] += 61
        ctl.tick()
        prov.wait(120)
        assert prov.head_up() and len(prov.list_nodes()) == 2 and ctl.store.get("big").reason == "WaitingForBurst"
        ctl.stop("big")
        for _ in range(2):  # the nodes come and idle; then they are given back
            clock[0] += 301
            ctl.tick()
        clock[0] += 1
        ctl.tick()
        clock[0] += 298
        ctl.tick()
        assert prov.list_nodes() == [] and prov.head_up()  # the head stays while the site has been empty less than scale_in_idle_s
        clock[0] += 2
        ctl.tick()
        prov._down.result(120)
        assert not prov.head_up() and JobsApiOf(work)() is None and prov.errors() == []
        assert any("taking its cluster down" in r.getMessage() and r.site == "aws" for r in caplog.records)
        # the head was seen up from the cycle after the apply (+301 s) to the one that took it down: 602 s at 3.6 USD/h,
        # billed to the site, no queue's
        book = ctl.showback
        assert book.site_cost["aws"] - sum(book.cost.values()) == pytest.approx(3.6 * 602 / 3600)
        assert ctl.ledger.spend_by(ctl._month(clock[0]), "site")["aws"] == pytest.approx(book.site_cost["aws"])
    finally:
        prov.close()


def test_site_up_is_only_for_sites_whose_cluster_the_module_makes(tf_env, tmp_path):
    cfg = cluster_config(tmp_path, "nocluster", "http://127.0.0.1:9", cluster=None, vpc_id="vpc-1", subnet_ids=["subnet-1"])
    doc = yaml.safe_load(cfg.read_text())
    doc["sites"][1]["ray_address"] = "http://10.0.0.10:8265"
    cfg.write_text(yaml.safe_dump(doc))
    proc = fedctl(tf_env, "site", "up", "aws", "--config", str(cfg))
    assert proc.returncode == 2 and "provider.cluster" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("provider,site,message", [
    ({"ray_auth_token_parameter": None}, {}, "ray_auth_token_parameter"),
    ({"ray_auth_token_parameter": "acme-token"}, {}, "starts with /"),
    ({"cluster": {"controller_cidrs": ["0.0.0.0/0"]}}, {}, "whole internet"),
    ({"terraform_dir": None}, {}, "give terraform_dir too"),
    ({"subnet_ids": ["subnet-1"]}, {}, "give its vpc_id too"),
    ({"cluster": None, "vpc_id": "vpc-1", "subnet_ids": ["subnet-1"]}, {}, "ray_address"),
    ({"cluster": None}, {"ray_address": "http://10.0.0.10:8265"}, "vpc_id"),
])
def test_the_config_says_what_the_aws_module_needs(tmp_path, provider, site, message):
    cfg = cluster_config(tmp_path, "cfg", "http://127.0.0.1:9")
    doc = yaml.safe_load(cfg.read_text())
    doc["sites"][1]["provider"].update(provider)
    doc["sites"][1].update(site)
    with pytest.raises(ConfigError) as e:
        parse(yaml.safe_dump(doc), "f.yaml")
    assert message in str(e.value) and "sites" in str(e.value)


def gcp_config(**provider) -> dict:
    return {"federation": {"name": "g"},
            "sites": [{"name": "idc", "kind": "local", "node_groups": [{"name": "a100", "gpu_model": "A100-80GB", "count": 1, "gpus_per_node": 8,
                                                                         "cpus_per_node": 64, "memory_gib_per_node": 512}]},
                      {"name": "gcp", "kind": "gcp",
                       "provider": {"kind": "gcp", "project": "acme", "zones": ["us-central1-a", "us-central1-b"], "terraform_dir": str(MODULES / "gcp"),
                                    "ray_auth_token_secret": "ray-token",
                                    "cluster": {"controller_cidrs": ["203.0.113.5/32"], "head_machine_type": "n2-standard-8", "head_boot_s": 240},
                                    **provider},
                       "node_groups": [{"name": "a100", "gpu_model": "A100-80GB", "gpus_per_node": 8, "cpus_per_node": 96,
                                        "memory_gib_per_node": 1360, "max_nodes": 4, "instance_type": "a2-highgpu-8g", "spot": True}]}],
            "queues": [{"name": "team", "deserved": {"gpu": 8}, "burst": True}]}


def test_a_gcp_site_with_cluster_gives_the_module_a_head_and_only_variables_it_declares(tmp_path):
    """provider.cluster on a gcp site is wired as on aws: the module makes the head (and network,
    firewall, service account); `fedctl site up` may bring it up; the simulator waits head_boot_s."""
    from providers.factory import cluster_provider, terraform_variables

    fed = parse(yaml.safe_dump(gcp_config()), "g.yaml")
    site = fed.site("gcp")
    variables = terraform_variables(fed, site)
    assert set(variables) <= gcp_module()["variable"]  # nothing the module does not declare
    assert variables["head"] == {"enabled": True, "machine_type": "n2-standard-8", "public_ip": False}
    assert variables["controller_cidrs"] == ["203.0.113.5/32"] and variables["ray_auth_token_secret"] == "ray-token"
    assert "ray_address" not in variables and variables["node_groups"]["a100"]["spot"] is True
    assert site.cluster.head_boot_s == 240
    prov = cluster_provider(fed, site, tmp_path / "state.db")  # a site `fedctl site up` may bring up
    assert not prov.head_up()

    # without cluster, workers join an existing head: its address is given, the module makes no head
    doc = gcp_config(cluster=None)
    doc["sites"][1]["ray_address"] = "http://10.1.0.2:8265"
    fed = parse(yaml.safe_dump(doc), "g.yaml")
    variables = terraform_variables(fed, fed.site("gcp"))
    assert variables["head"] == {"enabled": False} and variables["ray_address"] == "10.1.0.2:6379"
    assert set(variables) <= gcp_module()["variable"]


@pytest.mark.parametrize("provider,message", [
    ({"terraform_dir": None}, "give terraform_dir too"),
    ({"cluster": {"controller_cidrs": ["0.0.0.0/0"]}}, "whole internet"),
    ({"cluster": None}, "ray_address"),
])
def test_the_config_says_what_the_gcp_module_needs(provider, message):
    with pytest.raises(ConfigError) as e:
        parse(yaml.safe_dump(gcp_config(**provider)), "g.yaml")
    assert message in str(e.value) and "sites" in str(e.value)
