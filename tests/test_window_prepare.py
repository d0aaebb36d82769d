"""In the simulator, a window that raises a site-kept queue's guarantee finds it ready when it opens."""

from __future__ import annotations

import pytest

from federation.config import parse
from federation.jobs import make_job
from federation.simulation.engine import SimOptions, Simulator
from federation.simulation.report import build_report
from federation.simulation.traces import Trace, TraceJob

CONFIG = """
federation: {name: prep, timezone: UTC}
sites:
  - name: idc
    kind: idc
    provider: {kind: simulated}
    node_groups:
      - {name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 4}
queues:
  - {name: online, guarantee: {gpu: 0}, deserved: {gpu: 8}, sites: [idc]}
  - {name: research, deserved: {gpu: 24}}
  - {name: research-nlp, parent: research}
policies:
  preemption: {grace_s: 60}
  tidal:
    - name: day
      window: {start: "08:00", end: "20:00"PREPARE}
      queues:
        online: {guarantee: {gpu: 16}, deserved: {gpu: 16}}
        research: {deserved: {gpu: 16}}
"""


def run(prepare: str, online_sites: str = ", sites: [idc]"):
    f = parse(CONFIG.replace("PREPARE", prepare).replace(", sites: [idc]", online_sites))
    # at 06:00 four 8-GPU jobs fill the site for 4 h, in the child queue (its parent's quota covers it)
    trace = Trace([TraceJob(make_job(f, id=f"r{i}", queue="research-nlp", submit_s=6 * 3600 + i, gpus_per_task=8), 4 * 3600) for i in range(4)])
    res = Simulator(f, trace, SimOptions(seed=1)).run()
    return res, build_report(res, {}, 0.0)


@pytest.mark.parametrize("online_sites", [", sites: [idc]", ""], ids=["kept to the idc", "kept to no site"])
def test_the_raised_guarantee_is_idle_when_the_window_opens(online_sites):
    res, rep = run("", online_sites)  # default lead: max(grace 60 s, MIG drain 300 s) = 300 s
    preps = [e for e in res.events if e["type"] == "preempt"]
    assert [e["reason"] for e in preps] == ["WindowPrepare", "WindowPrepare"]  # 16 GPUs, two 8-GPU jobs
    assert all(e["t"] == 8 * 3600 - 300 for e in preps)
    assert rep["tidal"]["openings"] == 1 and rep["tidal"]["ready_share_min"] == 1.0
    assert all(r.finish_s is not None for r in res.jobs.values())  # the victims ran again later


def test_without_a_lead_the_window_opens_on_a_full_site():
    res, rep = run(", prepare_s: 0")
    assert not [e for e in res.events if e["type"] == "preempt"]  # online asks for nothing: no reclaim either
    assert rep["tidal"]["ready_share_min"] == 0.0
