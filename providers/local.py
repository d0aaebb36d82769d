"""Local "cloud" nodes: real Ray worker processes started on this machine (`configs/local.yaml`).

A requested node is `ray start --address=<the local cluster> --block` with the node group's GPUs
and CPUs and a custom resource naming the node, started after the provider's `start_delay_s`;
it counts as up once the cluster lists it. Releasing it ends the process, which takes the node
out of the cluster. Nodes start one at a time: two `ray start` at once on one machine race, and
the second times out.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import psutil

from federation.model import NodeGroup
from federation.runtime.localray import LocalCluster, ray_cli, ray_worker_args
from federation.runtime.pinning import joined_nodes, node_resource
from providers.base import ProvidedNode, Provider, ProviderError


class LocalProvider(Provider):
    START_WAIT_S = 120.0  # the longest one node's start holds up the next
    def __init__(self, site: str, cluster: LocalCluster, start_delay_s: float = 0.0):
        self.site, self.cluster, self.dashboard, self.delay = site, cluster, cluster.dashboard, start_delay_s
        self.procs: dict[str, tuple[str, str, subprocess.Popen | None]] = {}  # node -> (group, request id, process)
        self.requested: set[str] = set()
        self._errors: list[ProviderError] = []
        self._lock = threading.Lock()
        self._starting = threading.Lock()  # held from one node's `ray start` until it is up (or gone)

    def request(self, request_id: str, group: NodeGroup, count: int) -> None:
        with self._lock:
            if request_id in self.requested:
                return  # idempotent per request id
            self.requested.add(request_id)
        for i in range(count):
            name = f"{self.site}/{group.name}-{request_id}-{i}"
            with self._lock:
                self.procs[name] = (group.name, request_id, None)
            timer = threading.Timer(self.delay, self._start, args=(name, group, request_id))
            timer.daemon = True
            timer.start()

    def _start(self, name: str, group: NodeGroup, request_id: str) -> None:
        ray = ray_cli()
        cmd = [ray, "start", *ray_worker_args(self.cluster, name, group.gpus_per_node, group.node_resources.cpu_milli), "--block", "--disable-usage-stats"]
        with self._starting:
            with self._lock:
                if name not in self.procs:
                    return  # released before it started
            try:
                # a process group of its own, so that releasing the node ends all it started and nothing else
                proc = subprocess.Popen(cmd, env=self.cluster.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            except OSError as e:
                self._errors.append(ProviderError(request_id, "InvalidRequest", f"cannot start a local Ray worker: {e}"))
                return
            with self._lock:
                if name in self.procs:
                    self.procs[name] = (group.name, request_id, proc)
                else:
                    _end_group(proc.pid)
                    return
            deadline = time.monotonic() + self.START_WAIT_S
            while proc.poll() is None and time.monotonic() < deadline and name not in (self._alive() or ()):
                time.sleep(0.5)

    def _alive(self) -> set[str] | None:
        return joined_nodes(self.dashboard, self.cluster.headers())

    def list_nodes(self) -> list[ProvidedNode] | None:
        alive = self._alive()
        if alive is None:
            self._errors.append(ProviderError("-", "Transient", f"cannot list the nodes of the local cluster at {self.dashboard}"))
            return None
        with self._lock:
            return [ProvidedNode(name, self.site, g, rid) for name, (g, rid, p) in self.procs.items()
                    if p is not None and p.poll() is None and name in alive]

    def release(self, names: list[str]) -> None:
        for name in names:
            with self._lock:
                entry = self.procs.pop(name, None)
            if entry and entry[2] is not None:
                _end_group(entry[2].pid)
                entry[2].wait(30)

    def reconcile(self) -> list[str]:
        """End this site's worker nodes that this provider did not start (left by a `fedctl up`
        that was killed, in a cluster the new one adopted): nobody would ever release them."""
        mark = f'"{node_resource(self.site)}/'
        with self._lock:
            mine = {p.pid for _, _, p in self.procs.values() if p is not None}
        out = []
        for p in psutil.process_iter(["cmdline"]):
            line = p.info["cmdline"] or []
            if p.pid not in mine and "--block" in line and self.cluster.temp_dir in line and any(mark in a for a in line):
                _end_group(p.pid)
                out.append(f"{self.site}: ended a local worker node left by an earlier run (pid {p.pid})")
        return out

    def errors(self) -> list[ProviderError]:
        out, self._errors = self._errors, []
        return out

    def close(self) -> None:
        self.release(list(self.procs))


def _end_group(pgid: int, grace_s: float = 10.0) -> None:
    """End a worker node's process group (its `ray start --block` and the raylet it started)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not _group_alive(pgid):
                return
            time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    for p in psutil.process_iter(["status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.Error):
            pass
    return False
