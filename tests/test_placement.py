"""Core placement strategies on small clusters where the right answer is obvious."""

from __future__ import annotations

from dataclasses import replace

from federation.cluster import ClusterState
from federation.model import Node, Resources, TaskPlacement
from federation.placement import fitting, place_gang
from policies.placement import FragmentationAware, Shape, gpu_fragment, make_strategy

from .builders import job


def nodes(*free_gpus: int, racks: int = 1) -> list[Node]:
    return [Node(f"n{i}", "idc", "g", "A100-80GB", 8, 64_000, 512 * 1024, rack=f"r{i % racks}") for i in range(len(free_gpus))]


def state_with_used(used: list[int]) -> ClusterState:
    st = ClusterState(nodes(*used))
    for i, u in enumerate(used):
        if u:
            st.apply(job(f"pre{i}", "a", gpus=u), [TaskPlacement(f"n{i}", tuple(range(u)))])
    return st


def test_bestfit_puts_a_task_on_the_fullest_node_that_fits():
    st = state_with_used([0, 6, 4])
    placed = place_gang(st, job("j", "a", gpus=2), "idc", make_strategy("bestfit"))
    assert placed[0].node == "n1"


def test_spread_puts_a_task_on_the_emptiest_node():
    st = state_with_used([0, 6, 4])
    placed = place_gang(st, job("j", "a", gpus=2), "idc", make_strategy("spread"))
    assert placed[0].node == "n0"


def test_binpack_prefers_the_most_allocated_node():
    st = state_with_used([2, 5, 0])
    placed = place_gang(st, job("j", "a", gpus=1), "idc", make_strategy("binpack"))
    assert placed[0].node == "n1"


def test_a_gang_stays_in_one_rack_when_one_rack_holds_it():
    st = ClusterState(nodes(0, 0, 0, 0, racks=2))
    placed = place_gang(st, job("g", "a", tasks=2, gpus=8), "idc", make_strategy("bestfit"))
    assert len({st.nodes[p.node].node.rack for p in placed}) == 1


def test_a_failed_gang_leaves_the_cluster_as_it_was():
    st = state_with_used([4, 4])
    before = {n: list(s.gpu_free) for n, s in st.nodes.items()}
    assert place_gang(st, job("g", "a", tasks=3, gpus=4), "idc", make_strategy("bestfit")) is None
    assert {n: list(s.gpu_free) for n, s in st.nodes.items()} == before


def test_gpu_fragment_matches_the_fgd_definition():
    whole2 = Shape(1000, 2)
    assert gpu_fragment([1000, 1000, 500, 0], 10_000, 10_000, whole2) == 500  # partial GPUs only
    assert gpu_fragment([1000, 500, 500, 0], 10_000, 10_000, whole2) == 2000  # cannot fit: all free
    assert gpu_fragment([1000, 200], 10_000, 10_000, Shape(300, 1)) == 200
    assert gpu_fragment([1000, 200], 0, 10_000, Shape(300, 1, cpu_milli=1000)) == 1200  # no CPU: all free


def test_fragmentation_aware_shares_a_used_gpu_rather_than_break_a_whole_one():
    st = ClusterState(nodes(0))
    st.apply(job("pre", "a", gpus=0.5), [TaskPlacement("n0", (3,), gpu_milli=500)])
    strat = FragmentationAware(((Shape(1000, 1), 0.7), (Shape(400, 1), 0.3)))
    placed = place_gang(st, job("s", "a", gpus=0.4), "idc", strat)
    assert placed[0].gpus == (3,) and placed[0].gpu_milli == 400


def test_a_mig_task_takes_a_free_instance_of_its_profile():
    n = Node("m0", "idc", "g", "A100-80GB", 1, 64_000, 512 * 1024, mig_layout=((0, "3g.40gb", 0), (0, "1g.10gb", 4)))
    st = ClusterState([n])
    j = job("m", "a", gpus=0.142)
    j = replace(j, mig_profile="1g.10gb", per_task=Resources(143, 0, 0))
    placed = place_gang(st, j, "idc", make_strategy("fragmentation-aware"))
    assert placed[0].mig == (0, "1g.10gb", 4)
    assert place_gang(st, j, "idc", make_strategy("fragmentation-aware")) is None  # the only one is taken


def test_gpu_fragment_counts_all_free_gpu_of_a_model_the_shape_cannot_run_on():
    pinned = Shape(1000, 1, gpu_models=("H100-80GB",))
    assert gpu_fragment([1000, 1000], 0, 0, pinned, "A100-80GB") == 2000
    assert gpu_fragment([1000, 1000], 0, 0, pinned, "H100-80GB") == 0
    assert gpu_fragment([1000, 500], 10_000, 0, Shape(0, 0)) == 1500  # a CPU-only task uses no free GPU


def test_fragmentation_aware_keeps_the_gpus_a_pinned_workload_needs_for_it():
    # Half the mix runs on H100s alone; a task that can run anywhere goes to the A100 node, though
    # the H100 node comes first by name and bestfit would call them equal.
    h100 = Node("a-h100", "idc", "g", "H100-80GB", 2, 64_000, 512 * 1024)
    a100 = Node("b-a100", "idc", "g", "A100-80GB", 2, 64_000, 512 * 1024)
    mix = ((Shape(1000, 1, gpu_models=("H100-80GB",)), 0.5), (Shape(1000, 1), 0.5))
    placed = place_gang(ClusterState([h100, a100]), job("any", "a", gpus=1), "idc", FragmentationAware(mix))
    assert placed[0].node == "b-a100"
    assert place_gang(ClusterState([h100, a100]), job("any", "a", gpus=1), "idc", make_strategy("bestfit"))[0].node == "a-h100"


def test_the_observed_mix_covers_most_tasks_and_counts_cpu_only_ones():
    from policies.placement import workload_mix

    jobs = [job(f"w{i}", "a", gpus=1) for i in range(60)] + [job(f"s{i}", "a", gpus=0.25) for i in range(30)]
    jobs += [job(f"c{i}", "a", gpus=0, cpu=4) for i in range(8)] + [job("rare", "a", gpus=3), job("rarer", "a", gpus=5)]
    mix = dict(workload_mix(jobs))
    # FGD's target workload: the most common shapes that make up 95% of the tasks
    assert set(mix) == {Shape(1000, 1), Shape(250, 1), Shape(0, 0, cpu_milli=4000)}
    assert mix[Shape(1000, 1)] == 60 / 98


def test_racks_named_per_node_group_reach_placement_live_and_simulated():
    """Two groups named for their racks, in the config's nodes both shells build
    (federation.inventory): a two-node gang goes to the smallest rack that holds it."""
    from federation.config import parse
    from federation.inventory import config_nodes

    fed = parse("""
federation: {name: racks, timezone: UTC}
sites:
  - name: idc
    kind: idc
    node_groups:
      - {name: row1, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 3, rack: r1}
      - {name: row2, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 3, rack: r2}
queues: [{name: q}]
""", "racks.yaml")
    nodes = config_nodes(fed)
    assert {n.name: n.rack for n in nodes} == {**{f"idc/row1-{i}": "r1" for i in range(3)}, **{f"idc/row2-{i}": "r2" for i in range(3)}}
    st = ClusterState(nodes)
    st.apply(job("pre", "q", gpus=8), [TaskPlacement("idc/row1-0", tuple(range(8)))])
    placed = place_gang(st, job("g", "q", tasks=2, gpus=8), "idc", make_strategy("bestfit"))
    assert {p.node for p in placed} == {"idc/row1-1", "idc/row1-2"}  # the smallest rack that holds it; r2 stays whole


def test_a_kept_state_places_as_one_built_afresh_and_keeps_its_counts_exact():
    """The simulator keeps one ClusterState through a run; the live controller builds one each
    cycle. Jobs come and go at random on a kept state: after each step, the next placement, the
    groups and the free GPUs counted per site are those of a state built afresh from what runs."""
    import random

    from federation.holds import free_gpu_milli

    rng = random.Random(5)
    ns = [Node(f"n{i:02d}", "idc" if i < 12 else "edge", "g", "A100-80GB", 8, 64_000, 512 * 1024, rack=f"r{i % 3}") for i in range(18)]
    kept = ClusterState(ns)
    running: dict[str, tuple] = {}
    strategy = make_strategy("fragmentation-aware", ((Shape(1000, 1), 0.5), (Shape(500, 1), 0.3), (Shape(1000, 4), 0.2)))
    for step in range(300):
        if running and rng.random() < 0.45:
            jid = rng.choice(sorted(running))
            spec, placed = running.pop(jid)
            kept.apply(spec, placed, -1)
        else:
            gpus = rng.choice([0.5, 1, 2, 4, 8])
            spec = job(f"j{step}", "a", gpus=gpus, tasks=rng.choice([1, 1, 2]))
            site = rng.choice(["idc", "edge"])
            fresh = ClusterState(ns)
            for s, p in running.values():
                fresh.apply(s, p)
            want = place_gang(fresh, spec, site, strategy)
            placed = place_gang(kept, spec, site, strategy)
            assert placed == want, step
            if placed is not None:
                running[spec.id] = (spec, placed)
        scan = {s: sum(st.free_gpu_milli for st in kept.nodes.values() if st.node.site == s) for s in ("idc", "edge")}
        assert {s: free_gpu_milli(kept, frozenset({s}), mig=False) for s in scan} == scan


def test_the_index_of_free_states_that_fit_a_shape_stays_exact_as_nodes_change():
    """Placement walks only the free states that fit a task's shape (`fitting`, kept per site and
    shape and brought up to date from the states that appeared since). Through random placements,
    releases and dry-run shifts undone, and past the points where a site's list of states is
    started again, it holds exactly the states a full scan finds, with the same task counts."""
    import random

    from federation.cluster import tasks_that_fit

    rng = random.Random(11)
    ns = [Node(f"n{i:02d}", "idc", "g", "A100-80GB", 8, 64_000, 512 * 1024, rack=f"r{i % 2}") for i in range(10)]
    c = ClusterState(ns)
    shapes = [job(f"s{g}-{t}", "a", gpus=g, cpu=cpu, tasks=t) for g, t, cpu in ((0.3, 1, 1), (0.5, 1, 0), (1, 1, 8), (2, 2, 0), (4, 1, 0), (8, 1, 0), (0, 1, 16))]
    running, lists = [], set()
    for step in range(600):
        if running and rng.random() < 0.45:
            spec, placed = running.pop(rng.randrange(len(running)))
            c.apply(spec, placed, -1)
        else:
            spec = job(f"j{step}", "a", gpus=rng.choice([0.25, 0.3, 0.5, 0.7, 1, 2]), cpu=rng.choice([0, 2, 6]))
            placed = place_gang(c, spec, "idc", make_strategy("bestfit"))
            if placed is not None:
                running.append((spec, placed))
        if running and step % 7 == 0:  # a dry run: victims off, then back
            c.restore(c.shift([(s, p, -1) for s, p in running[:3]]))
        lists.add(id(c.site_added["idc"]))
        states = c.site_groups["idc"]
        for shape in shapes:
            want = {fk: k for fk, sigs in states.items() if (k := tasks_that_fit(shape, c.nodes[c.groups[next(iter(sigs))][0]], shape.tasks))}
            assert {fk: k for fk, k in fitting(c, "idc", shape).items() if fk in states} == want, (step, shape.id)
    assert len(lists) > 1  # the site's list of states was started again at least once


def test_a_gpu_task_follows_fgds_rule_and_a_cpu_only_one_goes_where_the_fewest_gpus_are_free():
    # With whole GPUs alone in the mix, a whole-GPU task on n0 (8 free) or n1 (2 free) removes no
    # fragmentation: FGD's scores tie, and FGD's rule takes the first node by name. A CPU-only
    # task ties too, and takes the node with the fewest free GPUs, so n0's free GPUs keep their CPUs.
    mix = ((Shape(1000, 1), 0.8), (Shape(0, 0, cpu_milli=4000), 0.2))
    assert place_gang(state_with_used([0, 6]), job("g", "a", gpus=1), "idc", FragmentationAware(mix))[0].node == "n0"
    assert place_gang(state_with_used([0, 6]), job("c", "a", gpus=0, cpu=4), "idc", FragmentationAware(mix))[0].node == "n1"
    # where the mix pins GPU models, FGD's rule places the CPU-only task too
    pinned = ((Shape(1000, 1, gpu_models=("A100-80GB",)), 0.8), (Shape(0, 0, cpu_milli=4000), 0.2))
    assert place_gang(state_with_used([0, 6]), job("c", "a", gpus=0, cpu=4), "idc", FragmentationAware(pinned))[0].node == "n0"
