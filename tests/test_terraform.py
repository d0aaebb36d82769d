"""The Terraform modules (fmt, validate, `terraform test` with mocked providers) and the Terraform
provider applying the AWS module against a real moto_server.

Terraform's AWS provider comes from a local filesystem mirror (FEDERATION_TF_MIRROR, which
`.ci/run` finds); without terraform or the mirror these tests skip and say so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import boto3
import hcl2
import pytest

from federation.model import NodeGroup, Resources
from providers.base import TAG_FEDERATION, TAG_REQUEST
from providers.errors import INVALID
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


def test_gcp_module_makes_gpu_spot_instances_that_join_ray():
    # No Google provider can be installed here, so `terraform validate` cannot run on this module;
    # its structure is checked by parsing it instead.
    main = hcl2.load((MODULES / "gcp" / "main.tf").open())
    [res] = [r["google_compute_instance"]["node"] for r in main["resource"] if "google_compute_instance" in r]
    assert res["for_each"] == "${var.nodes}"
    [acc] = res["guest_accelerator"]
    assert "accelerator_type" in acc["type"] and ".gpus" in acc["count"]
    [sched] = res["scheduling"]
    assert '"SPOT"' in sched["provisioning_model"] and "spot" in sched["preemptible"]
    assert "ray start --address=${var.ray_address}" in res["metadata"]["startup-script"]
    assert "federation-node/${each.key}" in res["metadata"]["startup-script"]
    variables = {k for v in hcl2.load((MODULES / "gcp" / "variables.tf").open())["variable"] for k in v}
    assert {"federation", "site", "project", "zones", "ray_address", "node_groups", "nodes", "labels"} <= variables


GROUP = NodeGroup(name="gpu", site="aws", gpu_model="A100-80GB", gpus_per_node=8, node_resources=Resources.of(8, 96, 1152),
                  count=0, max_nodes=4, instance_type="p4d.24xlarge")


def provider(tf_env, moto_server, endpoint, tmp_path, federation):
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_server)
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.1.0/24")["Subnet"]["SubnetId"]
    variables = {"federation": federation, "site": "aws", "region": "us-east-1", "endpoint": endpoint, "ami_id": "ami-12c6146b",
                 "subnet_ids": [subnet], "launch_template_name": f"tpl-{federation}", "ray_address": "10.0.0.10:6379",
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
