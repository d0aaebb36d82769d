"""The live controller against a real local Ray cluster (the session's shared one, made from
conftest.LIVE_CONFIG), driven by Ray's own client and CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from federation.config import parse
from federation.runtime.access import load_tokens
from federation.runtime.api import Serving
from federation.runtime.controller import Controller
from federation.runtime.localray import free_port, ray_cli, ray_headers
from federation.runtime.sites import RaySite
from federation.store import Store

from .conftest import LIVE_CONFIG as CONFIG

RAY = ray_cli()


class Live:
    def __init__(self, address: str, tmp: Path, tokens=None):
        self.fed = parse(CONFIG, "live.yaml")
        self.store = Store(tmp / "state.sqlite")
        self.ctl = Controller(self.fed, self.store, {"idc": RaySite("idc", address)})
        self.serving = Serving(self.ctl, "127.0.0.1", free_port(), cycle_s=0.3, tokens=tokens)
        self.url = self.serving.url

    def close(self, stop_jobs: bool = True):
        """Stop serving; unless the test wants a crash, stop its jobs too: at the shared cluster its site jobs hold real GPUs."""
        for r in self.store.jobs({"PENDING", "ADMITTED", "RUNNING"}) if stop_jobs else []:
            self.ctl.stop(r.id)
        self.serving.close()


@pytest.fixture
def live(ray_site, tmp_path):
    lv = Live(ray_site, tmp_path)
    yield lv
    lv.close()


def wait_status(client, job_id, statuses, timeout=90):
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = str(client.get_job_status(job_id).value)
        if s in statuses:
            return s
        time.sleep(0.3)
    raise AssertionError(f"{job_id} did not reach {statuses}: {client.get_job_info(job_id)}")


def test_job_submission_client_runs_a_gang_at_the_site_with_its_allocation(live, ray_site):
    from ray.job_submission import JobSubmissionClient

    c = JobSubmissionClient(live.url)
    job_id = c.submit_job(entrypoint="python -c \"import os, json; a = json.loads(os.environ['FEDERATION_ALLOCATION']); print('placed', len(a['placements']), a['site'])\"",
                          metadata={"queue": "train", "tasks": "2", "gpus_per_task": "2"})
    assert wait_status(c, job_id, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    assert "placed 2 idc" in c.get_job_logs(job_id)
    row = live.store.get(job_id)
    assert row.site == "idc" and len(row.placements) == 2
    at_site = JobSubmissionClient(ray_site).get_job_info(row.dispatch_id)  # the site's dashboard shows whose job it is
    assert at_site.metadata["queue"] == "train" and at_site.metadata["federation-job"] == job_id
    assert c.get_job_info(job_id).job_id == job_id  # not null: every route takes it


JOBS = Path(__file__).parent / "jobs"


def ray_job_submit(url: str, job_id: str, meta: dict, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([RAY, "job", "submit", "--address", url, "--submission-id", job_id, "--metadata-json", json.dumps(meta), *args],
                          env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("meta,says", [
    ({"queue": "train", "tasks": "2", "gpus_per_task": "3"}, "pinned 2 tasks to ['idc/gpu-0', 'idc/gpu-1']; misplaced: []"),
    ({"queue": "train", "tasks": "3", "gpus_per_task": "1"}, "pinned 3 tasks"),
    ({"queue": "batch", "gpus_per_task": "2"}, "entrypoint holds 2 GPU(s) of 2"),
])
def test_a_job_uploaded_with_working_dir_runs_exactly_where_it_was_placed(live, ray_site, meta, says):
    """The stock CLI uploads the working_dir to the federation, which hands it to the site; inside
    the job, gang() pins a placement group bundle per task to its allocated node (a one-task job's
    entrypoint is pinned itself), and the job checks that against the nodes Ray reports."""
    job_id = f"pin-{meta['queue']}-{meta.get('tasks', '1')}"
    r = ray_job_submit(live.url, job_id, meta, "--working-dir", str(JOBS), "--", "python", "check_pinning.py")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert says in r.stdout, r.stdout[-3000:]
    row = live.store.get(job_id)
    assert row.status == "SUCCEEDED"
    if len(row.placements) == 1:  # the entrypoint is the task: the site ran its driver on the allocated node
        import requests
        from ray.job_submission import JobSubmissionClient

        driver = JobSubmissionClient(ray_site).get_job_info(row.dispatch_id).driver_node_id
        nodes = requests.get(f"{ray_site}/api/v0/nodes", params={"limit": 100, "detail": "true"}, headers=ray_headers(), timeout=30).json()["data"]["result"]["result"]
        carries = {n["node_id"]: set(n["resources_total"]) for n in nodes}
        assert f"federation-node/{row.placements[0]['node']}" in carries[driver]


def test_packages_are_kept_by_the_federation_and_checked_at_submit(live):
    import requests

    assert requests.get(f"{live.url}/api/packages/gcs/_ray_pkg_nothere.zip", timeout=30).status_code == 404
    assert requests.put(f"{live.url}/api/packages/s3/x.zip", data=b"zip", timeout=30).status_code == 400
    assert requests.put(f"{live.url}/api/packages/gcs/_ray_pkg_abc.zip", data=b"zip", timeout=30).status_code == 200
    assert requests.get(f"{live.url}/api/packages/gcs/_ray_pkg_abc.zip", timeout=30).status_code == 200
    assert live.store.package("_ray_pkg_abc.zip") == b"zip"
    body = {"entrypoint": "true", "metadata": {"queue": "batch"}, "runtime_env": {"working_dir": "gcs://_ray_pkg_missing.zip"}}
    r = requests.post(f"{live.url}/api/jobs/", json=body, timeout=30)
    assert r.status_code == 400 and "gcs://_ray_pkg_missing.zip was never uploaded" in r.text


def test_the_stock_ray_job_submit_cli_works_unchanged(live):
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    r = subprocess.run([RAY, "job", "submit", "--address", live.url, "--submission-id", "cli-1", "--metadata-json", json.dumps({"queue": "batch"}),
                        "--entrypoint-num-gpus", "1", "--", "python", "-c", "print('from the cli')"], env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "from the cli" in r.stdout
    assert live.store.get("cli-1").status == "SUCCEEDED"


def test_a_job_over_quota_waits_with_its_reason_and_runs_when_quota_frees(live):
    from ray.job_submission import JobSubmissionClient

    c = JobSubmissionClient(live.url)
    first = c.submit_job(entrypoint="python -c \"import time; time.sleep(4)\"", metadata={"queue": "train", "gpus_per_task": "4"})
    wait_status(c, first, {"RUNNING", "PENDING"})
    time.sleep(1)
    second = c.submit_job(entrypoint="python -c \"print('second')\"", metadata={"queue": "train", "gpus_per_task": "4"})
    time.sleep(1.5)
    info = c.get_job_info(second)
    assert str(info.status.value) == "PENDING" and "ExceedsCapability" in info.message
    assert wait_status(c, second, {"SUCCEEDED", "FAILED"}, timeout=120) == "SUCCEEDED"


@pytest.mark.parametrize("body,words", [
    ({"entrypoint": "true", "metadata": {"queue": "nope"}}, "unknown queue 'nope'"),
    ({"entrypoint": "true", "metadata": {"queue": "train", "tasks": "two"}}, "metadata.tasks"),
    ({"entrypoint": "true", "metadata": {"queue": "train", "tasks": "3", "gpus_per_task": "8"}}, "gpus_per_task"),
    ({"entrypoint": "true", "metadata": {}}, "metadata.queue"),
    ({"metadata": {"queue": "train"}}, "entrypoint"),
    ({"entrypoint": "true", "metadata": {"queue": "train"}, "runtime_env": ["pip"]}, "runtime_env: must be a JSON object"),
])
def test_a_bad_submission_gets_a_4xx_naming_the_problem(live, body, words):
    import requests

    r = requests.post(f"{live.url}/api/jobs/", json=body, timeout=30)
    assert r.status_code == 400 and words in r.text, r.text


def test_a_second_submission_under_one_id_is_refused_as_ray_refuses_it(live):
    from ray.job_submission import JobSubmissionClient

    c = JobSubmissionClient(live.url)
    c.submit_job(entrypoint="python -c \"print(1)\"", submission_id="same-1", metadata={"queue": "batch"})
    with pytest.raises(RuntimeError, match="status code 400.*'same-1' exists already"):
        c.submit_job(entrypoint="python -c \"print(2)\"", submission_id="same-1", metadata={"queue": "batch"})
    assert [r.entrypoint for r in live.store.jobs() if r.id == "same-1"] == ["python -c \"print(1)\""]


def test_a_restarted_controller_loses_nothing_and_dispatches_nothing_twice(ray_site, tmp_path):
    from ray.job_submission import JobSubmissionClient

    lv = Live(ray_site, tmp_path)
    c = JobSubmissionClient(lv.url)
    job_id = c.submit_job(entrypoint="python -c \"import time; time.sleep(3); print('done once')\"", metadata={"queue": "batch"})
    wait_status(c, job_id, {"RUNNING"})
    lv.close(stop_jobs=False)  # the controller goes away; the job goes on at the site
    again = Live(ray_site, tmp_path)  # same store file
    c2 = JobSubmissionClient(again.url)
    assert wait_status(c2, job_id, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    site = JobSubmissionClient(ray_site)
    dispatched = [j for j in site.list_jobs() if (j.metadata or {}).get("federation-job") == job_id]
    assert len(dispatched) == 1
    again.close()


def test_a_wrong_token_gets_401_or_403(ray_site, tmp_path):
    import requests

    (tmp_path / "tokens.yaml").write_text("train: secret-train\n")
    lv = Live(ray_site, tmp_path, tokens=load_tokens(str(tmp_path / "tokens.yaml")))
    try:
        body = {"entrypoint": "true", "metadata": {"queue": "train"}}
        assert requests.post(f"{lv.url}/api/jobs/", json=body, timeout=30).status_code == 401
        assert requests.post(f"{lv.url}/api/jobs/", json=body, headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401
        other = {"entrypoint": "true", "metadata": {"queue": "batch"}}
        assert requests.post(f"{lv.url}/api/jobs/", json=other, headers={"Authorization": "Bearer secret-train"}, timeout=30).status_code == 403
        assert requests.post(f"{lv.url}/api/jobs/", json=body, headers={"Authorization": "Bearer secret-train"}, timeout=30).status_code == 200
    finally:
        lv.close()


def test_the_stock_cli_passes_a_queue_token_with_headers_and_reads_only_what_it_may(ray_site, tmp_path):
    (tmp_path / "tokens.yaml").write_text("train: secret-train\nbatch: secret-batch\n")
    lv = Live(ray_site, tmp_path, tokens=load_tokens(str(tmp_path / "tokens.yaml")))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)

    def cli(command, *args, token="secret-train"):
        return subprocess.run([RAY, "job", command, "--address", lv.url, "--headers", json.dumps({"Authorization": f"Bearer {token}"}), *args],
                              env=env, capture_output=True, text=True, timeout=180)

    try:
        r = cli("submit", "--submission-id", "tok-1", "--metadata-json", json.dumps({"queue": "train"}), "--", "python", "-c", "print('with a token')")
        assert r.returncode == 0 and "with a token" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
        logs = cli("logs", "tok-1")
        assert "with a token" in logs.stdout, logs.stdout + logs.stderr
        theirs = cli("logs", "tok-1", token="secret-batch")
        assert theirs.returncode != 0 and "with a token" not in theirs.stdout + theirs.stderr  # the stock CLI words the 403 itself
        assert cli("stop", "tok-1", token="secret-batch").returncode != 0
    finally:
        lv.close()


def test_status_and_metrics_describe_the_federation(live):
    import requests

    doc = requests.get(f"{live.url}/api/federation/status", timeout=30).json()
    assert {q["name"] for q in doc["queues"]} == {"train", "batch"} and len(doc["nodes"]) == 2
    from ray.job_submission import JobSubmissionClient

    c = JobSubmissionClient(live.url)
    job = c.submit_job(entrypoint="python -c \"import time; time.sleep(30)\"", metadata={"queue": "batch", "gpus_per_task": "2"})
    wait_status(c, job, {"RUNNING"})
    text = requests.get(f"{live.url}/metrics", timeout=30).text
    assert 'federation_admissions_total{site="idc"} 1.0' in text, text
    assert 'federation_queue_gpu_usage{queue="batch"} 2.0' in text and 'federation_queue_gpu_usage{queue="train"} 0.0' in text
    assert "federation_cloud_spend_usd_month 0.0" in text
    [cycles] = [line.split()[-1] for line in text.splitlines() if line.startswith("federation_cycle_duration_seconds_count")]
    assert float(cycles) >= 1


def test_a_reclaim_really_stops_the_borrowing_ray_job_and_requeues_it(live, ray_site):
    import requests
    from ray.job_submission import JobSubmissionClient

    c = JobSubmissionClient(live.url)
    long = "python -c \"import time; time.sleep(120)\""
    borrowers = [c.submit_job(entrypoint=long, metadata={"queue": "batch", "gpus_per_task": "4"}) for _ in range(2)]  # batch borrows 4
    for b in borrowers:
        wait_status(c, b, {"RUNNING"})
    mine = c.submit_job(entrypoint="python -c \"print('reclaimed')\"", metadata={"queue": "train", "gpus_per_task": "4"})
    assert wait_status(c, mine, {"SUCCEEDED", "FAILED"}, timeout=120) == "SUCCEEDED"
    victims = [b for b in borrowers if live.store.get(b).attempt == 1]
    assert len(victims) == 1
    assert 'federation_preemptions_total{reason="Reclaim"} 1.0' in requests.get(f"{live.url}/metrics", timeout=30).text
    site = JobSubmissionClient(ray_site)
    assert wait_status(site, f"{victims[0]}-0", {"STOPPED"}, timeout=60) == "STOPPED"  # the site's Ray job, first attempt
    for b in borrowers:
        c.stop_job(b)


def test_fedctl_explain_and_status_read_the_live_federation(live):
    from ray.job_submission import JobSubmissionClient

    c = JobSubmissionClient(live.url)
    first = c.submit_job(entrypoint="python -c \"import time; time.sleep(30)\"", metadata={"queue": "train", "gpus_per_task": "4"})
    wait_status(c, first, {"RUNNING"})
    job_id = c.submit_job(entrypoint="python -c \"print(1)\"", metadata={"queue": "train", "gpus_per_task": "4"})  # 8 > capability 6
    time.sleep(1.5)
    r = subprocess.run([sys.executable, "-m", "federation.cli", "explain", job_id, "--address", live.url], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "PENDING" in r.stdout and "ExceedsCapability" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "federation.cli", "status", "--address", live.url], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and job_id in r.stdout
    for j in (first, job_id):
        c.stop_job(j)


BURST_CONFIG = CONFIG.replace("""queues:""", """  - name: burst
    kind: local
    provider: {kind: local}
    node_groups:
      - {name: gpu, gpu_model: A100-80GB, gpus_per_node: 4, cpus_per_node: 1, memory_gib_per_node: 16, min_nodes: 0, max_nodes: 1, price_usd_per_hour: 1, boot_s: 5}
queues:""").replace("  - {name: train, deserved: {gpu: 4}, capability: {gpu: 6}}", "  - {name: train, deserved: {gpu: 4}, capability: {gpu: 12}, burst: true}").replace(
    "policies: {preemption: {grace_s: 1}}", "policies: {preemption: {grace_s: 1}, burst: {enabled: true, pending_wait_s: 1, budget_usd_per_hour: 5, scale_in_idle_s: 2, provisioning_timeout_s: 120}}")


def test_a_job_waits_for_a_local_burst_node_runs_there_and_the_idle_node_goes_back(ray_cluster, tmp_path):
    from providers.local import LocalProvider

    dashboard = ray_cluster.dashboard
    fed = parse(BURST_CONFIG, "burst.yaml")
    prov = LocalProvider("burst", ray_cluster, 0.0)
    store = Store(tmp_path / "burst.sqlite")
    ctl = Controller(fed, store, {"idc": RaySite("idc", dashboard), "burst": RaySite("burst", dashboard)}, providers={"burst": prov})
    try:
        fill = ctl.submit({"entrypoint": "python -c \"import time; time.sleep(60)\"", "metadata": {"queue": "train", "tasks": "2", "gpus_per_task": "4"}})
        ctl.tick()
        assert store.get(fill.id).site == "idc"  # the IDC is now full
        row = ctl.submit({"entrypoint": "python -c \"print('on the burst node')\"", "metadata": {"queue": "train", "gpus_per_task": "4"}})
        reasons = set()
        deadline = time.time() + 120
        while time.time() < deadline and store.get(row.id).status not in ("SUCCEEDED", "FAILED"):
            ctl.tick()
            reasons.add(store.get(row.id).reason)
            time.sleep(0.5)
        done = store.get(row.id)
        assert done.status == "SUCCEEDED" and done.site == "burst", done
        assert "WaitingForBurst" in reasons
        ctl.stop(fill.id)
        deadline = time.time() + 60
        while time.time() < deadline and prov.list_nodes():
            ctl.tick()
            time.sleep(0.5)
        assert not prov.list_nodes()  # released once idle for scale_in_idle_s
    finally:
        prov.close()
        for r in store.jobs({"RUNNING", "ADMITTED", "PENDING"}):
            ctl.stop(r.id)


def test_the_nvml_agent_applies_a_layout_on_its_node_as_a_pinned_ray_job(ray_site, tmp_path):
    """RayNvmlBackend on the local cluster. The agent's job gets a fake `pynvml` through its
    working_dir (this machine has no GPU, and no test may touch a real one's MIG state)."""
    import shutil

    import requests
    from ray.job_submission import JobSubmissionClient

    from providers.mig_backends import RayNvmlBackend

    wd = tmp_path / "agent"
    wd.mkdir()
    shutil.copy(Path(__file__).parent / "fakes" / "nvml.py", wd / "fake_nvml.py")
    (wd / "pynvml.py").write_text("import sys\nimport fake_nvml\nsys.modules[__name__] = fake_nvml.FakeNvml('A100-80GB', gpus=4)\n")
    backend = RayNvmlBackend(RaySite("idc", ray_site), lambda node: "A100-80GB", {"working_dir": str(wd)})

    def settle(node, layouts):
        deadline = time.time() + 120
        while (st := backend.state(node, layouts)).state == "pending" and time.time() < deadline:
            time.sleep(0.5)
        return st

    good = {0: [("3g.40gb", 4), ("1g.10gb", 0)], 1: []}
    backend.apply("idc/gpu-1", good)
    backend.apply("idc/gpu-1", good)  # the same request again is the same job
    assert settle("idc/gpu-1", good).state == "success"
    job = backend.job_id("idc/gpu-1", good)
    driver = JobSubmissionClient(ray_site).get_job_info(job).driver_node_id
    nodes = requests.get(f"{ray_site}/api/v0/nodes", params={"limit": 100, "detail": "true"}, headers=ray_headers(), timeout=30).json()["data"]["result"]["result"]
    assert "federation-node/idc/gpu-1" in {n["node_id"]: set(n["resources_total"]) for n in nodes}[driver]
    bad = {0: [("4g.40gb", 4)]}  # a 4g instance starts only at slice 0: NVML refuses it
    backend.apply("idc/gpu-0", bad)
    st = settle("idc/gpu-0", bad)
    assert st.state == "failed" and "Insufficient Resources" in st.message


def test_the_controller_runs_as_ray_actors_that_restart_and_lose_nothing(ray_cluster, tmp_path):
    """What `fedctl up` starts: a site actor, the queue controller actor (cycle and API). Each is
    killed once mid-run; Ray restarts it, it rebuilds from the store, and the job runs once."""
    import ray
    import requests
    from ray.job_submission import JobSubmissionClient
    from ray.util.state import list_actors

    from federation.runtime.actors import site_parts, start_actors

    dashboard, gcs = ray_cluster.dashboard, ray_cluster.gcs
    fed, state = parse(CONFIG, "live.yaml"), tmp_path / "state.sqlite"
    ray.init(address=gcs, namespace="federation-actors-test", log_to_driver=False)
    actors = []
    try:
        url, sites, others = start_actors(fed, state, site_parts(fed, state, {"idc": dashboard}, {}), "127.0.0.1", free_port(), 0.3, None)
        actors = [*sites.values(), *others]
        assert set(ray.util.list_named_actors()) == {"site-idc", "queue-controller"}

        def restarted(name, timeout=90):
            """Once Ray has restarted the actor, and (for the controller) its API answers again."""
            deadline = time.time() + timeout
            while time.time() < deadline:
                if any(a.state == "ALIVE" and a.num_restarts >= 1 for a in list_actors(address=gcs, filters=[("name", "=", name)], detail=True)):
                    try:
                        if requests.get(f"{url}/api/version", timeout=5).status_code == 200:
                            return True
                    except requests.RequestException:
                        pass
                time.sleep(0.3)
            return False

        c = JobSubmissionClient(url)
        job_id = c.submit_job(entrypoint="python -c \"import time; time.sleep(4); print('done once')\"", metadata={"queue": "batch"})
        wait_status(c, job_id, {"RUNNING"})
        ray.kill(others[-1], no_restart=False)  # the queue controller's process dies
        assert restarted("queue-controller"), "the controller actor did not come back, serving"
        assert wait_status(JobSubmissionClient(url), job_id, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
        dispatched = [j for j in JobSubmissionClient(dashboard).list_jobs() if (j.metadata or {}).get("federation-job") == job_id]
        assert len(dispatched) == 1

        ray.kill(sites["idc"], no_restart=False)  # the site actor's process dies
        later = JobSubmissionClient(url).submit_job(entrypoint="python -c \"print('after the site restarted')\"", metadata={"queue": "train"})
        assert restarted("site-idc")
        assert wait_status(JobSubmissionClient(url), later, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
        assert "after the site restarted" in JobSubmissionClient(url).get_job_logs(later)
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)
        ray.shutdown()


def test_a_site_answers_while_its_ray_cluster_runs_and_not_at_a_dead_address(ray_site):
    """How the controller learns that a silent site is back (its runs elsewhere wait for it)."""
    from federation.runtime.localray import free_port
    from federation.runtime.sites import RaySite

    assert RaySite("idc", ray_site).answers()
    assert not RaySite("gone", f"http://127.0.0.1:{free_port()}").answers()
