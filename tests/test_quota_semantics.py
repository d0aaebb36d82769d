"""Quotas as people write them: a resource a queue's quota does not name is not limited by that
queue; a parent's unset guarantee (and deserved) is its children's sum. Before, a GPU-only quota
made every job "borrow" CPU and memory, so reclaim never started."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from federation.config import parse
from federation.errors import ConfigError
from federation.model import UNLIMITED, Resources

TWO_TEAMS = """
federation: {name: reclaim, timezone: UTC}
sites:
  - name: idc
    kind: idc
    provider: {kind: simulated}
    node_groups:
      - {name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 4}
queues:
  - {name: prod, deserved: {gpu: 16}}
  - {name: dev, deserved: {gpu: 16}}
policies: {preemption: {grace_s: 30}}
"""


def run_two_teams(tmp_path, config: str) -> list[dict]:
    """dev fills the 32 GPUs with 4-GPU jobs (which ask CPUs and memory, as real jobs do) from
    t = 0 to 7, then prod asks for 8 GPUs at 600; the events of `fedctl simulate`."""
    (tmp_path / "fed.yaml").write_text(config)
    lines = [{"id": f"dev-{i}", "submit_s": i, "queue": "dev", "tasks": 1, "gpus_per_task": 4, "cpus_per_task": 16,
              "memory_gib_per_task": 64, "duration_s": 19_000} for i in range(8)]
    lines.append({"id": "prod-1", "submit_s": 600, "queue": "prod", "tasks": 1, "gpus_per_task": 8, "cpus_per_task": 32,
                  "memory_gib_per_task": 128, "duration_s": 600})
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = subprocess.run([sys.executable, "-m", "federation.cli", "simulate", "--config", str(tmp_path / "fed.yaml"), "--trace",
                        str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "out"), "--no-html"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return [json.loads(x) for x in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]


def test_a_gpu_only_quota_reclaims_within_the_grace_through_fedctl_simulate(tmp_path):
    """The issue's case, as a new user writes it. prod waited 19,000 s before."""
    events = run_two_teams(tmp_path, TWO_TEAMS)
    [start] = [e["t"] for e in events if e["type"] == "start" and e["job"] == "prod-1"]
    assert start <= 600 + 30 + 10, start  # the grace, plus a cycle
    reclaimed = [e for e in events if e["type"] == "preempt"]
    assert len(reclaimed) == 2 and all(e["reason"] == "Reclaim" and e["job"].startswith("dev-") for e in reclaimed)


def queues(text: str) -> dict:
    return {q.name: q for q in parse(text).queues}


BASE = TWO_TEAMS.split("queues:")[0]


def test_a_resource_the_quota_does_not_name_is_not_limited_and_gpus_are_always_governed():
    qs = queues(BASE + """queues:
  - {name: gpu-only, deserved: {gpu: 8}}
  - {name: with-cpu, deserved: {gpu: 8, cpu: 64}}
  - {name: capped, capability: {gpu: 8}}
  - {name: nothing}
""")
    assert qs["gpu-only"].deserved == Resources(8000, UNLIMITED, UNLIMITED)
    assert qs["with-cpu"].deserved == Resources(8000, 64000, UNLIMITED)
    assert qs["capped"].deserved == Resources(0, UNLIMITED, UNLIMITED)  # GPUs it uses are all borrowed: reclaimable
    assert qs["nothing"].deserved == Resources(0, UNLIMITED, UNLIMITED)
    assert qs["nothing"].guarantee == Resources()


def test_a_parents_unset_guarantee_and_deserved_are_its_childrens_sums():
    qs = queues(BASE + """queues:
  - {name: research}
  - {name: nlp, parent: research, guarantee: {gpu: 4}, deserved: {gpu: 8}}
  - {name: cv, parent: research, guarantee: {gpu: 2}, deserved: {gpu: 8, cpu: 32}}
""")
    assert qs["research"].guarantee == Resources(6000, 0, 0)
    assert qs["research"].deserved.gpu_milli == 16000 and qs["research"].deserved.cpu_milli >= UNLIMITED


def test_a_parent_that_sets_its_guarantee_still_bounds_its_childrens():
    with pytest.raises(ConfigError, match="children's guarantees sum to 6, above this queue's 4"):
        parse(BASE + """queues:
  - {name: research, guarantee: {gpu: 4}, deserved: {gpu: 16}}
  - {name: nlp, parent: research, guarantee: {gpu: 4}, deserved: {gpu: 8}}
  - {name: cv, parent: research, guarantee: {gpu: 2}, deserved: {gpu: 8}}
""")


def test_fedctl_validate_explain_prints_what_each_queue_effectively_gets(tmp_path):
    (tmp_path / "fed.yaml").write_text(BASE + """queues:
  - {name: research}
  - {name: nlp, parent: research, guarantee: {gpu: 4}, deserved: {gpu: 8}, lending_limit: {gpu: 2}}
  - {name: cv, parent: research, deserved: {gpu: 8, cpu: 32}, capability: {gpu: 12}}
""")
    r = subprocess.run([sys.executable, "-m", "federation.cli", "validate", "--explain", str(tmp_path / "fed.yaml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows: dict = {}
    for line in r.stdout.splitlines():
        if line.split() and line.split()[0] in ("research", "nlp", "cv"):
            rows.setdefault(line.split()[0], line.split())  # its first row: GPUs
    # queue, resource, reserve, guarantee, deserved, capability: nlp keeps 6 of its 8 (it lends at most 2)
    assert rows["nlp"][1:6] == ["gpu", "6", "4", "8", "-"], r.stdout
    assert rows["cv"][1:6] == ["gpu", "0", "0", "8", "12"], r.stdout
    assert rows["research"][1:6] == ["gpu", "6", "4", "16", "-"], r.stdout
    assert "cpu" in r.stdout and "not limited" in r.stdout


CLASSES = BASE.replace("federation: {name: reclaim, timezone: UTC}", """federation: {name: reclaim, timezone: UTC}
priority_classes:
  - {name: online, value: 1000, preemptible: false}
  - {name: normal, value: 100, default: true}
  - {name: best-effort, value: 10}""") + """queues:
  - {name: serving, deserved: {gpu: 8}, allowed_priority_classes: [online, normal]}
  - {name: research, deserved: {gpu: 8}, allowed_priority_classes: [normal, best-effort]}
  - {name: nlp, parent: research, deserved: {gpu: 8}}
  - {name: scavenger, allowed_priority_classes: [best-effort]}
"""


def test_a_queue_takes_only_its_allowed_priority_classes_and_children_inherit_them(tmp_path):
    from federation.errors import BadSubmission
    from federation.runtime.controller import Controller
    from federation.store import Store

    from .test_controller_faults import FakeSite

    c = Controller(parse(CLASSES), Store(tmp_path / "s.db"), {"idc": FakeSite()})
    with pytest.raises(BadSubmission, match=r"priority: queue 'nlp' may use the priority classes \['normal', 'best-effort'\], not 'online'"):
        c.submit({"entrypoint": "x", "metadata": {"queue": "nlp", "priority": "online"}})
    assert c.submit({"entrypoint": "x", "submission_id": "s", "metadata": {"queue": "serving", "priority": "online"}}).id == "s"
    c.submit({"entrypoint": "x", "submission_id": "b", "metadata": {"queue": "scavenger"}})
    assert c._spec("b", c.store.get("b").request, 0.0).priority_class == "best-effort"  # the default class is not allowed there


def test_fedctl_simulate_refuses_a_trace_line_with_a_class_its_queue_may_not_use(tmp_path):
    (tmp_path / "fed.yaml").write_text(CLASSES)
    (tmp_path / "t.jsonl").write_text(json.dumps({"id": "a", "submit_s": 0, "queue": "nlp", "tasks": 1, "gpus_per_task": 1, "duration_s": 5,
                                                  "priority": "online"}) + "\n")
    r = subprocess.run([sys.executable, "-m", "federation.cli", "simulate", "--config", str(tmp_path / "fed.yaml"), "--trace", str(tmp_path / "t.jsonl"),
                        "--out", str(tmp_path / "out"), "--no-html"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "t.jsonl:1: priority:" in r.stderr and "may use the priority classes" in r.stderr, r.stderr


def test_an_unknown_allowed_class_is_named_by_validate():
    with pytest.raises(ConfigError, match=r"queues.0.allowed_priority_classes.1: unknown priority class 'urgent'"):
        parse(BASE + "queues:\n  - {name: q, deserved: {gpu: 1}, allowed_priority_classes: [normal, urgent]}\n")


def test_reclaim_waits_until_a_borrower_has_run_its_minimum_and_then_takes_it_at_once(tmp_path):
    """policies.preemption.reclaim_min_runtime_s: 1200. The youngest dev job (the least work to
    lose) started at t = 7, so reclaim may take it from 1207, and the simulator wakes for that."""
    events = run_two_teams(tmp_path, TWO_TEAMS.replace("preemption: {grace_s: 30}", "preemption: {grace_s: 30, reclaim_min_runtime_s: 1200}"))
    preempts = [e for e in events if e["type"] == "preempt"]
    assert len(preempts) == 2 and all(e["reason"] == "Reclaim" for e in preempts)
    assert 1200 <= min(e["t"] for e in preempts) <= 1207 + 1, preempts
    [start] = [e["t"] for e in events if e["type"] == "start" and e["job"] == "prod-1"]
    assert start <= 1207 + 30 + 10, start


def test_a_queue_runs_at_most_its_max_running_jobs_at_once_and_the_rest_wait(tmp_path):
    config = BASE + """queues:
  - {name: research, deserved: {gpu: 32}, max_running_jobs: 3}
  - {name: nlp, parent: research, deserved: {gpu: 16}}
  - {name: cv, parent: research, deserved: {gpu: 16}, max_running_jobs: 1}
"""
    (tmp_path / "fed.yaml").write_text(config)
    lines = [{"id": f"{q}-{i}", "submit_s": 0, "queue": q, "tasks": 1, "gpus_per_task": 1, "duration_s": 100} for q in ("nlp", "cv") for i in range(3)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = subprocess.run([sys.executable, "-m", "federation.cli", "simulate", "--config", str(tmp_path / "fed.yaml"), "--trace",
                        str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "out"), "--no-html"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    events = [json.loads(x) for x in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    running, most, cv_most = set(), 0, 0
    for e in events:
        if e["type"] == "start":
            running.add(e["job"])
        elif e["type"] == "finish":
            running.discard(e["job"])
        most = max(most, len(running))
        cv_most = max(cv_most, sum(1 for j in running if j.startswith("cv")))
    assert most == 3 and cv_most == 1  # 32 GPUs were free: only the limits held the jobs back
    assert sum(1 for e in events if e["type"] == "finish") == 6


def test_the_simulation_records_each_pending_reason_and_reports_why_work_waited(tmp_path):
    """Work that waited while GPUs stood idle, and why: here a capability keeps research at 8
    of 32 GPUs, so its other jobs wait for ExceedsCapability, and the report says how much."""
    events = run_two_teams(tmp_path, TWO_TEAMS.replace("- {name: dev, deserved: {gpu: 16}}", "- {name: dev, deserved: {gpu: 8}, capability: {gpu: 8}}"))
    reasons = [e for e in events if e["type"] == "pending"]
    assert {e["reason"] for e in reasons} == {"ExceedsCapability"} and {e["job"] for e in reasons} == {f"dev-{i}" for i in range(2, 8)}
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    waited = report["waited_gpu_hours_by_reason"]["ExceedsCapability"]
    # dev-2..7 (4 GPUs each) wait for the first pair to end at 19,000 s, dev-4..7 for the second pair, and so on
    assert waited == pytest.approx(4 * (2 * 19_000 + 2 * 38_000 + 2 * 57_000) / 3600, rel=0.01)


def test_every_pending_reason_the_code_gives_is_in_the_one_enumeration_with_its_meaning():
    import re

    from federation.reasons import MEANING, Reason

    from .conftest import ROOT

    given = set()
    for path in [*(ROOT / "federation").rglob("*.py"), *(ROOT / "policies").rglob("*.py")]:
        text = path.read_text()
        given |= set(re.findall(r'PendingReason\(\s*"([A-Za-z]+)"', text))
        given |= set(re.findall(r'code="([A-Za-z]+)"', text))
        given |= set(re.findall(r'reasons\[[^\]]+\] = \("([A-Za-z]+)"', text))
        given |= set(re.findall(r'_requeue\(row, "([A-Za-z]+)"', text))
    assert len(given) >= 12 and given <= set(Reason.__members__), sorted(given - set(Reason.__members__))
    assert set(MEANING) == set(Reason)


def test_the_simulator_stops_a_run_at_its_max_runtime_and_frees_its_gpus(tmp_path):
    (tmp_path / "fed.yaml").write_text(TWO_TEAMS)
    lines = [{"id": "capped", "submit_s": 0, "queue": "dev", "tasks": 4, "gpus_per_task": 8, "duration_s": 5000, "max_runtime_s": 100},
             {"id": "next", "submit_s": 1, "queue": "dev", "tasks": 4, "gpus_per_task": 8, "duration_s": 50}]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = subprocess.run([sys.executable, "-m", "federation.cli", "simulate", "--config", str(tmp_path / "fed.yaml"), "--trace",
                        str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "out"), "--no-html"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    events = [json.loads(x) for x in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    [done] = [e for e in events if e["type"] == "finish" and e["job"] == "capped"]
    assert done["t"] == 100 and done["failed"] == "MaxRuntimeExceeded"
    assert next(e["t"] for e in events if e["type"] == "start" and e["job"] == "next") == 100


def test_a_lending_limit_on_a_resource_nobody_deserves_holds_nothing_back():
    """A parent naming a CPU lending limit over children that name GPUs alone: its deserved CPU is
    unlimited (the children's sum), and a lending limit must not turn that into an unlimited hold."""
    from federation.quota import QuotaTree

    fed = parse(BASE + """queues:
  - {name: research, lending_limit: {cpu: 16}}
  - {name: nlp, parent: research, deserved: {gpu: 8}}
""")
    tree = QuotaTree(fed.queues, Resources.of(32, 256, 2048))
    assert tree.held["research"].cpu_milli == 0
    assert tree.check("nlp", Resources.of(4, 64, 256)).ok


def test_a_non_preemptible_job_is_admitted_only_within_its_queues_deserved_share():
    """KAI's rule, on non-preemptible allocation: what a queue (or an ancestor) runs of
    non-preemptible work stays within its deserved share, so what it uses above the share is
    always preemptible and reclaim can give lenders theirs back. Preemptible work borrowing
    around it (its own queue's or a sibling's) does not keep it out."""
    from federation.quota import QuotaTree

    fed = parse(BASE + """queues:
  - {name: org, deserved: {gpu: 24}}
  - {name: team, parent: org, deserved: {gpu: 8}}
  - {name: other, parent: org, deserved: {gpu: 16}}
""")
    tree = QuotaTree(fed.queues, Resources(32000, 256000, 2 << 20))
    tree.add("team", Resources(6000), preemptible=False)
    assert tree.check("team", Resources(2000), preemptible=False).ok  # 8 of its 8
    refused = tree.check("team", Resources(4000), preemptible=False)
    assert (refused.ok, refused.code, refused.free) == (False, "NonPreemptibleOverQuota", Resources(2000, UNLIMITED, UNLIMITED))
    assert "'team'" in refused.message
    assert tree.check("team", Resources(4000)).ok  # preemptible work borrows
    tree.add("team", Resources(4000))  # team now borrows, with preemptible work
    assert tree.check("team", Resources(2000), preemptible=False).ok  # still 8 of non-preemptible: it may run
    tree.add("other", Resources(17000), preemptible=False)  # (as after a window lowered its share) org runs 23 of its 24
    refused = tree.check("team", Resources(2000), preemptible=False)
    assert refused.code == "NonPreemptibleOverQuota" and "'org'" in refused.message
    tree.add("other", Resources(17000), -1, preemptible=False)
    tree.add("other", Resources(17000))  # the same, preemptible: the parent borrows, but reclaimably
    assert tree.check("team", Resources(2000), preemptible=False).ok


def test_the_simulator_retries_a_failed_run_after_the_live_controllers_back_off_and_gives_up_after_max_retries(tmp_path):
    """A trace's failed_runs fail as a site's FAILED runs do live; federation.retries decides for
    both shells: 10 s after the first failure, 20 s after the second, then no more retries."""
    (tmp_path / "fed.yaml").write_text(TWO_TEAMS)
    lines = [{"id": "flaky", "submit_s": 0, "queue": "dev", "tasks": 1, "gpus_per_task": 8, "duration_s": 500, "max_retries": 2,
              "failed_runs": 2, "fail_after_s": 60},
             {"id": "doomed", "submit_s": 0, "queue": "dev", "tasks": 1, "gpus_per_task": 8, "duration_s": 500, "max_retries": 1,
              "failed_runs": 2, "fail_after_s": 30}]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = subprocess.run([sys.executable, "-m", "federation.cli", "simulate", "--config", str(tmp_path / "fed.yaml"), "--trace",
                        str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "out"), "--no-html"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    events = [json.loads(x) for x in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    starts = {j: [e["t"] for e in events if e["type"] == "start" and e["job"] == j] for j in ("flaky", "doomed")}
    assert starts["flaky"] == [0, 70, 150]  # failed at 60 (+10 s), at 130 (+20 s), then runs its 500 s
    [done] = [e for e in events if e["type"] == "finish" and e["job"] == "flaky"]
    assert done["t"] == 650 and "failed" not in done
    assert starts["doomed"] == [0, 40]  # failed at 30, retried once after 10 s, failed again: it ends failed
    [end] = [e for e in events if e["type"] == "finish" and e["job"] == "doomed"]
    assert end["t"] == 70 and end["failed"] == "Failed"
    assert any(e["type"] == "pending" and e["job"] == "flaky" and e["reason"] == "RetryBackoff" for e in events)


def test_the_usage_kept_for_the_whole_federation_is_the_sum_of_its_top_level_queues():
    """Every check reads it, so it is kept as jobs start and end rather than summed each time."""
    import random

    from federation.quota import QuotaTree

    fed = parse(BASE + """queues:
  - {name: org, deserved: {gpu: 24}}
  - {name: team, parent: org, deserved: {gpu: 8}}
  - {name: other, parent: org, deserved: {gpu: 16}}
  - {name: solo, deserved: {gpu: 8}}
""")
    tree = QuotaTree(fed.queues, Resources.of(32, 256, 2048))
    rng, held = random.Random(3), []
    for _ in range(200):
        if held and rng.random() < 0.4:
            leaf, r = held.pop(rng.randrange(len(held)))
            tree.add(leaf, r, -1)
        else:
            leaf, r = rng.choice(["team", "other", "solo"]), Resources(rng.randrange(0, 4000, 500), rng.randrange(0, 8000), rng.randrange(0, 4096))
            tree.add(leaf, r)
            held.append((leaf, r))
        assert tree.root_usage == tree.usage["org"] + tree.usage["solo"]
