"""Conformance cases: ours (tidal windows and guarantees, elastic gangs, capabilities users asked for) and Volcano's gang e2e cases, re-created as our own (see tests/conformance.py)."""

from __future__ import annotations

import pytest

from .conformance import (
    GRACE,
    Q2,
    SOON,
    Case,
    J,
    both,
    expect_preempted,
    expect_starts,
    ids,
    run,
    simulate,
)

CASES = [
    # ---- tidal and guarantees (ours) ----
    Case("a guarantee is held idle for its queue; others' jobs wait rather than take it", "ours (guarantee)",
         "  - {name: online, guarantee: {gpu: 2}, deserved: {gpu: 2}, sites: [idc]}\n  - {name: batch, deserved: {gpu: 2}}",
         [J("b1", "batch", gpus=2), J("b2", "batch", gpus=2, at=1)], expect=expect_starts(b1=0, b2=10_000)),
    Case("a queue borrows up to its borrowing limit and no further", "Kueue: borrowingLimit",
         "  - {name: q0, deserved: {gpu: 1}, borrowing_limit: {gpu: 1}}\n  - {name: q1, deserved: {gpu: 3}}",
         [J("a", "q0", gpus=2), J("b", "q0", gpus=1, at=1)], expect=expect_starts(a=0, b=10_000)),
    Case("a lending limit keeps part of an idle queue's share from others", "Kueue: lendingLimit",
         "  - {name: q0, deserved: {gpu: 2}, lending_limit: {gpu: 1}}\n  - {name: q1, deserved: {gpu: 2}}",
         [J("a", "q1", gpus=3), J("b", "q1", gpus=1, at=1)], expect=expect_starts(a=0, b=10_000)),
    # ---- elastic gangs ----
    Case("an elastic gang starts with its minimum when that is all there is", "Volcano minAvailable / KAI elastic", "  - {name: q0, deserved: {gpu: 4}}",
         [J("e", "q0", gpus=1, tasks=6, min_tasks=3)], expect=expect_starts(e=0)),
    Case("Reclaim only over quota task from elastic Job", "KAI reclaim_test.go", Q2,
         [J("q1-e", "q1", gpus=1, tasks=4, min_tasks=2), J("q0-a", "q0", at=100, gpus=2)],
         expect=both(expect_preempted(), expect_starts(**{"q0-a": 100}),
                     lambda r: (len(next(e for e in r.events if e["type"] == "admit" and e["job"] == "q1-e")["placements"]) == 2) or pytest.fail("grew")),
         differs="an elastic gang grows past its minimum only within its queue's deserved share (it is preempted whole), so there is "
                 "nothing over quota to reclaim: q1-e runs 2 tasks and q0-a starts at once. Before, it grew to 4 on borrowed GPUs, "
                 "was reclaimed, came back at 4 and was reclaimed again, forever"),
    Case("an elastic gang grows into its queue's free share", "Volcano minAvailable", "  - {name: q0, deserved: {gpu: 4}}\n  - {name: q1, deserved: {gpu: 4}}",
         [J("e", "q0", gpus=1, tasks=6, min_tasks=2)], nodes=[(2, 4)],
         expect=lambda r: (len(next(e for e in r.events if e["type"] == "admit")["placements"]) == 4) or pytest.fail("did not grow to its share")),
    # ---- ours: capabilities users asked for (issue 19) ----
    Case("reclaim waits until the borrower has run its minimum", "ours (reclaim_min_runtime_s; Kueue KEP-14468)", Q2,
         [J("q1-a", "q1", gpus=4), J("q0-a", "q0", at=100, gpus=2)], policies="preemption: {grace_s: 10, reclaim_min_runtime_s: 600}",
         expect=lambda r: (r.preempted() == {"q1-a": "Reclaim"} and 600 <= r.start("q0-a") <= 600 + GRACE + 5) or pytest.fail(str(r.starts()))),
    Case("a queue runs at most max_running_jobs at once", "ours (max_running_jobs; Armada/YuniKorn max applications)",
         "  - {name: q0, deserved: {gpu: 4}, max_running_jobs: 2}", [J(f"j{i}", "q0", dur=100) for i in range(4)],
         expect=lambda r: (len(r.running_at(0)) == 2 and len(r.running_at(100)) == 2) or pytest.fail(str(r.starts()))),
    Case("a parent's max_running_jobs bounds its children together", "ours (max_running_jobs)",
         "  - {name: d0, max_running_jobs: 3}\n  - {name: q0, parent: d0, deserved: {gpu: 2}}\n  - {name: q1, parent: d0, deserved: {gpu: 2}}",
         [J(f"q0-{i}", "q0", dur=100) for i in range(2)] + [J(f"q1-{i}", "q1", dur=100) for i in range(2)],
         expect=lambda r: (len(r.running_at(0)) == 3) or pytest.fail(str(r.running_at(0)))),
    Case("a run past its max_runtime_s is stopped and frees its GPUs", "ours (max_runtime_s; Kueue maximumExecutionTimeSeconds)", "  - {name: q0, deserved: {gpu: 4}}",
         [J("long", "q0", gpus=4, dur=10_000, max_runtime=300), J("next", "q0", at=1, gpus=4, dur=10)],
         expect=lambda r: (r.start("next") == 300 and any(e["type"] == "finish" and e.get("failed") == "MaxRuntimeExceeded" for e in r.events))
         or pytest.fail(str(r.starts()))),
    Case("a window raises a capability, and what waited for it starts when it opens", "ours (tidal windows)",
         "  - {name: q0, deserved: {gpu: 2}, capability: {gpu: 2}}", [J("a", "q0", gpus=2), J("b", "q0", gpus=2, at=1)],
         policies='preemption: {grace_s: 10}, tidal: [{name: day, window: {start: "08:00", end: "20:00"}, queues: {q0: {capability: {gpu: 4}}}}]',
         expect=expect_starts(a=0, b=8 * 3600)),
    Case("a window that lowers a capability gives the excess back one job at a time", "ours (QuotaShrink; YuniKorn quota preemption)",
         "  - {name: q0, deserved: {gpu: 4}}", [J("a", "q0", gpus=2, dur=100_000), J("b", "q0", gpus=2, at=1, dur=100_000)],
         policies='preemption: {grace_s: 10, quota_shrink_delay_s: 300}, tidal: [{name: day, window: {start: "08:00", end: "20:00"}, queues: {q0: {deserved: {gpu: 2}, capability: {gpu: 2}}}}]',
         expect=lambda r: (r.preempted() == {"b": "QuotaShrink"} and 8 * 3600 + 300 <= next(e["t"] for e in r.events if e["type"] == "preempt") <= 8 * 3600 + 320)
         or pytest.fail(str(r.preempted()))),
    Case("fractional jobs of two queues share one GPU", "KAI allocateFractionalGpu_test.go (across queues)", Q2,
         [J("q0-f", "q0", milli=500), J("q1-f", "q1", milli=500)], nodes=[(1, 1)], expect=expect_starts(**{"q0-f": 0, "q1-f": 0})),
    Case("a gang needing more than one node's GPUs spans nodes of one site", "Volcano gang: multi-node", "  - {name: q0, deserved: {gpu: 8}}",
         [J("g", "q0", gpus=4, tasks=2)], nodes=[(2, 4)],
         expect=lambda r: (len({p["node"] for p in next(e for e in r.events if e["type"] == "admit")["placements"]}) == 2) or pytest.fail("one node")),
    Case("a gang is placed whole or waits: one task too many waits for all", "Volcano gang: minMember", "  - {name: q0, deserved: {gpu: 8}}",
         [J("hold", "q0", gpus=1, dur=100), J("g", "q0", at=1, gpus=1, tasks=4)], nodes=[(1, 4)], expect=expect_starts(g=100)),
    Case("a higher class waiting in its queue goes before a lower one that came first", "KAI allocate_test.go (priority within a queue)",
         "  - {name: q0, deserved: {gpu: 2}}", [J("hold", "q0", gpus=2, dur=100, kind="build"), J("low", "q0", at=1, gpus=2), J("high", "q0", at=2, gpus=2, kind="build")],
         nodes=[(1, 2)], expect=lambda r: (r.start("high") == 100 and r.start("low") >= 10_100) or pytest.fail(str(r.starts()))),
    Case("Inference preempts train", "KAI preemptMIG_test.go (whole GPUs here)", "  - {name: q0, deserved: {gpu: 4}}",
         [J("train", "q0", gpus=4), J("infer", "q0", at=100, gpus=1, kind="interactive")],
         expect=expect_preempted("train", reason="Priority", then=expect_starts(infer=SOON))),
    Case("queues of equal share are served in turn", "Kueue fair sharing: round robin of equal shares", "  - {name: q0}\n  - {name: q1}",
         [J(f"q0-{i}", "q0") for i in range(3)] + [J(f"q1-{i}", "q1") for i in range(3)], nodes=[(1, 4)],
         expect=lambda r: (sorted(j[:2] for j in r.running_at(0)) == ["q0", "q0", "q1", "q1"]) or pytest.fail(str(r.running_at(0)))),
    Case("capacity freed by a finished job goes to the longest-waiting within a queue", "KAI allocate_test.go (creation time)", "  - {name: q0, deserved: {gpu: 4}}",
         [J("hold", "q0", gpus=4, dur=100, kind="build"), J("w1", "q0", at=1, gpus=4), J("w2", "q0", at=2, gpus=4)],
         expect=expect_starts(w1=100)),
    Case("a borrowing queue's job waits when the cluster is full of others' work within their shares", "Kueue: borrowing needs free quota", Q2,
         [J("q0-a", "q0", gpus=2), J("q1-a", "q1", gpus=2), J("q0-b", "q0", at=1)], expect=both(expect_preempted(), expect_starts(**{"q0-b": 10_000}))),
    # ---- gangs (Volcano gang e2e) ----
    Case("a gang starts all its tasks at once or none", "Volcano gang: gang scheduling", "  - {name: q0, deserved: {gpu: 8}}",
         [J("small", "q0", gpus=1, dur=100), J("gang", "q0", at=1, gpus=1, tasks=4)], nodes=[(4, 1)],
         expect=lambda r: ([e for e in r.events if e["type"] == "admit" and e["job"] == "gang"][0]["t"] >= 100 and
                           len([e for e in r.events if e["type"] == "admit" and e["job"] == "gang"][0]["placements"]) == 4) or pytest.fail("partial")),
    Case("a stream of small jobs does not starve a waiting gang", "Volcano gang: starvation (reserved nodes)", "  - {name: q0, deserved: {gpu: 4}}",
         [J(f"s{i}", "q0", at=i * 20, gpus=1, dur=100) for i in range(40)] + [J("gang", "q0", at=30, gpus=1, tasks=4, dur=50)],
         expect=lambda r: (r.start("gang") is not None and r.start("gang") <= 300) or pytest.fail(f"gang started at {r.start('gang')}")),
    Case("two gangs that together overfill the cluster do not deadlock holding halves", "Volcano gang: no deadlock", "  - {name: q0, deserved: {gpu: 4}}",
         [J("g1", "q0", gpus=1, tasks=3, dur=100), J("g2", "q0", gpus=1, tasks=3, dur=100)], nodes=[(4, 1)],
         expect=expect_starts(g1=0, g2=100)),
    # ---- many reclaims at once: each takes its part of what is being freed (KAI's pipelining) ----
    Case("four queues reclaim from one borrower within one grace period", "ours (KAI: a preemptor is pipelined onto its victims)",
         "  - {name: b, deserved: {gpu: 0}}\n" + "\n".join(f"  - {{name: l{i}, deserved: {{gpu: 4}}}}" for i in range(4)),
         [J(f"b{i:02d}", "b", gpus=1) for i in range(16)] + [J(f"w{i}", f"l{i}", at=100, gpus=4) for i in range(4)], nodes=[(4, 4)],
         expect=both(expect_starts(**{f"w{i}": SOON for i in range(4)}, **{f"b{i:02d}": 0 for i in range(16)}),
                     lambda r: (len(r.preempted()) == 16) or pytest.fail(str(r.preempted()))),
         differs="before, each lender counted the first one's victims, still stopping, as enough for itself too and waited: one reclaim per "
                 "grace period (w0..w3 started at 110, 120, 130, 140)"),
    Case("what one victim frees is shared by the lenders it is enough for, and the next victim taken for the one it is not",
         "ours (KAI: a preemptor is pipelined onto its victims)",
         "  - {name: b, deserved: {gpu: 0}}\n" + "\n".join(f"  - {{name: l{i}, deserved: {{gpu: 2}}}}" for i in range(3)),
         [J("b1", "b", gpus=4), J("b2", "b", gpus=4, at=1)] + [J(f"w{i}", f"l{i}", at=100, gpus=2) for i in range(3)], nodes=[(2, 4)],
         expect=both(expect_starts(b1=0, b2=1, w0=SOON, w1=SOON, w2=SOON), expect_preempted("b1", "b2", reason="Reclaim"))),
    Case("lenders reclaiming at once take back what was lent and no more: the borrower keeps its share", "ours (KAI: a preemptor is pipelined onto its victims)",
         "  - {name: b, deserved: {gpu: 4}}\n" + "\n".join(f"  - {{name: l{i}, deserved: {{gpu: 4}}}}" for i in range(3)),
         [J(f"b{i:02d}", "b", gpus=1) for i in range(12)] + [J(f"w{i}", f"l{i}", at=100, gpus=4) for i in range(3)], nodes=[(3, 4)],
         expect=both(expect_starts(w0=SOON, w1=SOON), lambda r: (len(r.preempted()) == 8 and r.start("w2") > SOON) or pytest.fail(str(r.preempted())))),
    Case("a lender arriving while another's victims stop does not count on what they free", "ours (KAI: a preemptor is pipelined onto its victims)",
         "  - {name: b, deserved: {gpu: 0}}\n  - {name: l0, deserved: {gpu: 4}}\n  - {name: l1, deserved: {gpu: 4}}",
         # x waits and preempts nothing, so the cycle at 104 looks only at what is new (and, now, at w0)
         [J(f"b{i:02d}", "b", gpus=1) for i in range(8)] + [J("w0", "l0", at=100, gpus=4), J("x", "b", at=102), J("w1", "l1", at=104, gpus=4)],
         nodes=[(2, 4)], expect=expect_starts(w0=SOON, w1=104 + GRACE + 5),
         differs="before, the cycle at 104 did not see w0 (it looked at new jobs only), so w1 counted w0's victims as its own and "
                 "waited for them, then for victims of its own: it started at 120"),
    Case("two high-priority jobs of one queue each preempt lower ones in one grace period", "ours (KAI: a preemptor is pipelined onto its victims)",
         "  - {name: q0, deserved: {gpu: 8}}",
         [J(f"lo{i}", "q0") for i in range(8)] + [J(f"hi{i}", "q0", at=100, gpus=4, kind="interactive") for i in range(2)], nodes=[(2, 4)],
         expect=both(expect_starts(hi0=SOON, hi1=SOON), expect_preempted(*(f"lo{i}" for i in range(8)), reason="Priority"))),
    Case("an elastic gang counts on what is being freed only up to its deserved share", "ours (KAI: a preemptor is pipelined onto its victims)",
         "  - {name: b, deserved: {gpu: 0}}\n  - {name: l0, deserved: {gpu: 4}}\n  - {name: l1, deserved: {gpu: 2}}\n  - {name: l2, deserved: {gpu: 2}}",
         [J("b1", "b", gpus=4), J("b2", "b", gpus=4, at=1), J("b3", "b", gpus=2, at=2),
          J("a", "l0", at=100, gpus=4), J("e", "l1", at=101, gpus=1, tasks=4, min_tasks=1), J("w", "l2", at=102, gpus=2)], nodes=[(3, 4)],
         expect=both(expect_starts(a=SOON, e=SOON + 1, w=SOON + 1), expect_preempted("b2", "b3", reason="Reclaim")),
         differs="counted at all 4 tasks, e left w no room in what b2 frees, and w preempted b1 as well"),
    Case("a pipelined job starts where it claimed, first: another ordered before it does not take what was freed for it",
         "ours (KAI: a pipelined job is bound to what its victims release)",
         "  - {name: b, deserved: {gpu: 0}}\n" + "\n".join(f"  - {{name: l{i}, deserved: {{gpu: 4}}}}" for i in range(3)),
         [J(f"b{i:02d}", "b", gpus=2, at=i) for i in range(4)] + [J("a0", "l0", at=100, gpus=2), J("z1", "l1", at=100, gpus=4), J("c2", "l2", at=101)],
         nodes=[(2, 4)], expect=both(expect_starts(a0=SOON, z1=SOON, c2=SOON + 1), expect_preempted("b00", "b01", "b02", "b03", reason="Reclaim")),
         differs="before, when the victims had stopped, a0 (ordered first) was placed on the node freed for z1; z1 then moved c2 away "
                 "(consolidation) and started at 121"),
    Case("an elastic gang starts with what it claimed of what is being freed, not with what was freed for another", "ours (KAI: a pipelined job is bound to what its victims release)",
         "  - {name: b, deserved: {gpu: 0}}\n  - {name: l0, deserved: {gpu: 4}}\n  - {name: l1, deserved: {gpu: 4}}",
         [J(f"b{i:02d}", "b") for i in range(8)] + [J("e", "l0", at=100, tasks=8, min_tasks=2), J("w", "l1", at=100, gpus=4)], nodes=[(2, 4)],
         expect=both(expect_starts(e=SOON, w=SOON), lambda r: (len(r.preempted()) == 6 and len(r.nodes("e")) >= 1) or pytest.fail(str(r.preempted()))),
         differs="before, e grew into the node freed for w once the victims had stopped, and w preempted two more and started at 120"),
    Case("consolidation for a borrower's gang takes nothing being freed for a lender", "ours (KAI: a pipelined job is bound to what its victims release)",
         "  - {name: b, deserved: {gpu: 0}}\n" + "\n".join(f"  - {{name: l{i}, deserved: {{gpu: 4}}}}" for i in range(3)),
         # b05 (3 GPUs) waits for a node with 3 free; the lenders' victims free g0-2, g0-1 and one GPU of g0-0
         [J(f"b{i:02d}", "b", gpus=g, at=i) for i, g in enumerate([1, 1, 4, 1, 2, 3])]
         + [J("c0", "l0", at=100, gpus=3), J("z1", "l1", at=100, gpus=2), J("w2", "l2", at=100, gpus=4)], nodes=[(3, 4)],
         expect=expect_starts(c0=SOON, z1=SOON, w2=SOON),
         differs="before, consolidation moved two of b's jobs onto the node being freed for c0 and held another for b05, and w2 "
                 "waited until a job finished"),
    Case("pipelined jobs whose victims share a node each start where they claimed", "ours (KAI: a pipelined job is bound to what its victims release)",
         "  - {name: b, deserved: {gpu: 0}}\n" + "\n".join(f"  - {{name: l{i}, deserved: {{gpu: 4}}}}" for i in range(3)),
         [J(f"b{i:02d}", "b", gpus=g, at=i) for i, g in enumerate([1, 1, 1, 2, 2, 1, 2, 2, 1, 1, 2])]
         + [J("a0", "l0", at=100), J("w1", "l1", at=100, gpus=2), J("a2", "l2", at=101)], nodes=[(4, 4)],
         expect=expect_starts(a0=SOON, w1=SOON, a2=SOON + 1),
         differs="before, a2 (its victim still stopping on the same node) took the GPU freed for w1, and w1 preempted again"),
    Case("one large victim frees enough for several lenders: it alone is preempted", "ours (KAI: a preemptor is pipelined onto its victims)",
         "  - {name: b, deserved: {gpu: 0}}\n" + "\n".join(f"  - {{name: l{i}, deserved: {{gpu: 4}}}}" for i in range(4)),
         [J("big", "b", gpus=4, tasks=4)] + [J(f"w{i}", f"l{i}", at=100, gpus=2) for i in range(4)], nodes=[(4, 4)],
         expect=both(expect_starts(big=0, **{f"w{i}": SOON for i in range(4)}), expect_preempted("big", reason="Reclaim"))),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_scenario(case: Case):
    run(case)


def test_the_suite_names_its_sources():
    from . import test_conformance_kai, test_conformance_kueue

    every = test_conformance_kai.CASES + test_conformance_kueue.CASES + CASES
    assert all(c.source for c in every) and len(every) >= 100


def test_lenders_whose_demand_fits_the_nodes_start_within_a_grace_period():
    """Random federations of 2-4 nodes of 4 GPUs, filled by a borrower's jobs of 1, 2 and 4 GPUs;
    three lenders of 1-4 GPUs arrive within a second. Where their tasks can be packed on the nodes
    at all, each should start one grace period (and a cycle) after it arrived. On seed 5: 132
    cases, 396 lenders; before pipelining 182 of them started late, before the kept claims 6,
    now none. (Not every case is reachable: a lender that claimed first where its own victim was
    can leave a later one no whole node; seed 7 has two such lenders of 414.)"""
    import itertools
    import random

    def packs(sizes, nodes):
        return any(max(sum(s for s, n in zip(sizes, a, strict=True) if n == k) for k in range(nodes)) <= 4
                   for a in itertools.product(range(nodes), repeat=len(sizes)))

    rng, late, cases = random.Random(5), [], 0
    queues = "  - {name: b, deserved: {gpu: 0}}\n" + "\n".join(f"  - {{name: l{i}, deserved: {{gpu: 4}}}}" for i in range(3))
    for _ in range(150):
        nodes = rng.choice([2, 3, 4])
        borrower, used = [], 0
        while used < nodes * 4:
            g = min(rng.choice([1, 2, 4]), nodes * 4 - used)
            borrower.append(J(f"b{len(borrower):02d}", "b", gpus=g, at=len(borrower)))
            used += g
        lenders = [J(f"{rng.choice('acwxz')}{i}", f"l{i}", at=100 + rng.choice([0, 0, 1]), gpus=rng.choice([1, 2, 3, 4])) for i in range(3)]
        if not packs([j.gpus for j in lenders], nodes):
            continue
        cases += 1
        starts = simulate(Case("sweep", "", queues, borrower + lenders, nodes=[(nodes, 4)])).starts()
        late += [(j.id, j.at, j.gpus, starts.get(j.id)) for j in lenders if starts.get(j.id) is None or starts[j.id] > j.at + GRACE + 5]
    assert cases > 100 and not late, late
