"""The local Ray cluster `fedctl up`, the demo and the local provider run: loopback only, logical
GPUs, one Ray node per configured node, each carrying the resource that names it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from federation.errors import FederationError
from federation.model import Node
from federation.runtime.pinning import node_resource


def ray_cli() -> str:
    return shutil.which("ray") or str(Path(sys.executable).parent / "ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_local_ray(nodes: Sequence[Node], head_cpus: int = 2) -> tuple[str, str, dict]:
    """A local Ray cluster on loopback with logical GPUs: a head without GPUs (job drivers and the
    dashboard live there) and one Ray node per configured node, carrying the resource that names
    it, so gangs are pinned to real nodes. Token auth is turned off explicitly (loopback only).
    Returns (dashboard URL, GCS address, the environment to run `ray` in)."""
    ray = ray_cli()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)  # it would override --address
    dash, gcs = free_port(), free_port()
    common = ["--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    _ray_start(ray, env, ["--head", "--num-gpus", "0", "--num-cpus", str(head_cpus), "--dashboard-host", "127.0.0.1",
                          "--dashboard-port", str(dash), "--port", str(gcs), *common])
    for n in nodes:
        _ray_start(ray, env, ray_worker_args(f"127.0.0.1:{gcs}", n.name, n.gpus, n.cpu_milli) + common)
    os.environ["RAY_AUTH_MODE"] = "disabled"
    return f"http://127.0.0.1:{dash}", f"127.0.0.1:{gcs}", env


def ray_worker_args(gcs: str, name: str, gpus: int, cpu_milli: int) -> list[str]:
    """`ray start` arguments for one more node of a local cluster, named for pinning. Its
    dashboard agent gets a port of its own: on one machine the default one is the head's, and an
    agent without one cannot serve the logs of jobs whose driver runs on its node."""
    return ["--address", gcs, "--num-gpus", str(gpus), "--num-cpus", str(max(1, cpu_milli // 1000)),
            "--resources", json.dumps({node_resource(name): 1}), "--dashboard-agent-listen-port", str(free_port())]


def _ray_start(ray: str, env: dict, args: list[str]) -> None:
    r = subprocess.run([ray, "start", *args], env=env, capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        raise FederationError(f"could not start a local Ray node: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
