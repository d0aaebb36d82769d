"""The live controller under faults, in-process: a site that forgets jobs, refuses them, breaks
on one, or stops answering; a cycle that raises. Nothing is lost, nothing becomes a ghost, and a
fault in one place never stops the rest. (The same paths through `fedctl up` and its actors are
in test_up_faults.py.)"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from federation.config import parse
from federation.runtime.controller import Controller
from federation.runtime.sites import RaySite, SiteRejected, SiteUnavailable
from federation.store import Store

# one IDC of 2 x 8 GPUs behind a site client the tests fake; other test files add their own queues
SITES = """
sites:
  - name: idc
    kind: idc
    ray_address: http://127.0.0.1:9
    node_groups:
      - {name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 2}
"""
CONFIG = "federation: {name: faults, timezone: UTC}" + SITES + """queues:
  - {name: research, deserved: {gpu: 16}}
"""


class FakeSite(RaySite):
    """A site's Ray cluster as its job client sees it: jobs by dispatch id, and faults on demand."""

    def __init__(self, name="idc"):
        super().__init__(name, "http://127.0.0.1:9")
        self.jobs: dict[str, str] = {}
        self.fail_submit: dict[str, Exception] = {}  # federation job id -> what its submit raises
        self.down = False

    def has_package(self, name):
        return True

    def submit(self, dispatch_id, entrypoint, runtime_env, allocation, metadata=None):
        if self.down:
            raise SiteUnavailable("site idc: connection refused")
        if allocation["job"] in self.fail_submit:
            raise self.fail_submit[allocation["job"]]
        self.jobs.setdefault(dispatch_id, "RUNNING")

    def answers(self):
        return not self.down

    def status(self, dispatch_id):
        if self.down:
            raise SiteUnavailable("site idc: connection refused")
        return self.jobs.get(dispatch_id)

    def logs(self, dispatch_id):
        return f"the log of {dispatch_id}\n"

    def stop(self, dispatch_id):
        if self.down:
            raise SiteUnavailable("site idc: connection refused")
        if dispatch_id in self.jobs:
            self.jobs[dispatch_id] = "STOPPED"


@pytest.fixture
def env(tmp_path):
    clock = [1000.0]
    site = FakeSite()
    c = Controller(parse(CONFIG), Store(tmp_path / "s.db"), {"idc": site}, clock=lambda: clock[0])
    return c, site, clock


def submit(c, job_id, gpus=4):
    c.submit({"entrypoint": "python x.py", "submission_id": job_id, "metadata": {"queue": "research", "gpus_per_task": str(gpus)}})


def test_a_running_job_its_site_no_longer_knows_is_requeued_whole_not_left_a_ghost(env):
    c, site, clock = env
    submit(c, "a")
    c.tick()
    assert c.store.get("a").status == "RUNNING" and site.jobs == {"a-0": "RUNNING"}
    site.jobs.clear()  # the site's cluster was replaced (restarted, or a new one after a crash)
    clock[0] += 1
    c.tick()  # the next cycle asks the site, requeues the job, and (capacity being free) admits it again
    row = c.store.get("a")
    assert row.attempt == 1 and row.status == "RUNNING" and site.jobs == {"a-1": "RUNNING"}


def test_a_site_silent_past_the_lost_timeout_has_its_jobs_queued_again_and_their_old_runs_stopped_when_it_answers(env):
    c, site, clock = env
    submit(c, "a")
    c.tick()
    site.down = True
    clock[0] += 1
    c.tick()
    assert c.store.get("a").status == "RUNNING"  # a passing outage is not a loss
    clock[0] += 899
    c.tick()
    assert c.store.get("a").status == "RUNNING"  # 899 s of the 900 the policy waits by default
    assert c.status()["sites"] == [{"name": "idc", "kind": "idc", "connected": True, "silent_s": 899.0}]
    from prometheus_client import CollectorRegistry, generate_latest

    from federation.runtime.metrics import FederationCollector

    reg = CollectorRegistry()
    reg.register(FederationCollector(c))
    assert 'federation_site_silent_seconds{site="idc"} 899.0' in generate_latest(reg).decode()
    clock[0] += 1
    c.tick()
    row = c.store.get("a")
    # queued again, and not sent back to the site that does not answer
    assert row.status == "PENDING" and row.attempt == 1 and row.reason == "SiteUnreachable"
    site.down = False
    clock[0] += 1
    c.tick()
    # the run the site kept through the outage is stopped: the job never runs twice
    assert site.jobs == {"a-0": "STOPPED", "a-1": "RUNNING"} and c.store.get("a").status == "RUNNING"
    assert c.store.orphans() == [] and c.status()["sites"][0]["silent_s"] is None


def test_the_jobs_of_a_lost_site_run_at_another_and_nothing_is_sent_to_it_while_it_is_silent(tmp_path):
    """Two sites: while one does not answer, new work goes to the other; past the timeout (set
    here to 300 s) what ran there is queued again and runs at the other."""
    two = SITES + """      - {name: b, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 0}
  - name: idc2
    kind: idc
    ray_address: http://127.0.0.1:9
    node_groups:
      - {name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 3}
policies: {preemption: {site_lost_timeout_s: 300}}
queues:
  - {name: research, deserved: {gpu: 32}}
"""
    clock = [1000.0]
    sites = {"idc": FakeSite("idc"), "idc2": FakeSite("idc2")}
    c = Controller(parse("federation: {name: faults, timezone: UTC}" + two), Store(tmp_path / "s.db"), sites, clock=lambda: clock[0])
    submit(c, "a", gpus=8)
    c.tick()
    at, other = "idc", "idc2"
    assert c.store.get("a").site == at  # the first site in the config's order
    sites[at].down = True
    clock[0] += 1
    c.tick()  # the status call fails: the site is unreachable from now on
    for i in range(2):  # each fits at either site (idc has room for one more): both go to the one that answers
        submit(c, f"n{i}", gpus=8)
    clock[0] += 1
    c.tick()
    assert {c.store.get(f"n{i}").site for i in range(2)} == {other}
    clock[0] += 298
    c.tick()
    assert c.store.get("a").status == "RUNNING" and c.store.get("a").site == at
    clock[0] += 1
    c.tick()
    row = c.store.get("a")
    assert row.attempt == 1 and row.site == other and row.status == "RUNNING"
    assert sites[other].jobs["a-1"] == "RUNNING"
    assert c.store.orphans() == [(at, "a-0")]  # stopped when its site answers


def test_a_job_the_site_refuses_fails_with_the_sites_words_instead_of_waiting_forever(env):
    c, site, _ = env
    submit(c, "bad")
    site.fail_submit["bad"] = SiteRejected("site idc refused the job: Request failed with status code 400: entrypoint too long")
    c.tick()
    row = c.store.get("bad")
    assert row.status == "FAILED" and "status code 400" in row.message


def test_a_fault_in_one_jobs_dispatch_leaves_the_others_dispatched_and_is_counted(env):
    c, site, clock = env
    submit(c, "broken")
    submit(c, "fine")
    site.fail_submit["broken"] = TypeError("cannot pickle '_thread.lock' object")  # the bug a working_dir job once hit
    c.tick()
    assert c.store.get("fine").status == "RUNNING"
    broken = c.store.get("broken")
    assert broken.status == "ADMITTED" and "TypeError" in broken.message
    assert c.health.errors["dispatch"] == 1 and "broken" in c.health.last_error
    del site.fail_submit["broken"]
    clock[0] += 1
    c.tick()  # retried
    assert c.store.get("broken").status == "RUNNING"


def test_the_cycle_loop_outlives_a_failing_cycle_and_reports_it_stalled_then_recovered(env):
    """Before, any exception other than a FederationError ended the loop for good, silently."""
    from aiohttp.test_utils import TestClient, TestServer

    from federation.runtime.api import make_app, serve

    c, site, clock = env
    real = c.tick
    failures = [3]

    def tick():
        if failures[0]:
            failures[0] -= 1
            raise TypeError("boom")
        real()

    c.tick = tick

    async def go():
        runner = await serve(c, "127.0.0.1", 0, cycle_s=0.01)
        try:
            for _ in range(400):
                await asyncio.sleep(0.02)
                if c.health.last_ok_s is not None:
                    break
            async with TestClient(TestServer(make_app(c, None))) as client:
                doc = await (await client.get("/api/federation/status")).json()
                metrics = await (await client.get("/metrics")).text()
            return doc, metrics
        finally:
            await runner.cleanup()

    doc, metrics = asyncio.run(go())
    assert c.health.errors["cycle"] == 3 and "TypeError: boom" in c.health.last_error
    assert doc["health"]["last_cycle_s"] == clock[0] and doc["health"]["stalled"] is False
    assert 'federation_errors_total{where="cycle"} 3.0' in metrics
    assert f"federation_last_cycle_timestamp_seconds {clock[0]}" in metrics
    assert "federation_cycle_stalled 0.0" in metrics


def test_a_cycle_that_has_not_succeeded_for_its_stall_bound_is_reported_stalled(env):
    c, _, clock = env
    c.health.failed(clock[0], "cycle", "TypeError: boom")
    clock[0] += c.health.stall_after_s + 1
    assert c.status()["health"]["stalled"] is True


def test_a_preempted_job_that_finishes_within_its_grace_is_done_not_run_again(env):
    """Found by benchmarks/faults.py: such a job was requeued when its grace ran out and ran twice."""
    c, site, clock = env
    submit(c, "a")
    c.tick()
    c.store.update("a", stop_at_s=clock[0] + 30)  # preempted (reclaim), 30 s of grace
    site.jobs["a-0"] = "SUCCEEDED"  # and it finishes within them
    clock[0] += 31
    c.tick()
    row = c.store.get("a")
    assert row.status == "SUCCEEDED" and row.attempt == 0 and list(site.jobs) == ["a-0"]


@pytest.mark.parametrize("restart", [False, True], ids=["one controller", "restarted while it runs"])
def test_a_run_past_its_max_runtime_is_stopped_and_the_job_fails_saying_why(env, restart):
    """A restarted controller's cycle seeds the deadlines it keeps from what runs when it starts."""
    c, site, clock = env
    c.submit({"entrypoint": "python x.py", "submission_id": "capped", "metadata": {"queue": "research", "gpus_per_task": "4", "max_runtime_s": "30"}})
    c.tick()
    if restart:
        c = Controller(c.fed, c.store, {"idc": site}, clock=lambda: clock[0])
    clock[0] += 29
    c.tick()
    assert c.store.get("capped").status == "RUNNING"
    clock[0] += 2
    c.tick()
    row = c.store.get("capped")
    assert row.status == "FAILED" and "MaxRuntimeExceeded: stopped after max_runtime_s 30 s" in row.message and site.jobs["capped-0"] == "STOPPED"


def test_fedctl_queue_pause_drain_and_resume_through_the_api(tmp_path):
    """As an operator runs it: `fedctl queue` against the served controller. A paused queue's
    new job waits (QueuePaused) while its running job goes on; drained, the running job is
    stopped and queued again; resumed, both run."""
    import subprocess
    import sys

    from federation.runtime.api import Serving
    from tests.test_live import free_port

    site = FakeSite()
    c = Controller(parse(CONFIG + "policies: {preemption: {grace_s: 0}}\n"), Store(tmp_path / "s.db"), {"idc": site})
    serving = Serving(c, "127.0.0.1", free_port(), cycle_s=0.1)

    def fedctl(*args):
        return subprocess.run([sys.executable, "-m", "federation.cli", *args, "--address", serving.url], capture_output=True, text=True, timeout=60)

    def settled(want, timeout_s=20.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = {r.id: (r.status, r.reason) for r in c.store.jobs()}
            if all(got.get(j) == w for j, w in want.items()):
                return got
            time.sleep(0.05)
        raise AssertionError(f"{got} never became {want}")

    try:
        c.submit({"entrypoint": "sleep 9", "submission_id": "old", "metadata": {"queue": "research", "gpus_per_task": "8"}})
        settled({"old": ("RUNNING", None)})
        r = fedctl("queue", "pause", "research")
        assert r.returncode == 0 and "paused" in r.stderr, r.stderr
        c.submit({"entrypoint": "sleep 9", "submission_id": "new", "metadata": {"queue": "research", "gpus_per_task": "8"}})
        settled({"old": ("RUNNING", None), "new": ("PENDING", "QueuePaused")})
        status = fedctl("status", "--json")
        assert json.loads(status.stdout)["queues"][0]["stopped"] == "pause"
        assert fedctl("queue", "drain", "research").returncode == 0
        settled({"old": ("PENDING", "QueuePaused"), "new": ("PENDING", "QueuePaused")})
        assert fedctl("queue", "resume", "research").returncode == 0
        settled({"old": ("RUNNING", None), "new": ("RUNNING", None)})
        r = fedctl("queue", "pause", "nope")
        assert r.returncode != 0 and "'nope' is not a queue" in r.stderr
    finally:
        serving.close()


def test_a_failed_run_is_retried_after_a_doubling_back_off_until_max_retries(env):
    c, site, clock = env
    c.submit({"entrypoint": "python x.py", "submission_id": "flaky", "metadata": {"queue": "research", "gpus_per_task": "4", "max_retries": "2"}})
    c.submit({"entrypoint": "python x.py", "submission_id": "once", "metadata": {"queue": "research", "gpus_per_task": "4"}})
    c.tick()
    dispatched = []
    for n, wait in ((1, 10), (2, 20)):
        row = c.store.get("flaky")
        assert row.status == "RUNNING"
        dispatched.append(row.dispatch_id)
        site.jobs[row.dispatch_id] = "FAILED"
        if n == 1:
            site.jobs[c.store.get("once").dispatch_id] = "FAILED"
        clock[0] += 1
        c.tick()
        row = c.store.get("flaky")
        assert (row.status, row.reason, row.retries, row.not_before_s) == ("PENDING", "RetryBackoff", n, clock[0] + wait)
        assert f"runs again in {wait} s" in row.message
        clock[0] += wait - 1
        c.tick()
        assert c.store.get("flaky").status == "PENDING"  # not before its back-off is over
        clock[0] += 1
        c.tick()
    assert c.store.get("once").status == "FAILED"  # no max_retries: a failed run fails the job
    row = c.store.get("flaky")
    assert row.status == "RUNNING" and row.dispatch_id not in dispatched and row.attempt == 2
    site.jobs[row.dispatch_id] = "FAILED"
    clock[0] += 1
    c.tick()
    assert c.store.get("flaky").status == "FAILED"  # the retries are spent


def test_a_journal_from_before_retries_is_brought_up_to_date_and_its_jobs_read(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY, entrypoint, metadata, runtime_env, request, status, reason, message, site, "
               "placements, dispatch_id, submitted_s, started_s, ended_s, attempt, stop_at_s)")
    db.execute("INSERT INTO jobs VALUES ('j', 'true', '{}', '{}', '{\"queue\": \"research\"}', 'PENDING', NULL, NULL, NULL, NULL, NULL, 5.0, "
               "NULL, NULL, 0, NULL)")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    row = Store(path).get("j")
    assert (row.status, row.submitted_s, row.retries, row.not_before_s, row.preempted_for) == ("PENDING", 5.0, None, None, None)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 3


def test_fedctl_status_watch_redraws_until_stopped(tmp_path):
    """Piped, `--watch` prints each state once with its time; it runs until it is stopped."""
    import subprocess
    import sys

    from federation.runtime.api import Serving
    from tests.test_live import free_port

    c = Controller(parse(CONFIG), Store(tmp_path / "s.db"), {"idc": FakeSite()})
    submit(c, "seen")
    serving = Serving(c, "127.0.0.1", free_port(), cycle_s=0.1)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "federation.cli", "status", "--address", serving.url, "--watch", "0.5"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, _ = proc.communicate(timeout=6)
        except subprocess.TimeoutExpired:
            proc.terminate()
            out, _ = proc.communicate(timeout=30)
    finally:
        serving.close()
    assert out.count("--- ") >= 2 and out.count("queues of faults") >= 2 and "seen" in out


def test_the_live_controller_consolidates_moving_a_job_to_make_room_for_a_gang(env):
    """The cycle's consolidation carried out live: r1 is stopped within its grace, started again
    on the node kept for it, and the 6-GPU job starts on the node r1 left (four GPUs were free on
    each node, six on neither)."""
    c, site, clock = env
    for job in ("r0", "f"):
        submit(c, job)
    c.tick()
    submit(c, "r1")
    clock[0] += 1
    c.tick()
    nodes = {j: {p["node"] for p in c.store.get(j).placements} for j in ("r0", "f", "r1")}
    assert nodes["r0"] == nodes["f"] != nodes["r1"]
    site.jobs["f-0"] = "SUCCEEDED"
    submit(c, "p0", gpus=6)
    clock[0] += 1
    c.tick()
    assert c.store.get("r1").stop_at_s is not None and c.store.get("p0").reason == "Consolidating"
    assert c.preemptions["Consolidation"] == 1
    clock[0] += c.fed.policies.preemption.grace_s + 1
    c.tick()
    clock[0] += 1
    c.tick()
    r1, p0 = c.store.get("r1"), c.store.get("p0")
    assert r1.status == "RUNNING" and r1.attempt == 1 and {p["node"] for p in r1.placements} == nodes["r0"]
    assert p0.status == "RUNNING" and {p["node"] for p in p0.placements} == nodes["r1"]
    assert site.jobs["r1-0"] == "STOPPED" and site.jobs["r1-1"] == "RUNNING"


def test_a_ticks_admissions_are_stored_together_before_any_is_dispatched_and_dispatched_after_a_crash(env, tmp_path):
    # 16 one-GPU jobs fit: their decisions go to the store in one transaction before the first
    # dispatch (one commit each was ~2 s of a first tick admitting 8,570), and a crash after
    # storing them, before dispatching, leaves them ADMITTED for the next start to dispatch
    c, site, clock = env
    for i in range(16):
        submit(c, f"j{i:02d}", gpus=1)
    stored_before_dispatch, commits = [], []
    real_submit, real_update = site.submit, c.store.update
    site.submit = lambda *a, **k: stored_before_dispatch.append(sum(r.status == "ADMITTED" for r in c.store.jobs({"ADMITTED"}))) or real_submit(*a, **k)
    c.store.update = lambda job_id, **f: commits.append(job_id) or real_update(job_id, **f)
    c.tick()
    assert stored_before_dispatch[0] == 16 and len(site.jobs) == 16
    assert len(commits) == 16  # one RUNNING write each; the 16 ADMITTED in one update_many (32 writes before)

    site.submit = lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt())  # the controller dies at its first dispatch
    for i in range(16, 20):
        submit(c, f"k{i}", gpus=1)
    clock[0] += 1
    for i in range(16):
        site.jobs[f"j{i:02d}-0"] = "SUCCEEDED"
    with pytest.raises(KeyboardInterrupt):
        c.tick()
    assert {r.id for r in c.store.jobs({"ADMITTED"})} == {f"k{i}" for i in range(16, 20)}
    site.submit = real_submit
    again = Controller(c.fed, Store(tmp_path / "s.db"), {"idc": site}, clock=lambda: clock[0])
    again.tick()
    assert {r.id: r.status for r in again.store.jobs({"ADMITTED", "RUNNING"})} == {f"k{i}": "RUNNING" for i in range(16, 20)}
    assert {f"k{i}-0" for i in range(16, 20)} <= site.jobs.keys()
