from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
# the canonical example and the public data sit beside the checkout (../shared)
SHARED = Path(os.environ.get("FEDERATION_SHARED", ROOT.parent / "shared"))


# The federation the live tests run: its IDC is the session's shared local Ray cluster.
LIVE_CONFIG = """
federation: {name: live, timezone: UTC}
priority_classes: [{name: normal, value: 100, default: true}, {name: high, value: 1000}]
sites:
  - name: idc
    kind: local
    provider: {kind: local}
    node_groups:
      - {name: gpu, gpu_model: A100-80GB, gpus_per_node: 4, cpus_per_node: 4, memory_gib_per_node: 16, count: 2}
queues:
  - {name: train, deserved: {gpu: 4}, capability: {gpu: 6}}
  - {name: batch, deserved: {gpu: 4}}
policies: {preemption: {grace_s: 1}}
"""


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster for the session, what fedctl up starts: logical GPUs, Ray's token
    auth, free ports. Stopped by its own processes: other Ray clusters on the host go on."""
    from federation.config import parse
    from federation.inventory import config_nodes
    from federation.runtime.localray import start_local_ray

    cluster = start_local_ray(config_nodes(parse(LIVE_CONFIG, "live.yaml"), ["idc"]))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def ray_site(ray_cluster):
    return ray_cluster.dashboard


@pytest.fixture
def example_text() -> str:
    return (CONFIGS / "idc-aws-gcp.yaml").read_text()


@pytest.fixture(scope="session")
def moto_server():
    """A real moto_server on a free local port, for the whole session; yields its URL.

    Tests share it; each uses its own federation name, and providers filter by that tag.
    """
    from federation.runtime.localray import free_port

    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or shutil.which("moto_server")
    if exe is None:
        pytest.fail("moto_server is not installed: pip install -e '.[dev]' installs moto[server]")
    port = free_port()
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    import requests

    for _ in range(100):
        try:
            requests.get(url + "/moto-api/", timeout=1)
            break
        except requests.ConnectionError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("moto_server did not start")
    yield url
    proc.terminate()
    proc.wait(10)


# Fake AWS credentials for the whole session, so no test can ever reach a real account.
os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
for _k in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
    os.environ.pop(_k, None)


# CI runs the property tests on a fixed sequence of examples, so a submission lands or not on
# its own merits; locally they explore new examples each run.
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
