"""`fedctl provider check` end to end: the real CLI against moto_server (AWS) and the Compute Engine fake."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import boto3
import yaml

from tests.conftest import CONFIGS
from tests.fakes.gce import FakeComputeEngine
from tests.fakes.http import serve


def config(tmp_path, federation: str, **providers) -> str:
    doc = yaml.safe_load((CONFIGS / "idc-aws-gcp.yaml").read_text())
    doc["federation"]["name"] = federation
    for site in doc["sites"]:
        site["provider"].update(providers.get(site["provider"]["kind"], {}))
    path = tmp_path / "federation.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def fedctl(*args, cwd):
    return subprocess.run([sys.executable, "-m", "federation.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_provider_check_against_moto_requests_lists_and_releases_leaving_nothing(moto_server, tmp_path):
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_server)
    vpc = ec2.create_vpc(CidrBlock="10.30.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.30.1.0/24")["Subnet"]["SubnetId"]
    template = f"tpl-{uuid.uuid4().hex[:6]}"
    ec2.create_launch_template(LaunchTemplateName=template, LaunchTemplateData={"ImageId": "ami-12c6146b"})
    fed = f"check-{uuid.uuid4().hex[:6]}"
    cfg = config(tmp_path, fed, aws={"endpoint_url": moto_server, "subnet_ids": [subnet], "launch_template": template})
    proc = fedctl("provider", "check", "--config", cfg, "--site", "aws-us-east-1", "--count", "2", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["site"] == "aws-us-east-1" and report["requested"] == 2
    assert len(report["listed"]) == 2 and sorted(report["released"]) == sorted(report["listed"]) and report["left_running"] == []
    live = ec2.describe_instances(Filters=[{"Name": "tag:federation", "Values": [fed]},
                                          {"Name": "instance-state-name", "Values": ["pending", "running"]}])["Reservations"]
    assert live == []
    # the check's request is in the journal the controller reconciles against
    assert (tmp_path / "federation-state.sqlite").exists()


def test_provider_check_reports_failure_and_exits_nonzero_when_no_capacity(tmp_path):
    fake = FakeComputeEngine()
    fake.exhausted_zones.update({"us-central1-a", "us-central1-c"})
    server, url = serve(fake)
    try:
        cfg = config(tmp_path, "acme-gpu", gcp={"api_endpoint": url, "terraform_dir": None})
        proc = fedctl("provider", "check", "--config", cfg, "--site", "gcp-us-central1", "--json", cwd=tmp_path)
    finally:
        server.shutdown()
    assert proc.returncode == 1
    assert "Capacity" in proc.stderr and "ZONE_RESOURCE_POOL_EXHAUSTED" in proc.stderr
    report = json.loads(proc.stdout)
    assert report["listed"] == [] and report["left_running"] == [] and fake.instances == {}


def test_provider_check_names_an_unknown_site(tmp_path):
    proc = fedctl("provider", "check", "--config", str(CONFIGS / "idc-aws-gcp.yaml"), "--site", "nowhere", cwd=tmp_path)
    assert proc.returncode == 2 and "--site" in proc.stderr and "nowhere" in proc.stderr and "Traceback" not in proc.stderr
