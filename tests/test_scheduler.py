"""The scheduling core's semantics, one property per test, named for what it checks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from federation.errors import JobRejected, SnapshotError
from federation.feasibility import check_job
from federation.model import Node, RunningJob, TaskPlacement
from federation.preempting import Preempting
from federation.quota import QuotaTree
from federation.scheduler import CycleState, schedule

from .builders import (
    admitted,
    fed,
    job,
    mark_preempting,
    nodes_of,
    preempted,
    q,
    run_admitted,
    site,
    snapshot,
    start_all,
)


def test_two_6_gpu_gangs_on_8_gpus_never_both_hold_gpus():
    f = fed([q("a", deserved=8)], [site("idc", count=2, gpus=4)])
    jobs = [job("g1", "a", tasks=2, gpus=3), job("g2", "a", tasks=2, gpus=3, submit=1)]
    plan = schedule(snapshot(f, pending=jobs), 0)
    assert admitted(plan) == {"g1"}
    assert plan.pending["g2"].code in ("WaitingForCapacity", "ReservedForGang")
    assert all(len(a.placements) == 2 for a in plan.admissions)


def test_a_gang_never_spans_sites():
    f = fed([q("a", deserved=16)], [site("east", gpus=4), site("west", gpus=4)])
    plan = schedule(snapshot(f, pending=[job("g", "a", tasks=2, gpus=4)]), 0)
    assert not plan.admissions
    assert plan.pending["g"].code == "WaitingForCapacity"


def test_a_gang_is_packed_onto_as_few_nodes_as_it_fits():
    f = fed([q("a", deserved=32)], [site("idc", count=4, gpus=8)])
    plan = schedule(snapshot(f, pending=[job("g", "a", tasks=4, gpus=2)]), 0)
    assert len({p.node for p in plan.admissions[0].placements}) == 1


def test_spread_puts_each_task_on_its_own_node():
    f = fed([q("a", deserved=32)], [site("idc", count=4, gpus=8)], strategy="spread")
    plan = schedule(snapshot(f, pending=[job("g", "a", tasks=4, gpus=2)]), 0)
    assert len({p.node for p in plan.admissions[0].placements}) == 4


def test_an_elastic_gang_starts_with_at_least_min_tasks():
    f = fed([q("a", deserved=8)], [site("idc", count=1, gpus=8)])
    plan = schedule(snapshot(f, pending=[job("e", "a", tasks=6, gpus=2, min_tasks=2)]), 0)
    assert len(plan.admissions[0].placements) == 4


def test_capability_caps_a_queue_even_when_capacity_is_idle():
    f = fed([q("a", deserved=4, capability=6)], [site("idc", count=2)])
    running = start_all(f, [job("r", "a", gpus=4)])
    plan = schedule(snapshot(f, pending=[job("p", "a", gpus=4)], running=running), 1)
    assert plan.pending["p"].code == "ExceedsCapability"
    assert plan.pending["p"].needs.gpu == 4


def test_borrowing_is_bounded_by_the_borrowing_limit():
    f = fed([q("a", deserved=4, borrowing=2), q("b", deserved=12)], [site("idc", count=2)])
    plan = schedule(snapshot(f, pending=[job("x", "a", gpus=6), job("y", "a", gpus=1, submit=1)]), 0)
    assert admitted(plan) == {"x"}
    assert plan.pending["y"].code == "WaitingForQuota"


def test_an_idle_guarantee_is_never_lent():
    f = fed([q("online", guarantee=4, deserved=4), q("batch", deserved=4)], [site("idc", count=1)])
    plan = schedule(snapshot(f, pending=[job(f"b{i}", "batch", gpus=1, submit=i) for i in range(8)]), 0)
    assert len(plan.admissions) == 4
    assert plan.pending["b4"].code == "WaitingForQuota"


def test_unused_deserved_is_lent_up_to_the_lending_limit():
    f = fed([q("lender", deserved=6, lending=2), q("b", deserved=2)], [site("idc", count=1)])
    plan = schedule(snapshot(f, pending=[job(f"b{i}", "b", gpus=1, submit=i) for i in range(8)]), 0)
    assert len(plan.admissions) == 4  # its own 2 plus the 2 the lender may lend


def test_a_child_below_its_deserved_share_reclaims_from_a_borrowing_sibling():
    f = fed([q("p", deserved=8), q("c1", parent="p", deserved=4), q("c2", parent="p", deserved=4)], [site("idc", count=1)])
    running = start_all(f, [job(f"s{i}", "c2", gpus=1, submit=i) for i in range(8)])  # c2 borrows c1's idle half
    plan = schedule(snapshot(f, pending=[job("mine", "c1", gpus=2, submit=10)], running=running), 5)
    assert plan.pending["mine"].code == "WaitingForReclaim"
    assert len(preempted(plan)) == 2 and all(p.reason == "Reclaim" and p.for_job == "mine" for p in plan.preemptions)


def test_a_child_guarantee_is_kept_free_for_it():
    f = fed([q("p", guarantee=2, deserved=8), q("c1", parent="p", guarantee=2, deserved=4), q("c2", parent="p", deserved=4)], [site("idc", count=1)])
    plan = schedule(snapshot(f, pending=[job(f"s{i}", "c2", gpus=1, submit=i) for i in range(8)]), 0)
    assert len(plan.admissions) == 6
    running = run_admitted(plan, [job(f"s{i}", "c2", gpus=1, submit=i) for i in range(8)])
    plan = schedule(snapshot(f, pending=[job("mine", "c1", gpus=2, submit=10)], running=running), 1)
    assert admitted(plan) == {"mine"} and not plan.preemptions


def test_reclaim_preempts_the_fewest_borrowed_jobs_latest_started_first():
    f = fed([q("a", deserved=4), q("b", deserved=4)], [site("idc", count=1)])
    jobs = [job(f"b{i}", "b", gpus=2, submit=i) for i in range(4)]
    plan = schedule(snapshot(f, pending=jobs), 0)
    running = [RunningJob(r.spec, r.site, r.placements, started_s=float(i)) for i, r in enumerate(run_admitted(plan, jobs))]
    plan = schedule(snapshot(f, pending=[job("a1", "a", gpus=4, submit=10)], running=running), 20)
    assert plan.pending["a1"].code == "WaitingForReclaim"
    assert preempted(plan) == {"b3", "b2"}  # two victims free 4 GPUs; the latest started go first
    assert all(p.reason == "Reclaim" for p in plan.preemptions)


def test_reclaim_never_takes_from_a_queue_within_its_deserved_share():
    f = fed([q("a", deserved=4), q("b", deserved=4)], [site("idc", count=1)])
    running = start_all(f, [job("a0", "a", gpus=4), job("b0", "b", gpus=4)])
    plan = schedule(snapshot(f, pending=[job("a1", "a", gpus=2, submit=5)], running=running), 1)
    assert not plan.preemptions


def test_victims_already_stopping_are_not_preempted_twice():
    f = fed([q("a", deserved=4), q("b", deserved=4)], [site("idc", count=1)])
    running = start_all(f, [job(f"b{i}", "b", gpus=2, submit=i) for i in range(4)])
    pending = [job("a1", "a", gpus=4, submit=10)]
    first = schedule(snapshot(f, pending=pending, running=running), 1)
    again = schedule(snapshot(f, pending=pending, running=mark_preempting(running, preempted(first))), 2)
    assert not again.preemptions
    assert again.pending["a1"].code == "WaitingForReclaim"


def test_priority_preemption_inside_a_queue_spares_non_preemptible_jobs():
    f = fed([q("a", deserved=8)], [site("idc", count=1)])
    running = start_all(f, [job("keep", "a", gpus=4, priority=10, preemptible=False), job("low", "a", gpus=4, priority=10)])
    plan = schedule(snapshot(f, pending=[job("hi", "a", gpus=4, priority=1000, submit=5)], running=running), 1)
    assert preempted(plan) == {"low"}
    assert plan.preemptions[0].reason == "Priority"


def test_equal_priority_never_preempts():
    f = fed([q("a", deserved=8)], [site("idc", count=1)])
    running = start_all(f, [job("r", "a", gpus=8)])
    plan = schedule(snapshot(f, pending=[job("p", "a", gpus=8, submit=5)], running=running), 1)
    assert not plan.preemptions


def test_within_a_queue_higher_priority_then_earlier_submit_goes_first():
    f = fed([q("a", deserved=8)], [site("idc", count=1)])
    pending = [job("late", "a", gpus=4, submit=2), job("early", "a", gpus=4, submit=1), job("urgent", "a", gpus=4, submit=3, priority=1000)]
    plan = schedule(snapshot(f, pending=pending), 0)
    assert admitted(plan) == {"urgent", "early"}


def test_surplus_goes_to_the_queue_with_the_lower_weighted_share():
    f = fed([q("heavy", deserved=0, weight=3), q("light", deserved=0, weight=1)], [site("idc", count=1)])
    pending = [job(f"h{i}", "heavy", gpus=1, submit=i) for i in range(8)] + [job(f"l{i}", "light", gpus=1, submit=i) for i in range(8)]
    plan = schedule(snapshot(f, pending=pending), 0)
    got = [a.job_id[0] for a in plan.admissions]
    assert got.count("h") == 6 and got.count("l") == 2  # 3:1 by weight


def test_jobs_within_deserved_go_before_borrowers():
    f = fed([q("own", deserved=4), q("borrower", deserved=0)], [site("idc", count=1)])
    pending = [job(f"b{i}", "borrower", gpus=2, submit=i) for i in range(4)] + [job("o", "own", gpus=4, submit=100)]
    plan = schedule(snapshot(f, pending=pending), 0)
    assert "o" in admitted(plan)


def test_a_large_gang_reserves_nodes_and_small_jobs_cannot_take_them():
    f = fed([q("a", deserved=16)], [site("idc", count=2, gpus=8)])
    running = start_all(f, [job("r0", "a", gpus=4), job("r1", "a", gpus=2, submit=1)])  # bestfit packs them on one node
    big = job("big", "a", tasks=2, gpus=8, submit=1)
    smalls = [job(f"s{i}", "a", gpus=1, submit=2 + i) for i in range(4)]
    plan = schedule(snapshot(f, pending=[big, *smalls], running=running), 1)
    assert "big" in plan.reservations
    assert not admitted(plan) & {s.id for s in smalls}
    assert {plan.pending[s.id].code for s in smalls} == {"ReservedForGang"}


def test_small_jobs_backfill_nodes_outside_a_reservation():
    f = fed([q("a", deserved=32)], [site("idc", count=4, gpus=8)])
    running = start_all(f, [job("r0", "a", gpus=8), job("r1", "a", gpus=4, submit=1), job("r2", "a", gpus=6, submit=2)])
    plan = schedule(snapshot(f, pending=[job("big", "a", tasks=2, gpus=8, submit=1), job("s", "a", gpus=2, submit=2)], running=running), 1)
    reserved = set(plan.reservations["big"])
    assert "s" in admitted(plan)
    assert not {p.node for a in plan.admissions for p in a.placements} & reserved


def test_a_large_gang_is_not_starved_by_a_stream_of_small_jobs():
    """Many rounds: small 1-GPU jobs keep arriving and finishing; the 16-GPU gang must start."""
    f = fed([q("a", deserved=16)], [site("idc", count=2, gpus=8)])
    running: list[RunningJob] = []
    pending = [job("big", "a", tasks=2, gpus=8, submit=0)]
    started = None
    reservations: dict = {}
    for t in range(1, 60):
        pending += [job(f"s{t}-{i}", "a", gpus=1, submit=t - 0.5) for i in range(3)]
        # each small job runs 3 rounds
        running = [r for r in running if t - r.started_s < 3]
        plan = schedule(snapshot(f, pending=pending, running=running, reservations=reservations), t)
        reservations = plan.reservations
        new = run_admitted(plan, pending, t)
        running += new
        pending = [j for j in pending if j.id not in admitted(plan)]
        if "big" in admitted(plan):
            started = t
            break
    assert started is not None and started <= 5


def test_pending_reasons_carry_the_numbers_behind_them():
    f = fed([q("a", deserved=8, capability=8)], [site("idc", count=1)])
    plan = schedule(snapshot(f, pending=[job("huge", "a", tasks=2, gpus=8), job("never", "a", gpus=16)]), 0)
    assert plan.pending["huge"].code == "ExceedsCapability"
    assert plan.pending["huge"].needs.gpu == 16 and plan.pending["huge"].free.gpu == 8
    assert plan.pending["never"].code == "NoFeasibleNode"


def test_every_pending_job_has_exactly_one_reason():
    f = fed([q("a", deserved=4), q("b", deserved=4)], [site("idc", count=1)])
    pending = [job(f"j{i}", "ab"[i % 2], gpus=1 + i % 3, submit=i) for i in range(12)]
    plan = schedule(snapshot(f, pending=pending), 0)
    assert set(plan.pending) | admitted(plan) == {j.id for j in pending}
    assert not set(plan.pending) & admitted(plan)


def test_gpu_sharing_tasks_share_one_gpu():
    f = fed([q("a", deserved=8)], [site("idc", count=1, gpus=1)])
    plan = schedule(snapshot(f, pending=[job(f"s{i}", "a", gpus=0.25) for i in range(5)]), 0)
    assert len(plan.admissions) == 4
    assert {a.placements[0].gpu_milli for a in plan.admissions} == {250}


def test_a_gpu_model_constraint_is_honoured():
    f = fed([q("a", deserved=16)], [site("t4", model="T4"), site("a100")])
    plan = schedule(snapshot(f, pending=[job("j", "a", gpus=1, models=["A100-80GB"])]), 0)
    assert plan.admissions[0].site == "a100"


def test_burst_queues_ask_for_capacity_when_nothing_fits():
    f = fed([q("a", deserved=64, burst=True)], [site("idc", count=1), site("cloud", count=0, max_nodes=4, kind="aws")], burst=True)
    plan = schedule(snapshot(f, pending=[job("g", "a", tasks=2, gpus=8)]), 0)
    assert [r.job_id for r in plan.capacity_requests] == ["g"]


@pytest.mark.parametrize(
    "what,nodes,running",
    [
        ("a node twice", [Node("n", "idc", "g", "A100-80GB", 8, 64000, 512 * 1024)] * 2, []),
        ("a job on an unknown node", None, [RunningJob(job("r", "a"), "idc", (TaskPlacement("ghost", (0,)),), 0)]),
        ("an overcommitted GPU", None, [RunningJob(job(f"r{i}", "a"), "idc", (TaskPlacement("idc-0", (0,)),), 0) for i in range(2)]),
        ("a job in an unknown queue", None, [RunningJob(job("r", "zz"), "idc", (TaskPlacement("idc-0", (0,)),), 0)]),
    ],
)
def test_an_invalid_snapshot_raises_a_named_error(what, nodes, running):
    f = fed([q("a", deserved=8)])
    with pytest.raises(SnapshotError):
        schedule(snapshot(f, running=running, nodes=nodes), 0)


@pytest.mark.parametrize(
    "what,j,field",
    [
        ("an unknown queue", job("x", "nope"), "queue"),
        ("more GPUs per task than any node has", job("x", "a", gpus=9), "gpus_per_task"),
        ("a fractional multi-GPU task", job("x", "a", gpus=1.5), "gpus_per_task"),
        ("a gang above capability", job("x", "a", tasks=3, gpus=8), "tasks"),
        ("a parent queue", job("x", "p"), "queue"),
    ],
)
def test_jobs_that_can_never_run_are_rejected_at_submit(what, j, field):
    f = fed([q("p", deserved=16), q("a", parent="p", deserved=16, capability=16)], [site("idc", count=4)])
    with pytest.raises(JobRejected) as e:
        check_job(f, j)
    assert e.value.field == field


def test_a_gang_larger_than_any_site_is_rejected_at_submit():
    f = fed([q("a", deserved=64)], [site("idc", count=4), site("cloud", count=0, max_nodes=2, kind="aws")])
    check_job(f, job("fits", "a", tasks=4, gpus=8))
    with pytest.raises(JobRejected, match="can hold more than 4 of its 5 tasks"):
        check_job(f, job("x", "a", tasks=5, gpus=8))


def test_a_cloud_node_bought_for_a_job_is_that_jobs_and_given_up_when_its_quota_no_longer_lets_it_start():
    idc, cloud = site("idc", count=1), site("cloud", count=1)
    f = fed([q("train", deserved=8, capability=8), q("batch", deserved=8)], [idc, cloud])
    [full], [node] = nodes_of(idc), nodes_of(cloud)
    big, small = job("big", "train", gpus=8, submit=0), job("small", "batch", gpus=2, submit=5)
    # the node was bought for big: small (first in fair-share order) may not take it
    filler = RunningJob(job("filler", "batch", gpus=8), "idc", (TaskPlacement(full.name, tuple(range(8))),), 0.0)
    plan = schedule(snapshot(f, pending=[small, big], running=[filler], nodes=[full, node], claims={node.name: ("big",)}), 10.0)
    assert [a.job_id for a in plan.admissions] == ["big"] and plan.pending["small"].code == "WaitingForCapacity"
    # meanwhile train took its whole capability elsewhere: big cannot start, so the node is everyone's at once
    elsewhere = RunningJob(job("other", "train", gpus=8), "idc", (TaskPlacement(full.name, tuple(range(8))),), 0.0)
    plan = schedule(snapshot(f, pending=[small, big], running=[elsewhere], nodes=[full, node], claims={node.name: ("big",)}), 10.0)
    assert plan.unclaimed == ("big",) and [a.job_id for a in plan.admissions] == ["small"]


def test_a_paused_queue_admits_nothing_and_a_drained_one_also_stops_what_runs():
    f = fed([q("research", deserved=16), q("train", parent="research", deserved=8), q("batch", deserved=8)], [site("idc", count=2)])
    running = [RunningJob(job("r1", "train", gpus=4), "idc", (TaskPlacement("idc-0", (0, 1, 2, 3)),), 0.0),
               RunningJob(job("r2", "batch", gpus=4, preemptible=False), "idc", (TaskPlacement("idc-1", (0, 1, 2, 3)),), 0.0)]
    pending = [job("t", "train", gpus=2), job("b", "batch", gpus=2)]
    plan = schedule(snapshot(f, pending=pending, running=running, stopped={"research": "pause"}), 0.0)
    assert [a.job_id for a in plan.admissions] == ["b"] and plan.preemptions == ()
    assert plan.pending["t"].code == "QueuePaused" and "'research' is paused" in plan.pending["t"].message
    # drained: its running jobs are stopped and requeued too, non-preemptible ones included (an operator asked)
    plan = schedule(snapshot(f, pending=pending, running=running, stopped={"batch": "drain"}), 0.0)
    assert [a.job_id for a in plan.admissions] == ["t"] and [(p.job_id, p.reason) for p in plan.preemptions] == [("r2", "QueueDrained")]


def test_a_job_whose_cloud_nodes_are_on_the_way_says_so_though_other_capacity_is_held_for_a_guarantee():
    # big runs on A100s only: the IDC's, whose free GPUs are held for online's guarantee
    idc, cloud = site("idc", count=1), site("cloud", count=1, model="H100-80GB")
    f = fed([q("online", guarantee=8, deserved=8, sites=["idc"]), q("train", deserved=8)], [idc, cloud])
    big = job("big", "train", gpus=8, models=("A100-80GB",))
    plan = schedule(snapshot(f, pending=[big]), 0.0)
    assert plan.pending["big"].code == "ReservedForQueue"
    plan = schedule(snapshot(f, pending=[big], burst_in_flight=frozenset({"big"})), 0.0)
    assert plan.pending["big"].code == "WaitingForBurst"  # its own nodes are on their way: that is what it waits for


def test_the_borrowed_work_reclaim_may_take_is_listed_once_for_every_job_that_weighs_it(monkeypatch):
    # Each job that weighed reclaim listed and sorted every running gang again, asking the quota
    # tree about each one's queue: an incremental cycle at 8,500 running took half a second.
    f = fed([q("b", deserved=4), *(q(f"l{i}", deserved=4) for i in range(10))], [site("idc", count=6)], max_victims=2)
    running = start_all(f, [job(f"b{i}", "b", gpus=1, submit=i) for i in range(48)])  # b borrows 44 of 48 GPUs
    calls = []
    real = QuotaTree.borrowing
    monkeypatch.setattr(QuotaTree, "borrowing", lambda self, leaf: calls.append(leaf) or real(self, leaf))
    pending = [job(f"want{i}", f"l{i}", gpus=4, submit=100 + i) for i in range(10)]  # each would need 4 victims, 2 allowed
    plan = schedule(snapshot(f, pending=pending, running=running), 50)
    assert not plan.preemptions and not plan.admissions and all(j.id in plan.pending for j in pending)
    assert len(calls) <= 11, f"{len(calls)} quota lookups for 10 jobs weighing reclaim over 48 running gangs of 11 queues"


def _scattered(f):
    """48 one-GPU jobs of queue b on 6 nodes of 8, started so that the latest (reclaim's first
    victims) are one per node: a node is free only once nearly all of them are gone."""
    running = start_all(f, [job(f"b{i:02d}", "b", gpus=1, submit=i) for i in range(48)])
    return [replace(r, started_s=float(int(r.spec.id[1:]) % 8 * 6 + int(r.spec.id[1:]) // 8)) for r in running]


def test_victims_scattered_one_gpu_a_node_are_not_dry_run_until_a_node_could_hold_the_task(monkeypatch):
    # b may lose only its 40 borrowed GPUs, never a whole node of the 8 it holds there: no victims
    # free a node for the 8-GPU task. Each victim added was tried by taking all the chosen ones
    # off the quota tree and the nodes and placing the task: 1,632 quota updates for nothing.
    f = fed([q("b", deserved=8), q("l", deserved=40)], [site("idc", count=6)], max_victims=48)
    running = _scattered(f)
    calls = []  # a job's usage put on or taken off the quota tree, alone (add) or summed for a dry run's shift
    real_add, real_sums = QuotaTree.add, QuotaTree.sums
    monkeypatch.setattr(QuotaTree, "add", lambda self, *a, **k: calls.append(1) or real_add(self, *a, **k))
    monkeypatch.setattr(QuotaTree, "sums", lambda self, changes, base=None: calls.extend(changes := list(changes)) or real_sums(self, changes, base))
    plan = schedule(snapshot(f, pending=[job("want", "l", gpus=8, submit=100)], running=running), 50)
    assert not plan.preemptions and plan.pending["want"].code != "WaitingForReclaim"
    assert len(calls) <= 100, f"{len(calls)} quota updates"


def test_scattered_victims_still_free_the_one_node_the_task_needs():
    f = fed([q("b", deserved=0), q("l", deserved=48)], [site("idc", count=6)], max_victims=48)
    running = _scattered(f)
    plan = schedule(snapshot(f, pending=[job("want", "l", gpus=8, submit=100)], running=running), 50)
    victims = [r for r in running if r.spec.id in preempted(plan)]
    assert len(victims) == 8 and {p.node for r in victims for p in r.placements} == {"idc-5"}  # the fewest: one node's


def _lenders_and_a_borrower(min_runtime_s: float = 0.0):
    """b borrows 44 of the 48 GPUs (48 one-GPU jobs); l0..l9 lend 4 each, l10 8."""
    f = fed([q("b", deserved=4), *(q(f"l{i}", deserved=4) for i in range(10)), q("l10", deserved=8)], [site("idc", count=6)], max_victims=16)
    preemption = f.policies.preemption.model_copy(update={"reclaim_min_runtime_s": min_runtime_s})
    f = replace(f, policies=f.policies.model_copy(update={"preemption": preemption}))
    return f, tuple(start_all(f, [job(f"b{i:02d}", "b", gpus=1, submit=i) for i in range(48)]))


def test_cycles_in_which_only_jobs_arrived_keep_the_list_of_what_reclaim_may_take(monkeypatch):
    # The simulator keeps one CycleState across cycles. Each incremental cycle listed and sorted
    # the borrowed work again: at 8,570 running, half of such a cycle's time.
    f, running = _lenders_and_a_borrower()
    f = replace(f, policies=f.policies.model_copy(update={"preemption": f.policies.preemption.model_copy(update={"max_victims_per_cycle": 2})}))
    first = snapshot(f, running=running, pending=[job("w0", "l0", gpus=4, submit=100)])
    state = CycleState.build(first)
    schedule(first, 50, state)
    calls = []
    real = QuotaTree.borrowing
    monkeypatch.setattr(QuotaTree, "borrowing", lambda self, leaf: calls.append(leaf) or real(self, leaf))
    for i in range(1, 10):  # each would need 4 victims and may take 2: nothing changes
        plan = schedule(snapshot(f, running=running, pending=[job(f"w{i}", f"l{i}", gpus=4, submit=100 + i)]), 50 + i, state)
        assert not plan.preemptions and not plan.admissions and plan.pending[f"w{i}"].code == "WaitingForCapacity"
    assert calls == [], f"{len(calls)} quota lookups in 9 cycles that changed nothing"


def test_a_borrower_too_young_to_reclaim_is_reclaimed_once_it_has_run_its_minimum_with_the_kept_list():
    f, running = _lenders_and_a_borrower(min_runtime_s=600)
    want = job("w", "l0", gpus=4, submit=100)
    state = CycleState.build(snapshot(f, running=running))
    plan = schedule(snapshot(f, running=running, pending=[want]), 100, state)
    assert not plan.preemptions and plan.wake_at_s == 600
    plan = schedule(snapshot(f, running=running, pending=[want]), 600, state)
    assert len(plan.preemptions) == 4 and {p.reason for p in plan.preemptions} == {"Reclaim"}


def test_victims_already_stopping_are_not_chosen_again_by_a_later_cycle_that_keeps_its_state():
    f, running = _lenders_and_a_borrower()
    state = CycleState.build(snapshot(f, running=running))
    plan = schedule(snapshot(f, running=running, pending=[job("w0", "l0", gpus=4, submit=100)]), 50, state)
    first = preempted(plan)
    assert len(first) == 4
    # the shell marks them stopping: the running tuple changes, the quota tree does not
    stopping = tuple(mark_preempting(list(running), first))
    flagged = tuple(r for r in stopping if r.preempting)
    plan = schedule(snapshot(f, running=stopping, stopping=flagged, pending=[job("w1", "l10", gpus=8, submit=101)]), 51, state)
    assert plan.preemptions and not preempted(plan) & first, "a victim already stopping was chosen again"


def test_a_job_does_not_dry_run_on_nodes_that_jobs_pipelined_ahead_of_it_have_taken(monkeypatch):
    # b's 8 one-GPU jobs fill idc-0; o runs 4 GPUs on each of idc-1 and idc-2, so 8 GPUs are free
    # but no node has 8. w0 preempts b's 8 and is pipelined onto idc-0; w1 may take no victim (the
    # cycle's budget is spent). The bound counted idc-0's 8 GPUs as freed for w1 too, and so put
    # the stopping and pipelined jobs on the tree and the nodes for a dry run that could not pass.
    f = fed([q("b", deserved=0), q("o", deserved=8), q("l0", deserved=8), q("l1", deserved=8)], [site("idc", count=3)], max_victims=8)
    running = [RunningJob(job(f"b{i}", "b", gpus=1), "idc", (TaskPlacement("idc-0", (i,)),), 0.0) for i in range(8)]
    running += [RunningJob(job(f"o{n}", "o", gpus=4), "idc", (TaskPlacement(f"idc-{n}", (0, 1, 2, 3)),), 0.0) for n in (1, 2)]
    searching, shifts = [], []  # the job whose victims are being looked for; the dry runs made for it
    real_shift, real_try = QuotaTree.shift, Preempting._try_preempt
    monkeypatch.setattr(QuotaTree, "shift", lambda self, sums: shifts.append(searching[-1] if searching else None) or real_shift(self, sums))

    def trying(self, job, sites):
        searching.append(job.id)
        try:
            return real_try(self, job, sites)
        finally:
            searching.pop()

    monkeypatch.setattr(Preempting, "_try_preempt", trying)
    plan = schedule(snapshot(f, pending=[job("w0", "l0", gpus=8, submit=100), job("w1", "l1", gpus=8, submit=101)], running=running), 50)
    assert preempted(plan) == {f"b{i}" for i in range(8)} and plan.pending["w0"].code == "WaitingForReclaim", plan.pending
    assert "w0" in shifts and "w1" not in shifts
