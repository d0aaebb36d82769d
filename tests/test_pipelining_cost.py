"""What a cycle costs with many jobs pipelined and many stopping (benchmarks/controller_tick.py:
a tick grew from 1.0 to 6-11 s as 464 preempted jobs stopped within their grace). Each job
waiting for what its victims free is placed once in the world where they have stopped, not once
for each pipelined job behind it, and weighs in that world as the pass builds it; what the
stopping jobs free node by node is summed once, not for each waiting job that asks whether it
would hold it. Counted, not timed."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from federation import pipelining
from federation.cluster import ClusterState
from federation.model import RunningJob, TaskPlacement
from federation.quota import QuotaTree
from federation.scheduler import CycleState, schedule

from .builders import fed, job, preempted, q, site, snapshot, start_all


def test_each_pipelined_job_is_placed_in_the_freed_world_once_a_cycle(monkeypatch):
    # b borrows 44 of the 48 GPUs; ten lenders' jobs reclaim 4 each and are pipelined; in the next
    # cycle their victims still stop, and each of the ten is looked at again
    f = fed([q("b", deserved=4), *(q(f"l{i}", deserved=4) for i in range(11))], [site("idc", count=6)], max_victims=40)
    running = tuple(start_all(f, [job(f"b{i:02d}", "b", gpus=1, submit=i) for i in range(48)]))
    waiting = [job(f"w{i}", f"l{i}", gpus=4, submit=100 + i) for i in range(10)]
    state = CycleState.build(snapshot(f, running=running))
    plan = schedule(snapshot(f, running=running, pending=waiting), 50, state)
    assert len(preempted(plan)) == 40 and len(plan.pipelined) == 10, plan.pending

    placed, worlds = Counter(), []
    real_take, real_place, real_shift = ClusterState.can_take, pipelining.place_gang, QuotaTree.shift
    monkeypatch.setattr(QuotaTree, "shift", lambda self, sums: worlds.append(1) or real_shift(self, sums))
    monkeypatch.setattr(ClusterState, "can_take", lambda self, spec, places: placed.update([spec.id]) or real_take(self, spec, places))
    monkeypatch.setattr(pipelining, "place_gang", lambda cluster, spec, *a: placed.update([spec.id]) or real_place(cluster, spec, *a))
    victims = {p.job_id: p.for_job for p in plan.preemptions}  # the shell marks them stopping, each for its preemptor
    stopping = tuple(replace(r, preempting=True, preempted_for=victims[r.spec.id]) if r.spec.id in victims else r for r in running)
    again = schedule(snapshot(f, running=stopping, stopping=tuple(r for r in stopping if r.preempting), pending=waiting, pipelined=plan.pipelined), 51, state)
    assert not again.admissions and set(again.pipelined) == set(plan.pipelined)  # still waiting for the same victims
    # once where it claimed (is it free yet?), once in the world where the victims have stopped
    assert set(placed) == {w.id for w in waiting} and max(placed.values()) <= 2, placed
    # and each weighs in its world as the one pass builds it: the worlds are put on the quota
    # tree and the nodes once, not again for each pipelined job (21 quota shifts before)
    assert len(worlds) == 1


class _Counted(tuple):
    """A stopping job's placements, counting how often they are read through."""

    reads = 0

    def __iter__(self):
        _Counted.reads += 1
        return super().__iter__()


def _reads_in_a_cycle_with(waiting: int) -> int:
    # 48 GPUs: b borrows them all; 12 of its one-GPU jobs stop, two a node (for a job since
    # gone), so what they free fits no 4-GPU task; `waiting` jobs of 4 GPUs, each of its own
    # lending queue, each ask whether what is being freed would hold them
    f = fed([q("b", deserved=0), *(q(f"l{i}", deserved=4) for i in range(waiting))], [site("idc", count=6)], max_victims=1)
    running = []
    for n in range(6):
        for g in range(8):
            stopping = g < 2
            placements = (_Counted if stopping else tuple)((TaskPlacement(f"idc-{n}", (g,)),))
            running.append(RunningJob(job(f"b{n}{g}", "b", gpus=1), "idc", placements, 0.0, preempting=stopping, preempted_for="gone" if stopping else None))
    pending = [job(f"x{i}", f"l{i}", gpus=4, submit=100 + i) for i in range(waiting)]
    _Counted.reads = 0
    plan = schedule(snapshot(f, running=running, stopping=tuple(r for r in running if r.preempting), pending=pending), 50)
    assert not plan.admissions and len(plan.pending) == waiting
    return _Counted.reads


def test_what_the_jobs_stopping_free_is_summed_once_for_every_job_that_asks():
    # each asking job summed every stopping job's GPUs node by node: a cycle grew with the
    # waiting jobs times the jobs stopping (most jobs ask, in a cycle whose preemptions are spent)
    assert _reads_in_a_cycle_with(20) == _reads_in_a_cycle_with(10)
