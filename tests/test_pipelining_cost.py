"""What a cycle costs with many jobs pipelined and many stopping: each job waiting for what its
victims free is placed once in the world where they have stopped, not once for each pipelined job
behind it (that made a cycle quadratic in them: 1.0 -> 6.4 s a tick as 464 jobs stopped, in
benchmarks/controller_tick.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from federation import pipelining
from federation.cluster import ClusterState
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

    placed = Counter()
    real_take, real_place = ClusterState.can_take, pipelining.place_gang
    monkeypatch.setattr(ClusterState, "can_take", lambda self, spec, places: placed.update([spec.id]) or real_take(self, spec, places))
    monkeypatch.setattr(pipelining, "place_gang", lambda cluster, spec, *a: placed.update([spec.id]) or real_place(cluster, spec, *a))
    victims = {p.job_id: p.for_job for p in plan.preemptions}  # the shell marks them stopping, each for its preemptor
    stopping = tuple(replace(r, preempting=True, preempted_for=victims[r.spec.id]) if r.spec.id in victims else r for r in running)
    again = schedule(snapshot(f, running=stopping, stopping=tuple(r for r in stopping if r.preempting), pending=waiting, pipelined=plan.pipelined), 51, state)
    assert not again.admissions and set(again.pipelined) == set(plan.pipelined)  # still waiting for the same victims
    # once where it claimed (is it free yet?), once in the world where the victims have stopped
    assert set(placed) == {w.id for w in waiting} and max(placed.values()) <= 2, placed
