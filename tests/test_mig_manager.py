"""The site MIG manager: what it re-slices, what it never touches, drains, and the day/night tide."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from federation.config import parse
from federation.jobs import make_job
from federation.mig.catalog import CATALOG, Instance, layout_problems
from federation.mig.manager import MigManager, gpu_layouts
from federation.mig.planner import table
from federation.model import Node, RunningJob, TaskPlacement
from federation.simulation.engine import SimOptions, Simulator
from federation.simulation.invariants import check
from federation.simulation.traces import generate, read_jsonl

CONFIG = """
federation: {name: m, timezone: UTC}
sites:
  - name: idc
    kind: idc
    provider: {kind: simulated}
    node_groups:
      - {name: a100, gpu_model: A100-80GB, gpus_per_node: 2, cpus_per_node: 64, memory_gib_per_node: 512, count: 2, mig: {enabled: true}}
queues:
  - {name: online, deserved: {gpu: 2}}
  - {name: train, deserved: {gpu: 2}}
policies:
  mig: {WARM}
  TIDAL
"""
NIGHT = datetime(2026, 1, 5, 2, 0)


def fed(warm="", tidal=""):
    return parse(CONFIG.replace("WARM", warm).replace("TIDAL", tidal))


def nodes(layouts=None, schedulable=True):
    """Two 2-GPU nodes; `layouts` maps (node index, gpu) to [(profile, start)]."""
    out = []
    for i in range(2):
        lay = tuple((g, p, s) for (n, g), insts in (layouts or {}).items() if n == i for p, s in insts)
        out.append(Node(f"idc/a100-{i}", "idc", "a100", "A100-80GB", 2, 64000, 512 * 1024, mig_layout=tuple(sorted(lay)), schedulable=schedulable))
    return out


def mig_job(f, id, tasks=1, profile="1g.10gb"):
    return make_job(f, id=id, queue="online", submit_s=0.0, tasks=tasks, mig_profile=profile)


def gpu_job(f, id, gpus=1, tasks=1):
    return make_job(f, id=id, queue="train", submit_s=0.0, tasks=tasks, gpus_per_task=gpus)


def running(spec, *placements):
    return RunningJob(spec, "idc", tuple(placements), 0.0)


def test_a_waiting_mig_job_gets_an_instance_on_an_idle_gpu():
    f = fed()
    d = MigManager(f, "idc").decide(0.0, NIGHT, nodes(), [], [mig_job(f, "m", tasks=2)])
    assert len(d.reconfigure) == 1
    r = d.reconfigure[0]
    assert [p for p, _ in r.layout].count("1g.10gb") >= 2 and r.kept == ()


def test_a_mig_job_of_a_queue_kept_to_other_sites_slices_nothing_here():
    f = parse(CONFIG.replace("WARM", "").replace("TIDAL", "").replace("{name: online, deserved: {gpu: 2}}", "{name: online, deserved: {gpu: 2}, sites: [elsewhere]}")
              .replace("queues:", """  - name: elsewhere
    kind: idc
    provider: {kind: simulated}
    node_groups:
      - {name: a30, gpu_model: A30-24GB, gpus_per_node: 1, cpus_per_node: 8, memory_gib_per_node: 64, count: 1, mig: {enabled: true}}
queues:"""))
    job = make_job(f, id="m", queue="online", submit_s=0.0, mig_profile="1g.10gb")
    assert MigManager(f, "idc").decide(0.0, NIGHT, nodes(), [], [job]).reconfigure == ()


def test_sliced_gpus_are_extended_before_a_whole_gpu_is_sliced():
    f = fed()
    lay = {(0, 0): [("1g.10gb", 0)]}
    busy = running(mig_job(f, "b"), TaskPlacement("idc/a100-0", (0,), mig=(0, "1g.10gb", 0)))
    d = MigManager(f, "idc").decide(0.0, NIGHT, nodes(lay), [busy], [mig_job(f, "m")])
    assert [(r.node, r.gpu) for r in d.reconfigure] == [("idc/a100-0", 0)]
    r = d.reconfigure[0]
    assert ("1g.10gb", 0) in r.layout and r.kept == (("1g.10gb", 0),) and len(r.layout) == 2


def test_a_gpu_with_whole_gpu_work_is_never_sliced():
    f = fed()
    busy = [running(gpu_job(f, f"w{i}", gpus=2), TaskPlacement(f"idc/a100-{i}", (0, 1))) for i in range(2)]
    d = MigManager(f, "idc").decide(0.0, NIGHT, nodes(), busy, [mig_job(f, "m")])
    assert d.reconfigure == ()
    assert d.unmet == {"1g.10gb": 1}


def test_a_busy_instance_is_kept_when_whole_gpu_work_waits():
    f = fed()
    lay = {(0, 0): [("1g.10gb", 0), ("1g.10gb", 1)], (0, 1): [("1g.10gb", 0)]}
    busy = running(mig_job(f, "b"), TaskPlacement("idc/a100-0", (0,), mig=(0, "1g.10gb", 1)))
    d = MigManager(f, "idc").decide(0.0, NIGHT, nodes(lay), [busy], [gpu_job(f, "t", gpus=2, tasks=2)])
    # GPU 1 of node 0 has no busy instance: it goes back whole; GPU 0 keeps its busy instance
    assert [(r.node, r.gpu, r.layout) for r in d.reconfigure] == [("idc/a100-0", 1, ())]


def test_the_warm_pool_keeps_idle_instances_ready_but_yields_to_waiting_whole_gpu_work():
    f = fed(warm="warm_pool: {idc: {1g.10gb: 3}}")
    m = MigManager(f, "idc")
    d = m.decide(0.0, NIGHT, nodes(), [], [])
    assert sum(len(r.layout) for r in d.reconfigure) >= 3
    lay = {(0, 0): [("1g.10gb", s) for s in range(3)]}
    assert m.decide(0.0, NIGHT, nodes(lay), [], []).reconfigure == ()  # the pool is full: nothing to do
    d = m.decide(0.0, NIGHT, nodes(lay), [], [gpu_job(f, "t", gpus=2, tasks=2)])
    assert [(r.gpu, r.layout) for r in d.reconfigure] == [(0, ())]


def test_a_tidal_window_slices_gpus_one_drain_period_before_it_starts():
    tidal = """tidal:
    - name: day
      window: {start: "08:00", end: "20:00"}
      mig: {idc: {a100: {layout: small, gpus: 2}}}"""
    f = fed(warm="layouts: {small: {1g.10gb: 7}}, reconfigure_drain_s: 600", tidal=tidal)
    m = MigManager(f, "idc")
    assert m.decide(0.0, datetime(2026, 1, 5, 7, 0), nodes(), [], []).reconfigure == ()
    d = m.decide(0.0, datetime(2026, 1, 5, 7, 55), nodes(), [], [])
    assert sorted(len(r.layout) for r in d.reconfigure) == [7, 7]
    # in the window, the sliced GPUs are not given back to waiting training
    lay = {(0, 0): [("1g.10gb", s) for s in range(7)], (0, 1): [("1g.10gb", s) for s in range(7)]}
    assert m.decide(0.0, datetime(2026, 1, 5, 12, 0), nodes(lay), [], [gpu_job(f, "t", gpus=2, tasks=2)]).reconfigure == ()
    # after it, they are
    d = m.decide(0.0, datetime(2026, 1, 5, 21, 0), nodes(lay), [], [gpu_job(f, "t", gpus=2, tasks=2)])
    assert sorted((r.gpu, r.layout) for r in d.reconfigure) == [(0, ()), (1, ())]


def test_a_drain_cordons_the_least_busy_node_and_ends_after_the_drain_period():
    f = fed(warm="reconfigure_drain_s: 300")
    m = MigManager(f, "idc")
    lay = {(1, 1): [("1g.10gb", 0)]}
    busy = [running(gpu_job(f, "w0", gpus=2), TaskPlacement("idc/a100-0", (0, 1))),
            running(gpu_job(f, "w1"), TaskPlacement("idc/a100-1", (0,))),
            running(mig_job(f, "b"), TaskPlacement("idc/a100-1", (1,), mig=(1, "1g.10gb", 0)))]
    big = [mig_job(f, "m", profile="7g.80gb")]  # fits on no GPU as they are
    d = m.decide(0.0, NIGHT, nodes(lay), busy, big)
    assert d.cordon == ("idc/a100-1",) and d.reconfigure == ()  # one whole-busy GPU, against two
    cordoned = nodes(lay)
    cordoned[1] = Node(cordoned[1].name, "idc", "a100", "A100-80GB", 2, 64000, 512 * 1024, mig_layout=cordoned[1].mig_layout, schedulable=False)
    assert m.decide(100.0, NIGHT, cordoned, busy, big).uncordon == ()
    assert m.decide(300.0, NIGHT, cordoned, busy, big).uncordon == ("idc/a100-1",)
    # it rests one drain period before draining again
    assert m.decide(400.0, NIGHT, nodes(lay), busy, big).cordon == ()
    assert m.decide(600.0, NIGHT, nodes(lay), busy, big).cordon == ("idc/a100-1",)


def test_a_drain_ends_as_soon_as_the_demand_is_met():
    f = fed()
    m = MigManager(f, "idc")
    busy = [running(gpu_job(f, f"w{i}", gpus=2), TaskPlacement(f"idc/a100-{i}", (0, 1))) for i in range(2)]
    assert m.decide(0.0, NIGHT, nodes(), busy, [mig_job(f, "m")]).cordon == ("idc/a100-0",)
    assert m.decide(10.0, NIGHT, nodes(), busy, []).uncordon == ("idc/a100-0",)


layout_choice = st.sampled_from(table("A100-80GB").layouts[:400])


@settings(max_examples=60, deadline=None)
@given(layouts=st.lists(layout_choice, min_size=4, max_size=4), busy_bits=st.lists(st.booleans(), min_size=28, max_size=28),
       whole_busy=st.lists(st.booleans(), min_size=4, max_size=4), want=st.dictionaries(
           st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]), st.integers(1, 6), max_size=3),
       train=st.integers(0, 4))
def test_every_reconfiguration_is_valid_and_touches_no_work(layouts, busy_bits, whole_busy, want, train):
    f = fed(warm="warm_pool: {idc: {1g.10gb: 2}}")
    cur = {(k // 2, k % 2): list(lay) for k, lay in enumerate(layouts)}
    # a GPU with instances cannot run whole-GPU work
    whole_busy = [w and not layouts[k] for k, w in enumerate(whole_busy)]
    run, bits = [], iter(busy_bits)
    for (n, g), insts in cur.items():
        for p, s in insts:
            if next(bits, False):
                run.append(running(mig_job(f, f"b{n}{g}{s}", profile=p), TaskPlacement(f"idc/a100-{n}", (g,), mig=(g, p, s))))
        if whole_busy[n * 2 + g]:
            run.append(running(gpu_job(f, f"w{n}{g}"), TaskPlacement(f"idc/a100-{n}", (g,))))
    waiting = [mig_job(f, f"m{p}", tasks=c, profile=p) for p, c in want.items()] + ([gpu_job(f, "t", gpus=1, tasks=train)] if train else [])
    ns = nodes(cur)
    d = MigManager(f, "idc").decide(0.0, NIGHT, ns, run, waiting)
    busy_inst = {(p.node, p.mig) for r in run for p in r.placements if p.mig}
    seen = set()
    for r in d.reconfigure:
        assert (r.node, r.gpu) not in seen
        seen.add((r.node, r.gpu))
        assert not layout_problems(CATALOG["A100-80GB"], [Instance(p, s) for p, s in r.layout])
        n = int(r.node[-1])
        assert not whole_busy[n * 2 + r.gpu], "a GPU running whole-GPU work was re-sliced"
        for p, s in gpu_layouts(ns[n]).get(r.gpu, ()):
            if (r.node, (r.gpu, p, s)) in busy_inst:
                assert (p, s) in r.layout and (p, s) in r.kept, "a busy instance was moved or destroyed"


def test_the_day_and_night_tide_in_the_simulator(tmp_path: Path):
    """Inference on 1g slices by day, training on whole GPUs at night (configs/mig-tide.yaml): the
    event stream passes the independent checker, GPUs are sliced and given back whole, and the
    warm pool and the day window avoid cold starts that a bare MIG manager has."""
    base = Path(__file__).parent.parent / "configs" / "mig-tide.yaml"
    trace = tmp_path / "tide.jsonl"
    # the config's own command: two days, so that training waits for whole GPUs on a night
    recs = generate({"inference": "online", "training": "research", "batch": "research"}, jobs=600, days=2, seed=3, inference_mig="1g.10gb")
    trace.write_text("".join(json.dumps(r) + "\n" for r in recs))
    text = base.read_text()
    bare = text.split("  tidal:")[0] + "  mig:\n    layouts:\n      inference-small: {1g.10gb: 7}\n"
    out = {}
    for name, cfg in (("tide", text), ("bare", bare)):
        f = parse(cfg)
        res = Simulator(f, read_jsonl(trace, f), SimOptions(seed=1)).run()
        inv = check(res.events, f)
        assert inv["mig_violations"] == 0 and inv["overcommitted_nodes"] == 0 and inv["partial_gang_starts"] == 0
        assert all(r.finish_s is not None for r in res.jobs.values())
        shapes = [len(e["layout"]) for e in res.events if e["type"] == "mig_reconfigure"]
        out[name] = (res.mig, shapes)
    tide, shapes = out["tide"]
    assert tide["reconfigurations"] == len(shapes) > 0
    assert 0 in shapes and max(shapes) == 7  # given back whole at night, sliced in seven by day
    assert tide["warm_starts"] + tide["cold_starts"] == sum(1 for r in recs if r.get("mig_profile"))
    assert tide["cold_starts"] < out["bare"][0]["cold_starts"]
