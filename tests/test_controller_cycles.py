"""The live controller's cycle: after only arrivals it looks at the new jobs alone, and what it
shows Ray's clients. The site is faked (it takes every job and runs it until stopped)."""

from __future__ import annotations

import pytest

from federation.config import parse
from federation.cycle import DecisionCycle
from federation.runtime.controller import Controller
from federation.runtime.sites import RaySite
from federation.store import JobRow, Store

from .test_controller_faults import FakeSite
from .test_controller_tidal import CONFIG, at


@pytest.fixture
def ctl(tmp_path, monkeypatch):
    clock = [at(12)]
    c = Controller(parse(CONFIG), Store(tmp_path / "s.db"), {"idc": FakeSite()}, clock=lambda: clock[0])
    seen: list[set[str]] = []
    import federation.cycle as mod

    real = mod.schedule
    monkeypatch.setattr(mod, "schedule", lambda snap, now, state=None: (seen.append({j.id for j in snap.pending}), real(snap, now, state))[1])
    return c, clock, seen


def submit(c, job_id, gpus):
    c.submit({"entrypoint": "python x.py", "submission_id": job_id, "metadata": {"queue": "research", "gpus_per_task": str(gpus)}})


def test_after_only_arrivals_a_cycle_looks_at_the_new_jobs_and_a_full_one_follows_within_its_period(ctl):
    c, clock, seen = ctl
    submit(c, "a", 8)
    submit(c, "b", 8)
    c.tick()  # research's capability is 16: both start
    submit(c, "w1", 8)
    submit(c, "w2", 8)
    c.tick()  # a full cycle: the last one admitted
    assert seen[-1] == {"w1", "w2"} and c.store.get("w1").reason == "ExceedsCapability"
    submit(c, "w3", 8)
    clock[0] += 1
    c.tick()
    assert seen[-1] == {"w3"}  # only it is new; w1 and w2 would fail as before
    assert c.store.get("w3").reason == "ExceedsCapability" and c.store.get("w1").reason == "ExceedsCapability"
    clock[0] += DecisionCycle.FULL_EVERY_S
    c.tick()
    assert seen[-1] == {"w1", "w2", "w3"}


def test_a_change_other_than_arrivals_brings_a_full_cycle(ctl):
    c, clock, seen = ctl
    for j in ("a", "b", "w1"):
        submit(c, j, 8)
    c.tick()
    c.tick()
    submit(c, "w2", 8)
    c.store.update("a", status="SUCCEEDED")  # a running job ends (as its site reports it): w1 may start now
    clock[0] += 1
    c.tick()
    assert seen[-1] == {"w1", "w2"}
    assert c.store.get("w1").status in ("ADMITTED", "RUNNING")


def test_the_cycle_is_handed_the_same_running_job_objects_until_a_row_or_the_nodes_change(ctl):
    """So the kept state finds what it holds by identity (federation/live_state.py), and what
    changed is made again: a preemption's flag, tasks whose node went away."""
    c, clock, _ = ctl
    seen = []
    step = c.cycle.step
    c.cycle.step = lambda obs: (seen.append({r.spec.id: r for r in obs.running}), step(obs))[1]
    submit(c, "a", 8)
    submit(c, "b", 8)
    for _ in range(3):
        clock[0] += 1
        c.tick()
    first, second = seen[-2], seen[-1]
    assert set(first) == {"a", "b"} and all(second[j] is first[j] for j in first)
    c.store.update("a", stop_at_s=clock[0] + 30, preempted_for="x")
    clock[0] += 1
    c.tick()
    assert seen[-1]["a"] is not second["a"] and seen[-1]["a"].preempting and seen[-1]["b"] is second["b"]
    node = seen[-1]["b"].placements[0].node
    c.fixed_nodes = tuple(n for n in c.fixed_nodes if n.name != node)  # b's node went away
    clock[0] += 1
    c.tick()
    assert seen[-1]["b"].lost == 1 and not seen[-1]["b"].placements


def test_a_dispatched_job_is_pending_to_ray_clients_until_its_site_runs_it(ctl):
    c, _, _ = ctl
    row = JobRow("j", "python x.py", {}, {}, {}, status="RUNNING", site="idc", dispatch_id="j-0", message="running at idc")
    c.site_status["j"] = "PENDING"
    shown = c.job_details(row)
    assert shown["status"] == "PENDING" and "starting" in shown["message"]
    c.site_status["j"] = "RUNNING"
    assert c.job_details(row)["status"] == "RUNNING"


def test_a_restarted_controller_asks_the_site_before_showing_a_dispatched_job_running(tmp_path):
    """The journal says RUNNING (dispatched); what the site says of the driver was in the old
    process's memory only. A status read asks the site instead of trusting the journal."""

    class Site(RaySite):  # the site's answer, without a Ray cluster: the controller's reading of it is under test
        says = "PENDING"

        def status(self, dispatch_id):
            return self.says

    store = Store(tmp_path / "s.db")
    store.insert(JobRow("j", "python x.py", {}, {}, {"queue": "research"}, status="RUNNING", site="idc", dispatch_id="j-0", submitted_s=1.0))
    site = Site("idc", "http://127.0.0.1:9")
    c = Controller(parse(CONFIG), store, {"idc": site})  # as after a restart: no tick yet
    row = store.get("j")
    c.refresh_site_status(row)
    assert c.job_details(row)["status"] == "PENDING"
    site.says = "RUNNING"
    c.refresh_site_status(row)
    assert c.job_details(row)["status"] == "RUNNING"


def test_stopping_a_job_at_an_unreachable_site_is_a_503_that_says_so(tmp_path):
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from federation.runtime.api import make_app

    c = Controller(parse(CONFIG), Store(tmp_path / "s.db"), {"idc": RaySite("idc", "http://127.0.0.1:9")})  # nothing answers there
    submit(c, "a", 8)
    c.tick()  # admitted; its dispatch failed: the site is unreachable

    async def go():
        async with TestClient(TestServer(make_app(c, None))) as client:
            r = await client.post("/api/jobs/a/stop")
            return r.status, await r.text()

    status, text = asyncio.run(go())
    assert status == 503 and "cannot reach its Ray cluster" in text and "nothing was changed" in text
    assert c.store.get("a").status == "ADMITTED"  # nothing changed: it is stopped once the site answers


def test_metrics_count_every_cycle_in_a_duration_histogram(ctl):
    from prometheus_client import CollectorRegistry, generate_latest

    from federation.runtime.metrics import FederationCollector

    c, _, _ = ctl
    for _ in range(3):
        c.tick()
    reg = CollectorRegistry()
    reg.register(FederationCollector(c))
    lines = generate_latest(reg).decode().splitlines()
    assert "federation_cycle_duration_seconds_count 3.0" in lines
    assert 'federation_cycle_duration_seconds_bucket{le="+Inf"} 3.0' in lines


def test_the_stores_live_jobs_in_memory_always_match_the_database(tmp_path):
    """Random inserts (at times that tie and that go back), status changes (ending, requeueing
    an ended job), field updates one at a time and in batches (one of which fails half-way and
    must leave nothing of itself) and deletes: after each, the written-through live rows equal
    what a fresh reader finds, in the same order."""
    import random
    import sqlite3

    rng = random.Random(7)
    path = tmp_path / "cache.db"
    store = Store(path)
    statuses = ["PENDING", "ADMITTED", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"]
    ids = []
    store.jobs({"PENDING"})  # the cache is loaded from here on
    for step in range(300):
        op = rng.random()
        if op < 0.3 or not ids:
            ids.append(f"j{step}")
            store.insert(JobRow(ids[-1], "true", {}, {}, {"queue": "research"}, status=rng.choice(statuses), submitted_s=rng.choice((step, step / 2, 3.0))))
        elif op < 0.7:
            store.update(rng.choice(ids), status=rng.choice(statuses), message=f"step {step}", placements=[{"node": "n", "gpus": [step % 8]}])
        elif op < 0.8:
            store.update(rng.choice(ids), reason="WaitingForQuota")
        elif op < 0.9:
            batch = [(rng.choice(ids), {"status": rng.choice(statuses), "reason": f"batch {step}"}) for _ in range(3)]
            if rng.random() < 0.3:  # a column that does not exist: the whole batch is undone
                before = Store(path).jobs()
                with pytest.raises(sqlite3.OperationalError):
                    store.update_many([*batch, (ids[0], {"no_such_column": 1})])
                assert Store(path).jobs() == before
            else:
                store.update_many(batch)
        else:
            store.delete(ids.pop(rng.randrange(len(ids))))
        fresh = [r for r in Store(path).jobs() if r.status in {"PENDING", "ADMITTED", "RUNNING"}]  # read from the file
        assert store.jobs({"PENDING", "ADMITTED", "RUNNING"}) == fresh
        assert store.jobs({"RUNNING"}) == [r for r in fresh if r.status == "RUNNING"]
        assert all(store.get(r.id) == r for r in fresh)


def test_a_cycle_writes_the_reasons_of_newly_waiting_jobs_in_a_few_transactions(ctl):
    """Each write on its own is a commit (a sync of the journal) that holds the store, and every
    submission with it: 20,000 jobs queued at once once stalled a cycle for 10 s doing that."""
    c, clock, _ = ctl
    for i in range(300):
        submit(c, f"w{i}", 1)
    c.tick()  # the first cycle admits what fits
    c.store.BATCH = 128  # in transactions of up to this many, so the store is never held long
    statements: list[str] = []
    c.store._db.set_trace_callback(statements.append)
    for i in range(300):
        submit(c, f"n{i}", 1)
    statements.clear()
    clock[0] += 1
    c.tick()
    c.store._db.set_trace_callback(None)
    waiting = {r.id for r in c.store.jobs({"PENDING"}) if r.id.startswith("n")}
    assert len(waiting) == 300 and all(c.store.get(j).reason for j in waiting)
    bare, batches, inside = 0, [], None
    for st in statements:
        if st == "BEGIN":
            inside = 0
        elif st == "COMMIT":
            batches.append(inside)
            inside = None
        elif st.startswith("UPDATE jobs SET reason"):
            if inside is None:
                bare += 1
            else:
                inside += 1
    assert bare == 0 and batches == [128, 128, 44]


def test_the_journal_reads_back_only_the_jobs_going_or_ended_since_a_time(tmp_path):
    store = Store(tmp_path / "s.db")
    for job_id, status, ended in (("old", "SUCCEEDED", 10.0), ("edge", "FAILED", 100.0), ("new", "SUCCEEDED", 150.0), ("going", "RUNNING", None)):
        store.insert(JobRow(job_id, "true", {}, {}, {"queue": "research"}, status=status, submitted_s=1.0, ended_s=ended))
    assert [r.id for r in store.jobs(ended_after=100.0)] == ["edge", "going", "new"]
    assert [r.id for r in store.jobs({"SUCCEEDED"}, ended_after=100.0)] == ["new"]
    assert len(store.jobs()) == 4


def test_status_lists_waiting_jobs_queue_by_queue_with_their_position(tmp_path):
    fed = parse("""
federation: {name: order, timezone: UTC}
priority_classes:
  - {name: normal, value: 100, default: true}
  - {name: urgent, value: 1000}
sites:
  - name: idc
    kind: idc
    ray_address: http://127.0.0.1:9
    node_groups:
      - {name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 4}
queues:
  - {name: research, deserved: {gpu: 16}, capability: {gpu: 16}}
  - {name: other, deserved: {gpu: 8}, capability: {gpu: 8}}
""")
    clock = [1000.0]
    c = Controller(fed, Store(tmp_path / "s.db"), {"idc": FakeSite()}, clock=lambda: clock[0])
    for job_id, queue, extra in (("a", "research", {}), ("b", "research", {}), ("w1", "research", {}), ("x1", "other", {}), ("x2", "other", {}),
                                 ("w2", "research", {"priority": "urgent"})):
        clock[0] += 1
        c.submit({"entrypoint": "python x.py", "submission_id": job_id, "metadata": {"queue": queue, "gpus_per_task": "8", **extra}})
        if job_id == "b":
            c.tick()  # a and b take research's 16
    c.tick()
    shown = [(p["job"], p["queue"], p["position"]) for p in c.status()["pending"]]
    assert shown == [("x2", "other", 1), ("w2", "research", 1), ("w1", "research", 2)]  # urgent first, then by submission
