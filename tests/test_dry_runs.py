"""Dry runs (preemption's and pipelining's) take several jobs off the quota tree and the nodes and
put others on at once (`QuotaTree.shift` of their `sums`, `ClusterState.shift`), then copy the
saved state back (`restore`). They must leave exactly what applying the jobs one by one leaves,
and restore exactly what was there."""

from __future__ import annotations

import random

import pytest

from federation.cluster import ClusterState
from federation.errors import SnapshotError
from federation.model import Node, Resources, TaskPlacement
from federation.quota import QuotaTree

from .builders import cluster_contents, job, q, quota_contents


def _tree() -> QuotaTree:
    queues = [q("org", deserved=24, guarantee=4), q("a", parent="org", deserved=8, guarantee=2), q("b", parent="org", deserved=16, lending=4),
              q("c", deserved=8)]
    return QuotaTree(queues, Resources.of(32, 256, 2048))


@pytest.mark.parametrize("seed", range(20))
def test_a_quota_shift_leaves_what_adding_job_by_job_leaves_and_restore_puts_it_back(seed):
    rng = random.Random(seed)
    leaves = ["a", "b", "c"]
    running = [(rng.choice(leaves), Resources.of(rng.randint(0, 4), rng.randint(0, 8), rng.randint(0, 64)), rng.random() < 0.3) for _ in range(8)]
    base = _tree()
    for leaf, r, pre in running:
        base.add(leaf, r, preemptible=not pre)
    before = quota_contents(base)
    changes = [(leaf, r, -1, not pre) for leaf, r, pre in rng.sample(running, rng.randint(0, len(running)))]
    changes += [(rng.choice(leaves), Resources.of(rng.randint(0, 4)), 1, rng.random() < 0.5) for _ in range(rng.randint(0, 4))]

    one_by_one = _tree()
    for leaf, r, pre in running:
        one_by_one.add(leaf, r, preemptible=not pre)
    for leaf, r, sign, preemptible in changes:
        one_by_one.add(leaf, r, sign, preemptible)

    versions, count = dict(base.versions), base.changes
    saved = base.shift(base.sums(changes))
    assert quota_contents(base) == quota_contents(one_by_one)
    base.restore(saved)
    assert quota_contents(base) == before
    # the same changes summed in two parts, the first kept as the base of the second (as the
    # stopping jobs' are for each dry run): the base is left as it was
    cut = rng.randint(0, len(changes))
    first = base.sums(changes[:cut])
    kept = {a: list(d) for a, d in first.items()}
    saved = base.shift(base.sums(changes[cut:], first))
    assert quota_contents(base) == quota_contents(one_by_one) and first == kept
    base.restore(saved)
    assert quota_contents(base) == before
    # what was derived from the shifted state no longer holds: the counters only move on
    assert base.changes > count and all(base.versions[t] >= versions[t] for t in versions)
    assert all(base.versions[base.top(leaf)] > versions[base.top(leaf)] for leaf, *_ in changes)


def _nodes() -> list[Node]:
    mig = (("0", "3g.40gb", 0), ("0", "3g.40gb", 4), ("1", "1g.10gb", 0))
    out = [Node(f"n{i}", "idc", "g", "A100-80GB", 4, 32_000, 256 * 1024, rack=f"r{i % 2}") for i in range(5)]
    out.append(Node("m0", "idc", "g", "A100-80GB", 4, 32_000, 256 * 1024, rack="r0", mig_layout=tuple((int(g), p, s) for g, p, s in mig)))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_a_node_shift_leaves_what_applying_job_by_job_leaves_and_restore_puts_it_back(seed):
    rng = random.Random(seed)
    running = []  # (spec, placements) placed on an empty cluster, whole and shared GPUs and MIG instances
    scratch = ClusterState(_nodes())
    for i in range(12):
        node = rng.choice(sorted(scratch.nodes))
        st = scratch.nodes[node]
        if node == "m0":
            if not st.mig_free:
                continue
            inst = next(iter(st.mig_free))
            spec, p = job(f"r{i}", "a", gpus=0, cpu=1), TaskPlacement(node, (inst[0],), mig=inst)
        elif rng.random() < 0.5 and (free := [g for g, f in enumerate(st.gpu_free) if f == 1000]):
            spec, p = job(f"r{i}", "a", gpus=1, cpu=2, mem_gib=8), TaskPlacement(node, (free[0],))
        elif shared := [g for g, f in enumerate(st.gpu_free) if f >= 300]:
            spec, p = job(f"r{i}", "a", gpus=0.3, cpu=1), TaskPlacement(node, (shared[0],), gpu_milli=300)
        else:
            continue
        scratch.apply(spec, [p])
        running.append((spec, [p]))

    def fresh() -> ClusterState:
        c = ClusterState(_nodes())
        for spec, placements in running:
            c.apply(spec, placements)
        return c

    gone = rng.sample(running, rng.randint(0, len(running)))
    # what goes on is put where the gone ones were (as a pipelined preemptor on its victims)
    placed = [(job(f"p{i}", "b", gpus=0, cpu=1), [TaskPlacement(p.node, p.gpus, gpu_milli=p.gpu_milli, mig=p.mig)])
              for i, (spec, ps) in enumerate(gone) for p in ps if rng.random() < 0.7]
    changes = [(spec, ps, -1) for spec, ps in gone] + [(spec, ps, 1) for spec, ps in placed]

    one_by_one = fresh()
    for spec, ps, sign in changes:
        one_by_one.apply(spec, ps, sign)
    c = fresh()
    before = cluster_contents(c)
    saved = c.shift(changes)
    assert cluster_contents(c) == cluster_contents(one_by_one)
    c.restore(saved)
    assert cluster_contents(c) == before


def test_a_node_shift_that_overcommits_raises_and_leaves_the_nodes_as_they_were():
    c = ClusterState(_nodes())
    before = cluster_contents(c)
    with pytest.raises(SnapshotError, match="overcommitted"):
        c.shift([(job("x", "a", gpus=1), [TaskPlacement("n0", (0,))], 1), (job("y", "a", gpus=1), [TaskPlacement("n0", (0,))], 1)])
    assert cluster_contents(c) == before
