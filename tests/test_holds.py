"""A site-kept queue's idle guarantee is held on its sites; a window about to raise it makes it ready."""

from __future__ import annotations

from dataclasses import replace

from federation.model import RunningJob, TaskPlacement
from federation.scheduler import schedule

from .builders import fed, job, q, site, snapshot

IDC, CLOUD = site("idc", count=2), site("cloud", count=2, kind="aws")


def two_sites(**kw):
    return fed([q("online", guarantee=8, deserved=8, sites=["idc"]), q("research", deserved=8, burst=True)], [IDC, CLOUD], **kw)


def running(j, site_, node, gpus, started=0.0):
    return RunningJob(j, site_, (TaskPlacement(node, tuple(range(gpus))),), started)


def test_another_queue_does_not_fill_the_idle_guarantee_of_a_site_kept_queue():
    f = two_sites()
    # the IDC has 16 GPUs, online holds 8 of them idle; research's 8 GPUs fit there only once
    pend = [job("r1", "research", gpus=8), job("r2", "research", gpus=8, submit=1), job("r3", "research", gpus=8, submit=2)]
    plan = schedule(snapshot(f, pending=pend), 0.0)
    by_site = {a.job_id: a.site for a in plan.admissions}
    assert sorted(by_site.values()).count("idc") == 1
    assert sorted(by_site.values()).count("cloud") == 2


def test_a_job_held_off_the_site_is_told_why_and_the_holder_still_starts():
    f = fed([q("online", guarantee=8, deserved=8, sites=["idc"]), q("research", deserved=8, borrowing=64)], [site("idc", count=2)])
    plan = schedule(snapshot(f, pending=[job("r1", "research", gpus=8), job("r2", "research", gpus=8, submit=1)]), 0.0)
    # one site only: the quota tree already keeps the guarantee (WaitingForQuota); what the hold adds shows with a second site
    assert [a.job_id for a in plan.admissions] == ["r1"]
    # the cloud's free GPUs are in halves of nodes: an 8-GPU task fits only the IDC's free node
    f2 = fed([q("online", guarantee=8, deserved=8, sites=["idc"]), q("research", deserved=8)], [IDC, site("cloud", count=3, kind="aws")])
    busy = [running(job("c1", "research", gpus=8), "cloud", "cloud-0", 8), running(job("c2", "research", gpus=4), "cloud", "cloud-1", 4),
            running(job("c3", "research", gpus=4), "cloud", "cloud-2", 4), running(job("i1", "research", gpus=8), "idc", "idc-0", 8)]
    plan = schedule(snapshot(f2, pending=[job("r9", "research", gpus=8)], running=busy), 0.0)
    assert plan.admissions == ()
    r = plan.pending["r9"]
    assert r.code == "ReservedForQueue" and "'online'" in r.message and "8 GPUs" in r.message
    plan = schedule(snapshot(f2, pending=[job("r9", "research", gpus=8), job("o1", "online", gpus=4, submit=5)], running=busy), 0.0)
    assert [a.job_id for a in plan.admissions] == ["o1"]


def test_a_window_about_to_raise_a_guarantee_preempts_work_on_it_in_advance():
    f = fed([q("online", guarantee=0, deserved=0, sites=["idc"]), q("research", deserved=8, borrowing=64),
             q("batch", guarantee=8, deserved=8)], [IDC, CLOUD])
    busy = [running(job("r-old", "research", gpus=8), "idc", "idc-0", 8, started=0.0),
            running(job("b1", "batch", gpus=8), "idc", "idc-1", 8, started=50.0),
            running(job("r-keep", "research", gpus=8, preemptible=False), "cloud", "cloud-0", 8, started=60.0)]
    quiet = schedule(snapshot(f, running=busy), 100.0)
    assert quiet.preemptions == ()  # no window coming: nothing is touched
    plan = schedule(snapshot(f, running=busy, upcoming_reserves={"online": 8000}), 100.0)
    # 8 GPUs to make ready on the IDC: research borrows, batch is within its guarantee
    assert [(p.job_id, p.reason) for p in plan.preemptions] == [("r-old", "WindowPrepare")]
    # once it is stopping, nothing more is taken
    stopping = [replace(busy[0], preempting=True), *busy[1:]]
    again = schedule(snapshot(f, running=stopping, upcoming_reserves={"online": 8000}), 110.0)
    assert again.preemptions == ()


def test_non_preemptible_work_and_a_victims_own_guarantee_are_never_taken_to_prepare():
    f = fed([q("online", sites=["idc"]), q("batch", guarantee=8, deserved=8), q("research", deserved=8)], [IDC])
    busy = [running(job("b1", "batch", gpus=8), "idc", "idc-0", 8), running(job("r1", "research", gpus=8, preemptible=False), "idc", "idc-1", 8)]
    plan = schedule(snapshot(f, running=busy, upcoming_reserves={"online": 16000}), 0.0)
    assert plan.preemptions == ()
