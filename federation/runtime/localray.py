"""The local Ray cluster `fedctl up`, the demo and the tests run: logical GPUs, one Ray node per
configured node, each carrying the resource that names it.

Other people's Ray clusters may share this host, so this module touches only what it started:
every cluster gets a temp dir of its own (derived from the federation's state file, so a
restarted `fedctl up` finds the cluster its predecessor left), every `ray start` runs in a
process group of its own, every fixed-default port is picked free, and `stop()` ends exactly the
processes of that temp dir, their groups and their children. Ray's own stop command, which ends
every Ray process on the host, is never used.

Ray binds its GCS, raylets and agents to every interface whatever `--node-ip-address` says, so
the cluster runs with Ray's own token authentication (`RAY_AUTH_MODE=token`): a random token in
`<temp dir>/auth_token` (owner-only), handed through the environment (`RAY_AUTH_TOKEN_PATH`) to
what must connect (its nodes, the controller, the demo); everything else is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
import requests

from federation.errors import FederationError
from federation.model import Node
from federation.runtime.pinning import node_resource

RECORD = "federation-cluster.json"  # in the cluster's temp dir: what a restarted `fedctl up` adopts


def ray_cli() -> str:
    return shutil.which("ray") or str(Path(sys.executable).parent / "ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def temp_dir_for(key: str) -> str:
    """A short temp dir per key (Ray's socket paths under it must stay within 107 bytes)."""
    return f"/tmp/ray-fed-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


@dataclass
class LocalCluster:
    """A local Ray cluster this process (or a predecessor with the same state file) started."""

    temp_dir: str
    gcs: str  # host:port
    dashboard: str  # URL
    nodes: list[str]  # the names of the configured nodes it was started with

    @property
    def token_path(self) -> str:
        return f"{self.temp_dir}/auth_token"

    @property
    def env(self) -> dict:
        """The environment to run `ray` (or a Ray driver) against this cluster in."""
        env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": self.token_path}
        for name in ("RAY_ADDRESS", "RAY_AUTH_TOKEN"):  # they would override --address and the token file
            env.pop(name, None)
        return env

    def use(self) -> None:
        """Make this process a client of this cluster (ray.init, Ray's job client), with its token."""
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("RAY_")})
        for name in ("RAY_ADDRESS", "RAY_AUTH_TOKEN"):
            os.environ.pop(name, None)
        refresh_ray_auth()

    def headers(self) -> dict:
        """What a plain HTTP request to its dashboard carries."""
        try:
            return {"Authorization": f"Bearer {Path(self.token_path).read_text(encoding='utf-8').strip()}"}
        except OSError:
            return {}

    def alive(self) -> bool:
        try:
            return requests.get(f"{self.dashboard}/api/version", headers=self.headers(), timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def processes(self) -> list[psutil.Process]:
        """Every process of this cluster: those whose command line names its temp dir, the rest of
        their process groups (never this process's own group), and all their children (job drivers)."""
        mine = os.getpgid(0)
        roots, groups = [], set()
        for p in psutil.process_iter(["cmdline"]):
            if self._started_here(p.info["cmdline"] or ()):
                roots.append(p)
                try:
                    groups.add(os.getpgid(p.pid))
                except ProcessLookupError:
                    pass
        groups.discard(mine)
        found = {p.pid: p for p in roots}
        for p in psutil.process_iter():
            try:
                if os.getpgid(p.pid) in groups:
                    found[p.pid] = p
            except (ProcessLookupError, psutil.Error):
                pass
        for p in list(found.values()):
            try:
                found.update((c.pid, c) for c in p.children(recursive=True))
            except psutil.Error:
                pass
        found.pop(os.getpid(), None)
        return list(found.values())

    def _started_here(self, cmdline) -> bool:
        """Whether a command line gives this cluster's temp dir as an option (`--flag=X...`, or
        `--temp-dir X` as `ray start` takes it). A path given as a plain argument (someone's
        `tail -f X/session_latest/logs/...`) does not count: that process is not ours to end."""
        def ours(value: str) -> bool:
            return value == self.temp_dir or value.startswith(self.temp_dir + "/")

        args = list(cmdline)
        return any((a.startswith("-") and ours(a.partition("=")[2])) or (a == "--temp-dir" and i + 1 < len(args) and ours(args[i + 1]))
                   for i, a in enumerate(args))

    def stop(self, grace_s: float = 5.0) -> None:
        """End this cluster's processes (SIGTERM, then SIGKILL after `grace_s`), nothing else."""
        procs = self.processes()
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM)
            except psutil.Error:
                pass
        _, left = psutil.wait_procs(procs, timeout=grace_s)
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=grace_s)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def save(self) -> None:
        path = Path(self.temp_dir) / RECORD
        path.write_text(json.dumps(asdict(self)), encoding="utf-8")
        path.chmod(0o600)

    @classmethod
    def load(cls, temp_dir: str) -> LocalCluster | None:
        try:
            return cls(**json.loads((Path(temp_dir) / RECORD).read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return None


def start_local_ray(nodes: Sequence[Node], head_cpus: int = 2, key: str | None = None, log=lambda _: None,
                    token_of: LocalCluster | None = None) -> LocalCluster:
    """A local Ray cluster with logical GPUs: a head without GPUs (job drivers and the dashboard
    live there) and one Ray node per configured node, carrying the resource that names it, so
    gangs are pinned to real nodes. `key` (the state file) names its temp dir: a live cluster
    left there with the same nodes (by a `fedctl up` that was killed) is adopted, with the jobs
    it still runs; anything else left there is stopped first. Without a key, a fresh temp dir.
    `token_of`: a cluster whose Ray token this one shares (the federation's clients hold one)."""
    names = [n.name for n in nodes]
    temp = temp_dir_for(key or f"{os.getpid()}-{time.time_ns()}")
    old = LocalCluster.load(temp)
    shares = token_of is None or (old is not None and old.headers() == token_of.headers())
    if old is not None and old.nodes == names and shares and old.alive():
        log(f"adopted the federation's Ray cluster at {old.dashboard}, left running by an earlier run")
        old.use()
        return old
    if Path(temp).exists():
        LocalCluster(temp, "", "", []).stop()  # what an earlier run left behind, and nothing else
    Path(temp).mkdir(mode=0o700, parents=True)
    dash, gcs = free_port(), free_port()
    cluster = LocalCluster(temp, f"127.0.0.1:{gcs}", f"http://127.0.0.1:{dash}", names)
    fd = os.open(cluster.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(Path(token_of.token_path).read_text(encoding="utf-8") if token_of is not None else secrets.token_hex(32))
    common = ["--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    try:
        _ray_start(cluster.env, ["--head", "--num-gpus", "0", "--num-cpus", str(head_cpus), "--dashboard-host", "127.0.0.1",
                                 "--dashboard-port", str(dash), "--port", str(gcs), "--temp-dir", temp,
                                 "--dashboard-agent-listen-port", str(free_port()), "--ray-client-server-port", str(free_port()), *common])
        for n in nodes:
            _ray_start(cluster.env, ray_worker_args(cluster, n.name, n.gpus, n.cpu_milli) + common)
    except BaseException:
        cluster.stop()
        raise
    cluster.save()
    cluster.use()
    return cluster


def refresh_ray_auth() -> None:
    """Ray reads its auth mode and token once per process and caches them: after the environment
    changes, read them again (as `ray.init` does when it turns token auth on itself)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def ray_headers() -> dict:
    """The Authorization header Ray's own clients send from this process (none with auth off), for
    plain HTTP requests to a Ray dashboard."""
    from ray._private.authentication.http_token_authentication import (
        get_auth_headers_if_auth_enabled,
    )

    return get_auth_headers_if_auth_enabled({})


def ray_worker_args(cluster: LocalCluster, name: str, gpus: int, cpu_milli: int) -> list[str]:
    """`ray start` arguments for one more node of a local cluster, named for pinning, in the
    cluster's temp dir (which is how it is found to be stopped). Its dashboard agent gets a port
    of its own: on one machine the default one is the head's, and an agent without one cannot
    serve the logs of jobs whose driver runs on its node."""
    return ["--address", cluster.gcs, "--temp-dir", cluster.temp_dir, "--num-gpus", str(gpus), "--num-cpus", str(max(1, cpu_milli // 1000)),
            "--resources", json.dumps({node_resource(name): 1}), "--dashboard-agent-listen-port", str(free_port())]


def _ray_start(env: dict, args: list[str]) -> None:
    # a process group of its own: what it starts is told apart from its caller's group when stopped
    r = subprocess.run([ray_cli(), "start", *args], env=env, capture_output=True, text=True, timeout=180, start_new_session=True)
    if r.returncode != 0:
        raise FederationError(f"could not start a local Ray node: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
