"""`fedctl up` as its users run it, a process with its actors and its own Ray cluster, under the
faults that once broke it: a `--working-dir` job (its dispatch crossed an actor boundary with
something unpicklable, which stopped scheduling for good), a `kill -9` and a restart (running
jobs became ghosts, the cluster was orphaned and a second started), and a second federation on
the same host (stopping one ran Ray's own stop command, which ended every Ray cluster on the host)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from federation.runtime.localray import LocalCluster, free_port, ray_cli, temp_dir_for
from federation.store import Store

CONFIG = """
federation: {{name: {name}, timezone: UTC}}
api: {{listen: "127.0.0.1:{port}"}}
sites:
  - name: idc
    kind: local
    provider: {{kind: local}}
    node_groups:
      - {{name: gpu, gpu_model: A100-80GB, gpus_per_node: 4, cpus_per_node: 2, memory_gib_per_node: 8, count: 1}}
queues:
  - {{name: batch, deserved: {{gpu: 4}}}}
"""

JOBS = Path(__file__).parent / "jobs"


# the same federation with a local burst site: a Ray cluster of its own, its nodes started on demand
BURST = CONFIG.replace("""queues:
  - {{name: batch, deserved: {{gpu: 4}}}}""", """  - name: burst
    kind: local
    provider: {{kind: local}}
    node_groups:
      - {{name: gpu, gpu_model: A100-80GB, gpus_per_node: 4, cpus_per_node: 2, memory_gib_per_node: 8, min_nodes: 0, max_nodes: 2,
         price_usd_per_hour: 1}}
queues:
  - {{name: batch, deserved: {{gpu: 4}}, burst: true}}
policies: {{burst: {{enabled: true, pending_wait_s: 1, budget_usd_per_hour: 10, scale_in_idle_s: 5}}}}""")


class FedctlUp:
    """One `fedctl up` process, in a process group of its own so a test can kill -9 it alone."""

    def __init__(self, tmp: Path, name: str, state: Path | None = None, port: int | None = None, config: str = CONFIG):
        self.port = port or free_port()
        self.config = tmp / f"{name}.yaml"
        self.config.write_text(config.format(name=name, port=self.port))
        self.state = state or tmp / f"{name}.sqlite"
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / f"{name}-{time.time_ns()}.out", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "federation.cli", "up", "--config", str(self.config), "--state", str(self.state),
                                      "--cycle-s", "0.5"], stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 180
        while time.time() < deadline:
            assert self.proc.poll() is None, Path(self.log.name).read_text()[-3000:]
            try:
                if requests.get(f"{self.url}/api/version", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                time.sleep(0.5)
        raise AssertionError("fedctl up did not serve in time: " + Path(self.log.name).read_text()[-3000:])

    @property
    def cluster(self) -> LocalCluster:
        return LocalCluster(temp_dir_for(str(self.state.resolve())), "", "", [])

    def site_cluster(self, site: str) -> LocalCluster:
        """A local burst site's own cluster, as `fedctl up` recorded it."""
        return LocalCluster.load(temp_dir_for(f"{self.state.resolve()}#{site}")) or LocalCluster(temp_dir_for(f"{self.state.resolve()}#{site}"), "", "", [])

    def submit(self, job_id: str, *args: str, meta: dict | None = None) -> subprocess.CompletedProcess:
        env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
        env.pop("RAY_ADDRESS", None)
        return subprocess.run([ray_cli(), "job", "submit", "--address", self.url, "--submission-id", job_id, "--no-wait",
                               "--metadata-json", json.dumps(meta or {"queue": "batch", "gpus_per_task": "1"}), *args],
                              env=env, capture_output=True, text=True, timeout=180)

    def status(self, job_id: str) -> str:
        return requests.get(f"{self.url}/api/jobs/{job_id}", timeout=10).json()["status"]

    def wait(self, job_id: str, statuses: set[str], timeout: float = 120) -> str:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if (s := self.status(job_id)) in statuses:
                    return s
            except (requests.RequestException, KeyError, ValueError):
                pass
            time.sleep(0.5)
        raise AssertionError(f"{job_id} did not reach {statuses}; journal: {Store(self.state).get(job_id)}\n"
                             + Path(self.log.name).read_text()[-3000:])

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(120)
        self.log.close()


@pytest.fixture
def ups():
    started: list[FedctlUp] = []
    yield started
    for u in started:
        u.stop()
        u.cluster.stop()  # a test that failed half-way leaves nothing behind
        u.site_cluster("burst").stop()


def test_a_working_dir_job_runs_through_the_actors_and_scheduling_goes_on_after_it(tmp_path, ups):
    ups.append(up := FedctlUp(tmp_path, "wd"))
    r = up.submit("wd-1", "--working-dir", str(JOBS), "--", "python", "check_pinning.py")
    assert r.returncode == 0, r.stderr[-2000:]
    assert up.wait("wd-1", {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    r = up.submit("after-1", "--", "python", "-c", "print('after')")
    assert r.returncode == 0, r.stderr[-2000:]
    assert up.wait("after-1", {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    health = requests.get(f"{up.url}/api/federation/status", timeout=10).json()["health"]
    assert health["stalled"] is False and health["errors"].get("cycle", 0) == 0


def test_after_a_kill_9_the_next_fedctl_up_adopts_its_cluster_and_the_running_job_finishes_once(tmp_path, ups):
    ups.append(first := FedctlUp(tmp_path, "crash"))
    assert first.submit("long-1", "--", "python", "-c", "import time; time.sleep(15); print('ran once')").returncode == 0
    first.wait("long-1", {"RUNNING"})
    first.stop(signal.SIGKILL)  # the controller and its actors die; the cluster and the job on it go on
    assert first.cluster.processes(), "the cluster should outlive a kill -9 of fedctl up"
    ups.append(second := FedctlUp(tmp_path, "crash", state=first.state, port=first.port))
    assert second.wait("long-1", {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    row = Store(first.state).get("long-1")
    assert row.attempt == 0  # not requeued and run again: the adopted cluster still knew it
    second.stop()
    assert not second.cluster.processes()  # a clean stop ends the whole cluster it ran on


def test_two_federations_share_a_host_and_stopping_one_leaves_the_other_running(tmp_path, ups):
    ups.append(a := FedctlUp(tmp_path, "fed-a"))
    ups.append(b := FedctlUp(tmp_path, "fed-b"))
    assert a.submit("a-1", "--", "python", "-c", "import time; time.sleep(12); print('a')").returncode == 0
    assert b.submit("b-1", "--", "python", "-c", "print('b')").returncode == 0
    assert b.wait("b-1", {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"  # a second head's dispatch works (free agent ports)
    a.wait("a-1", {"RUNNING"})
    b.stop()
    assert not b.cluster.processes()
    assert a.wait("a-1", {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"  # b's stop ended nothing of a's


def test_a_gang_bursts_to_a_local_site_that_is_a_ray_cluster_of_its_own(tmp_path, ups):
    """Two real Ray clusters, as users federate them: the IDC's and the burst site's. One job runs
    on the IDC; a gang the IDC cannot hold makes the burst site start two nodes in its own
    cluster, and runs there pinned to them (the job checks it from inside), submitted with the
    stock `ray job submit`."""
    ups.append(up := FedctlUp(tmp_path, "two", config=BURST))
    idc, burst = LocalCluster.load(up.cluster.temp_dir), up.site_cluster("burst")
    assert burst.dashboard and burst.gcs != idc.gcs and burst.temp_dir != idc.temp_dir
    assert up.submit("on-idc", "--", "python", "-c", "print('idc')").returncode == 0
    r = up.submit("gang", "--working-dir", str(JOBS), "--", "python", "check_pinning.py", meta={"queue": "batch", "tasks": "2", "gpus_per_task": "4"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert up.wait("on-idc", {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    assert up.wait("gang", {"SUCCEEDED", "FAILED"}, timeout=240) == "SUCCEEDED"
    rows = {j: Store(up.state).get(j) for j in ("on-idc", "gang")}
    assert (rows["on-idc"].site, rows["gang"].site) == ("idc", "burst")

    def ray_jobs(c: LocalCluster) -> set[str]:
        return {j["submission_id"] for j in requests.get(f"{c.dashboard}/api/jobs/", headers=c.headers(), timeout=10).json()}

    assert rows["gang"].dispatch_id in ray_jobs(burst) and rows["gang"].dispatch_id not in ray_jobs(idc)
    assert rows["on-idc"].dispatch_id in ray_jobs(idc) and rows["on-idc"].dispatch_id not in ray_jobs(burst)
    up.stop()
    assert not burst.processes() and not up.cluster.processes()  # both clusters end with fedctl up, nothing else


def test_a_process_that_only_names_the_clusters_files_is_not_taken_for_part_of_it(tmp_path):
    """Someone's `tail -f <temp dir>/session_latest/logs/...` must survive a stop: only processes
    given the temp dir as an option (as Ray's own are) belong to the cluster."""
    temp = temp_dir_for(str(tmp_path / "never-started.sqlite"))
    reader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", f"{temp}/session_latest/logs/raylet.out"], start_new_session=True)
    try:
        cluster = LocalCluster(temp, "", "", [])
        assert reader.pid not in {p.pid for p in cluster.processes()}
        cluster.stop(grace_s=1)
        assert reader.poll() is None
    finally:
        reader.kill()
        reader.wait(10)
