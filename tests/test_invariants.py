"""The independent checker catches each violation in a broken event stream."""

from __future__ import annotations

from pathlib import Path

from federation.config import load
from federation.simulation.invariants import check

FED = load(Path(__file__).parent / "data" / "small.yaml")


def node(name, site="idc", gpus=8):
    return {"t": 0.0, "type": "node_up", "site": site, "node": name, "gpus": gpus, "gpu_model": "A100-80GB", "cpu_milli": 64000, "memory_mib": 512 * 1024}


def submit(j, queue="train", tasks=1, gpu_milli=1000, t=0.0, min_tasks=None):
    return {"t": t, "type": "submit", "job": j, "queue": queue, "tasks": tasks, "min_tasks": min_tasks, "gpu_milli_per_task": gpu_milli,
            "cpu_milli_per_task": 0, "memory_mib_per_task": 0, "mig_profile": None, "priority": "normal"}


def admit(j, placements, t=0.0, site="idc"):
    return {"t": t, "type": "admit", "job": j, "site": site, "placements": placements}


CLEAN = [node("n0"), node("n1"), submit("a", tasks=2), admit("a", [{"node": "n0", "gpus": [0]}, {"node": "n1", "gpus": [0]}]),
         {"t": 5.0, "type": "finish", "job": "a"}]


def test_a_clean_stream_has_no_violations():
    assert check(CLEAN, FED) == {"partial_gang_starts": 0, "capability_violations": 0, "guarantee_violations_s": 0.0, "overcommitted_nodes": 0, "mig_violations": 0}


def test_a_partial_gang_start_is_caught():
    events = [node("n0"), submit("g", tasks=3), admit("g", [{"node": "n0", "gpus": [0]}, {"node": "n0", "gpus": [1]}])]
    assert check(events, FED)["partial_gang_starts"] == 1


def test_a_gang_spanning_sites_is_caught():
    events = [node("n0"), node("c0", site="cloud"), submit("g", tasks=2), admit("g", [{"node": "n0", "gpus": [0]}, {"node": "c0", "gpus": [0]}])]
    assert check(events, FED)["partial_gang_starts"] == 1


def test_an_overcommitted_gpu_is_caught():
    events = [node("n0"), submit("a"), submit("b"), admit("a", [{"node": "n0", "gpus": [3]}]), admit("b", [{"node": "n0", "gpus": [3]}])]
    assert check(events, FED)["overcommitted_nodes"] == 1


def test_shared_gpus_overcommitted_by_milli_are_caught():
    events = [node("n0"), submit("a", gpu_milli=600), submit("b", gpu_milli=600),
              admit("a", [{"node": "n0", "gpus": [0], "gpu_milli": 600}]), admit("b", [{"node": "n0", "gpus": [0], "gpu_milli": 600}])]
    assert check(events, FED)["overcommitted_nodes"] == 1


def test_a_gpu_index_the_node_does_not_have_is_caught():
    events = [node("n0", gpus=2), submit("a"), admit("a", [{"node": "n0", "gpus": [5]}])]
    assert check(events, FED)["overcommitted_nodes"] == 1


def test_a_capability_violation_is_caught():
    events = [node(f"n{i}") for i in range(9)] + [submit("big", tasks=9, gpu_milli=8000),
                                                  admit("big", [{"node": f"n{i}", "gpus": list(range(8))} for i in range(9)])]
    assert check(events, FED)["capability_violations"] == 1  # train's capability is 64 GPUs


def test_a_guarantee_left_unserved_beyond_grace_is_measured():
    events = [node("n0"), submit("o", queue="online", gpu_milli=2000, t=0.0), {"t": 100.0, "type": "node_up", **{k: v for k, v in node("n1").items() if k not in ("t", "type")}},
              admit("o", [{"node": "n0", "gpus": [0, 1]}], t=100.0)]
    # online's guarantee is 4 GPUs and its 2-GPU job waited 100 s; grace is 60 s
    assert check(events, FED)["guarantee_violations_s"] == 40.0


def test_a_released_gpu_can_be_used_again():
    events = [node("n0"), submit("a"), submit("b"), admit("a", [{"node": "n0", "gpus": [0]}]), {"t": 1.0, "type": "finish", "job": "a"},
              admit("b", [{"node": "n0", "gpus": [0]}], t=1.0)]
    assert check(events, FED)["overcommitted_nodes"] == 0


def mig_job(j, t=0.0):
    return {**submit(j, t=t, gpu_milli=143), "mig_profile": "1g.10gb"}


def reslice(n, gpu, layout, t=0.0):
    return {"t": t, "type": "mig_reconfigure", "site": "idc", "node": n, "gpu": gpu, "layout": [{"profile": p, "start": s} for p, s in layout]}


def ready(n, gpu, t=1.0):
    return {"t": t, "type": "mig_ready", "site": "idc", "node": n, "gpu": gpu}


def on_instance(j, n, gpu, start, t=2.0):
    return admit(j, [{"node": n, "gpus": [gpu], "mig": {"gpu": gpu, "profile": "1g.10gb", "start": start}}], t=t)


SLICED = [node("n0"), reslice("n0", 0, [("1g.10gb", 0), ("1g.10gb", 1)]), ready("n0", 0), mig_job("m")]


def test_a_clean_mig_stream_has_no_violations():
    events = [*SLICED, on_instance("m", "n0", 0, 1), {"t": 3.0, "type": "finish", "job": "m"},
              reslice("n0", 0, [], t=4.0), ready("n0", 0, t=5.0), submit("w", t=5.0), admit("w", [{"node": "n0", "gpus": [0]}], t=6.0)]
    assert check(events, FED)["mig_violations"] == 0


def test_a_task_on_an_instance_that_does_not_exist_is_caught():
    assert check([*SLICED, on_instance("m", "n0", 0, 3)], FED)["mig_violations"] == 1


def test_a_task_on_an_instance_still_being_created_is_caught():
    events = [node("n0"), reslice("n0", 0, [("1g.10gb", 0)]), mig_job("m"), on_instance("m", "n0", 0, 0, t=0.5)]
    assert check(events, FED)["mig_violations"] == 1


def test_destroying_a_busy_instance_is_caught():
    events = [*SLICED, on_instance("m", "n0", 0, 1), reslice("n0", 0, [("1g.10gb", 0)], t=3.0)]
    assert check(events, FED)["mig_violations"] == 1


def test_an_invalid_layout_is_caught():
    events = [node("n0"), reslice("n0", 0, [("3g.40gb", 0), ("4g.40gb", 0)])]  # they overlap
    assert check(events, FED)["mig_violations"] == 1


def test_slicing_a_gpu_in_use_whole_or_using_a_sliced_gpu_whole_is_caught():
    whole_then_sliced = [node("n0"), submit("w"), admit("w", [{"node": "n0", "gpus": [0]}]), reslice("n0", 0, [("1g.10gb", 0)], t=1.0)]
    assert check(whole_then_sliced, FED)["mig_violations"] == 1
    sliced_then_whole = [*SLICED, submit("w", t=1.0), admit("w", [{"node": "n0", "gpus": [0]}], t=2.0)]
    assert check(sliced_then_whole, FED)["mig_violations"] == 1
