"""What a full cycle costs per waiting job once little can change (`fedctl bench scale`'s steady
state: ~41,000 waiting, the cycle's preemptions spent after the first few). A job that could
choose no victim does not search for one; what a site can take of a shape, and a queue's place
in the fair-share order, are worked out once while nothing they depend on changes. Counted, not
timed; each assertion on a count failed on the code before (one search, one walk of the site's
node groups, one fair-share key per waiting job)."""

from __future__ import annotations

from dataclasses import replace

from federation import placement, preempting
from federation.cluster import ClusterState
from federation.quota import QuotaTree
from federation.scheduler import CycleState, schedule
from policies.placement import BestFit

from .builders import admitted, fed, job, nodes_of, preempted, q, site, snapshot, start_all


def _count_searches(monkeypatch) -> list:
    calls = []
    real = preempting.candidates
    monkeypatch.setattr(preempting, "candidates", lambda *a, **k: calls.append(a[0].id) or real(*a, **k))
    return calls


def test_once_the_cycles_preemptions_are_spent_no_waiting_job_searches_for_victims(monkeypatch):
    # b borrows all 16 GPUs; ten lenders each wait with a 2-GPU job they are entitled to; the
    # cycle may preempt one job: the first lender takes it, the other nine wait without a search
    f = fed([q("b", deserved=0), *(q(f"l{i}", deserved=2) for i in range(10))], [site("idc", count=2)], max_victims=1)
    running = tuple(start_all(f, [job(f"b{i:02d}", "b", gpus=2, submit=i) for i in range(8)]))
    waiting = [job(f"w{i}", f"l{i}", gpus=2, submit=100 + i) for i in range(10)]
    searched = _count_searches(monkeypatch)
    plan = schedule(snapshot(f, running=running, pending=waiting), 50)
    assert len(preempted(plan)) == 1 and not admitted(plan)
    assert len(searched) == 1, searched
    assert {plan.pending[w.id].code for w in waiting} == {"WaitingForReclaim", "WaitingForCapacity"}


def test_where_nothing_runs_no_waiting_job_searches_for_victims(monkeypatch):
    # a cycle from an empty cluster: 2 nodes fill, 30 more 8-GPU jobs of 30 queues wait; nothing
    # runs that any of them could take (what this cycle admits runs only from the next)
    f = fed([q(f"l{i}", deserved=8) for i in range(32)], [site("idc", count=2)])
    searched = _count_searches(monkeypatch)
    plan = schedule(snapshot(f, pending=[job(f"w{i}", f"l{i}", gpus=8, submit=i) for i in range(32)]), 0)
    assert len(admitted(plan)) == 2 and len(plan.pending) == 30
    assert searched == []


def test_a_gang_too_young_to_reclaim_is_still_looked_for_when_the_preemptions_are_spent():
    # the search is skipped only where it could find nothing: on site b, the borrower's job is too
    # young to reclaim (600 s), and the lender there still learns when to look again, after the
    # lender on site a spent the cycle's one preemption
    f = fed([q("b", deserved=0), q("la", deserved=8, sites=["a"]), q("lb", deserved=8, sites=["b"])], [site("a"), site("b")], max_victims=1)
    f = replace(f, policies=f.policies.model_copy(update={"preemption": f.policies.preemption.model_copy(update={"reclaim_min_runtime_s": 600.0})}))
    old, young = start_all(f, [job("old", "b", gpus=8), job("young", "b", gpus=8, submit=1)])
    assert (old.site, young.site) == ("a", "b")
    running = (old, replace(young, started_s=900.0))
    plan = schedule(snapshot(f, running=running, pending=[job("wa", "la", gpus=8, submit=1), job("wb", "lb", gpus=8, submit=2)]), 1000)
    assert preempted(plan) == {"old"}
    assert plan.wake_at_s == 1500.0


def test_what_a_site_can_take_is_worked_out_once_while_its_nodes_do_not_change(monkeypatch):
    f = fed([q("a")], [site("idc", count=4)])
    cluster = ClusterState(nodes_of(f.sites[0]))
    walks = []
    real = placement._groups
    monkeypatch.setattr(placement, "_groups", lambda *a: walks.append(1) or real(*a))
    four = job("x", "a", tasks=8, gpus=4)
    assert [placement.capacity_for(cluster, "idc", four) for _ in range(50)] == [8] * 50
    assert len(walks) == 1
    # and worked out again as soon as a node changes: taken, given back, shifted for a dry run
    taken = placement.place_gang(cluster, job("y", "a", tasks=1, gpus=8), "idc", BestFit())
    assert placement.capacity_for(cluster, "idc", four) == 6
    saved = cluster.shift([(job("y", "a", tasks=1, gpus=8), taken, -1)])
    assert placement.capacity_for(cluster, "idc", four) == 8
    cluster.restore(saved)
    assert placement.capacity_for(cluster, "idc", four) == 6
    cluster.apply(job("y", "a", tasks=1, gpus=8), taken, -1)
    assert placement.capacity_for(cluster, "idc", four) == 8
    assert len(walks) == 5


def test_a_queues_place_in_the_fair_share_order_is_worked_out_once_while_its_usage_stands(monkeypatch):
    # a borrowing queue with 40 alike jobs that cannot start: one fair-share key, not forty
    f = fed([q("b", deserved=0), q("c", deserved=0)], [site("idc", count=1)])
    running = tuple(start_all(f, [job("b0", "b", gpus=8)]))
    state = CycleState.build(snapshot(f, running=running))
    keys = []
    real = QuotaTree.order_key
    monkeypatch.setattr(QuotaTree, "order_key", lambda self, leaf, r: keys.append(leaf) or real(self, leaf, r))
    waiting = [job(f"{qn}{i}", qn, gpus=4, submit=i) for qn in "bc" for i in range(20)]
    plan = schedule(snapshot(f, running=running, pending=waiting), 10, state)
    assert not plan.admissions and len(plan.pending) == 40
    assert sorted(keys) == ["b", "c"], keys


class _CountedGets(dict):
    gets = 0

    def get(self, *a):
        _CountedGets.gets += 1
        return super().get(*a)


def test_placement_passes_over_a_free_state_that_fits_nothing_once_not_once_a_rack():
    # 40 racks of full nodes and one free node: a task is weighed against two free states (full,
    # free), not against 41 groups (a full cycle from an empty cluster fills rack after rack)
    f = fed([q("a")], [site("idc", count=41)])
    nodes = nodes_of(f.sites[0], racks=41)
    cluster = ClusterState(nodes)
    for i in range(40):
        assert placement.place_gang(cluster, job(f"fill-{i}", "a", gpus=8), "idc", BestFit()) is not None
    free = [n for n, st in cluster.nodes.items() if st.free_gpu_milli]
    cluster.fit_cache = _CountedGets(cluster.fit_cache)
    _CountedGets.gets = 0
    placed = placement.place_gang(cluster, job("x", "a", gpus=4), "idc", BestFit())
    assert [p.node for p in placed] == free
    assert _CountedGets.gets <= 4  # each free state once, and once more inside `_fit` for a shape not yet cached (43 before)
