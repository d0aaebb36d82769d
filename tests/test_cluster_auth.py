"""Nobody reaches the federation's Ray cluster uninvited. Ray binds its GCS, raylets and agents to
every interface whatever --node-ip-address says (measured), so the cluster runs with Ray's token
authentication; before, it ran with auth off, and anyone who reached the host could run code."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys

import psutil
import requests


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def environ(p: psutil.Process, cluster: dict) -> dict:
    """A process's environment. Ray's agents and workers set their process title over the memory
    that held it (`ray::DashboardAgent`), so for them it is read from the cluster process that
    started them (the raylet), whose environment they were started with."""
    while p is not None and p.pid in cluster:
        env = p.environ()
        if env:
            return env
        p = p.parent()
    return {}


def test_every_outside_listener_of_the_cluster_is_a_ray_process_running_with_token_auth(ray_cluster):
    procs = {p.pid: p for p in ray_cluster.processes()}
    outside = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.pid in procs and not _loopback(c.laddr.ip)]
    assert outside, "expected Ray to listen beyond loopback (if it no longer does, this test can be simplified)"
    for c in outside:
        env = environ(procs[c.pid], procs)
        assert env.get("RAY_AUTH_MODE") == "token", (procs[c.pid].cmdline()[:2], c.laddr)
        assert env.get("RAY_AUTH_TOKEN_PATH") == ray_cluster.token_path
    assert oct(os.stat(ray_cluster.token_path).st_mode & 0o777) == "0o600"


def test_the_dashboard_and_the_gcs_refuse_a_client_without_the_token(ray_cluster):
    assert requests.get(f"{ray_cluster.dashboard}/api/jobs/", timeout=10).status_code == 401
    assert requests.get(f"{ray_cluster.dashboard}/api/jobs/", headers={"Authorization": "Bearer guess"}, timeout=10).status_code in (401, 403)
    assert requests.get(f"{ray_cluster.dashboard}/api/jobs/", headers=ray_cluster.headers(), timeout=10).status_code == 200
    stranger = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    stranger["RAY_AUTH_MODE"] = "disabled"
    r = subprocess.run([sys.executable, "-c", f"import ray; ray.init(address={ray_cluster.gcs!r}); print('CONNECTED')"],
                       env=stranger, capture_output=True, text=True, timeout=120)
    assert "CONNECTED" not in r.stdout and r.returncode != 0
    assert "Authentication token is missing or incorrect" in r.stderr, r.stderr[-1500:]
