"""The weekly demand profile on synthetic tides, and the simulator's forecast pre-warm."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from federation.config import parse
from federation.simulation.engine import SimOptions, Simulator
from federation.simulation.traces import read_jsonl
from policies.forecast import HOURS, WeeklyProfile, held_out_error, hourly, learn


def tide(weeks: int, seed: int, noise: float = 1.0, drift: float = 0.0) -> list[float]:
    """A workday tide: a daytime peak on weekdays, low nights and weekends, with noise."""
    rng = random.Random(seed)
    out = []
    for h in range(weeks * HOURS):
        day, hour = (h // 24) % 7, h % 24
        peak = (12 if day < 5 else 3) * (1 + drift * h / HOURS)
        out.append(max(0.0, 2 + peak * max(0.0, math.sin((hour - 7) / 12 * math.pi)) + rng.gauss(0, noise)))
    return out


def test_the_profile_learns_a_weekly_tide_and_beats_the_last_hour_on_held_out_days():
    train, test = tide(3, seed=1), tide(1, seed=2)
    p = learn({"online": train}, alpha=0.5)
    err = held_out_error(p, {"online": test}, first_hour_of_week=0)
    assert err["profile_mae"] < 1.5 < err["last_hour_mae"]
    # Tuesday 13:00 is a peak, Sunday 03:00 is not
    assert p.predict("online", 24 + 13) > 10 > 3 > p.predict("online", 6 * 24 + 3)


def test_a_drifting_tide_is_followed_by_recent_weeks():
    weeks = tide(4, seed=3, noise=0.0, drift=0.5)
    fast, slow = learn({"q": weeks}, alpha=0.8), learn({"q": weeks}, alpha=0.1)
    truth = tide(5, seed=3, noise=0.0, drift=0.5)[4 * HOURS:]
    assert held_out_error(fast, {"q": truth}, 0)["profile_mae"] < held_out_error(slow, {"q": truth}, 0)["profile_mae"]


def test_an_hour_never_seen_has_no_prediction():
    p = WeeklyProfile()
    p.observe("q", 5, 3.0)
    assert p.predict("q", 5) == 3.0 and p.predict("q", 6) is None and p.predict("other", 5) is None


def test_hourly_demand_from_intervals_is_time_weighted():
    got = hourly([("a", 4.0, 1800.0, 5400.0), ("b", 1.0, 0.0, 100_000.0)], start_s=0.0, hours=3)
    assert got == {"a": [2.0, 2.0, 0.0], "b": [1.0, 1.0, 1.0]}


CONFIG = """
federation: {name: fc, timezone: UTC}
sites:
  - name: idc
    kind: idc
    provider: {kind: simulated}
    node_groups:
      - {name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 2, mig: {enabled: true}}
queues:
  - {name: online, deserved: {gpu: 8}}
  - {name: research, deserved: {gpu: 8}}
policies:
  TIDAL
"""


def daily_tide(days: int) -> list[dict]:
    """Ten 1g inference jobs at 09:00 every day; a 16-GPU training gang from 20:00 to 06:00,
    which needs every GPU whole (so the night undoes the day's slicing)."""
    out = []
    for d in range(days):
        base = d * 86400
        out += [{"id": f"inf-{d}-{i}", "queue": "online", "submit_s": base + 9 * 3600 + i, "tasks": 1, "mig_profile": "1g.10gb",
                 "duration_s": 1800} for i in range(10)]
        out.append({"id": f"train-{d}", "queue": "research", "submit_s": base + 20 * 3600, "tasks": 2, "gpus_per_task": 8, "duration_s": 36000})
    return out


def test_the_simulator_pre_warms_mig_slices_ahead_of_the_learned_peak(tmp_path: Path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in daily_tide(14)))
    out = {}
    for name, tidal in (("none", "tidal: []"), ("forecast", "tidal: [{name: prewarm, forecast: {history_days: 14, lead_s: 900}}]")):
        f = parse(CONFIG.replace("TIDAL", tidal))
        res = Simulator(f, read_jsonl(trace, f), SimOptions(seed=1)).run()
        assert all(r.finish_s is not None for r in res.jobs.values())
        out[name] = res.mig
    # without a forecast every morning's ten jobs wait for the slicing; with one, only the first
    # week's do (a Tuesday is predicted from the Tuesday before)
    assert out["none"]["cold_starts"] == 140
    assert out["forecast"]["cold_starts"] == 70
    assert out["forecast"]["forecast"]["profile_mae"] < out["forecast"]["forecast"]["last_hour_mae"]
    assert "forecast" not in out["none"]


def test_the_hourly_peak_is_the_most_held_at_once_in_each_hour():
    from policies.forecast import hourly_peak

    iv = [("q", 4, 0, 1800), ("q", 2, 900, 5400), ("q", 8, 7200, 7300), ("r", 1, 3600, 3600)]
    assert hourly_peak(iv, 0, 3) == {"q": [6, 2, 8]}  # 4+2 overlap in hour 0; r held for no time
    assert hourly_peak([("q", 3, -7200, 3700)], 0, 2) == {"q": [3, 3]}  # from before the start, into hour 1


BURST = """
federation: {name: fcb, timezone: UTC}
sites:
  - name: idc
    kind: idc
    provider: {kind: simulated}
    node_groups: [{name: a100, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 64, memory_gib_per_node: 512, count: 1}]
  - name: cloud
    kind: simulated
    provider: {kind: simulated}
    node_groups:
      - {name: od, gpu_model: A100-80GB, gpus_per_node: 8, cpus_per_node: 96, memory_gib_per_node: 1152, max_nodes: 4,
         price_usd_per_hour: 30, boot_s: 600}
queues:
  - {name: online, deserved: {gpu: 8}, sites: [idc]}
  - {name: research, deserved: {gpu: 8}, burst: true}
policies:
  burst: {enabled: true, pending_wait_s: 300, budget_usd_per_hour: 200, scale_in_idle_s: 600}
  TIDAL
"""


def test_the_simulator_boots_cloud_nodes_ahead_of_a_learned_burst_peak(tmp_path: Path):
    """Online fills the IDC; a 16-GPU research gang arrives at 20:00 every day. Without a
    forecast it waits each evening for pending_wait_s and a boot; with one, from the second week
    (a weekday is predicted from the same weekday before) the nodes are up when it arrives."""
    jobs = [{"id": "online", "queue": "online", "submit_s": 0, "tasks": 1, "gpus_per_task": 8, "duration_s": 15 * 86400}]
    jobs += [{"id": f"train-{d}", "queue": "research", "submit_s": d * 86400 + 20 * 3600, "tasks": 2, "gpus_per_task": 8,
              "duration_s": 7200} for d in range(14)]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in jobs))
    waits, spend, scored = {}, {}, {}
    for name, tidal in (("none", "tidal: []"), ("forecast", "tidal: [{name: prewarm, forecast: {history_days: 14, lead_s: 900}}]")):
        f = parse(BURST.replace("TIDAL", tidal))
        res = Simulator(f, read_jsonl(trace, f), SimOptions(seed=1)).run()
        waits[name] = [res.jobs[f"train-{d}"].first_start_s - (d * 86400 + 20 * 3600) for d in range(14)]
        spend[name] = res.ledger.total_cost
        scored[name] = res.forecast
    assert all(w >= 800 for w in waits["none"])  # pending_wait_s, then a 600 s boot
    assert all(w >= 800 for w in waits["forecast"][:7])  # nothing learned yet
    assert all(w < 1 for w in waits["forecast"][7:]), waits["forecast"]
    assert spend["forecast"] > spend["none"]  # nodes booted ahead cost their lead time
    # the queues' GPU demand is scored on its own (no MIG here): the regular tide beats the last hour
    assert scored["none"] == {} and set(scored["forecast"]) == {"queue_gpus"}
    assert scored["forecast"]["queue_gpus"]["profile_mae"] < scored["forecast"]["queue_gpus"]["last_hour_mae"]


def test_the_live_forecast_scores_the_last_day_before_learning_from_it():
    """A daily 20:00-22:00 peak of 16 GPUs in the journal: a profile learned without the last
    day predicts it exactly, where "the same as an hour ago" misses each edge of the peak."""
    from datetime import UTC, datetime

    from federation.runtime.forecasting import profile_from
    from federation.store import JobRow

    fed = parse((Path(__file__).parent.parent / "configs" / "idc-aws-gcp.yaml").read_text())
    day0 = datetime(2027, 3, 1, tzinfo=UTC).timestamp()  # a Monday
    rows = [JobRow(f"d{d}", "python train.py", {}, {}, {"queue": "research-nlp", "tasks": 2, "gpus_per_task": 8.0}, status="SUCCEEDED",
                   submitted_s=day0 + d * 86400 + 20 * 3600, ended_s=day0 + d * 86400 + 22 * 3600) for d in range(16)]
    now = day0 + 16 * 86400
    profile, err = profile_from(fed, rows, now, history_days=14)
    assert err["held_out_hours"] == 24 and err["profile_mae"] == 0.0 < err["last_hour_mae"]
    assert profile.predict("queue:research-nlp", 24 + 4) == 16  # Monday 20:00 UTC is Tuesday 04:00 in Shanghai
    _, short = profile_from(fed, rows, now, history_days=7)
    assert short is None  # a week of history leaves less than a week before the day held out


def test_the_cycles_forecast_learns_each_hour_at_its_peak_and_a_quiet_hour_at_the_level_it_held():
    """A 16-GPU gang runs from 10:05 to 13:10 with no cycle in between (the simulator has no
    event then): hours 10, 11 and 12 held it, 13 held it until 13:10; 14 held nothing."""
    from datetime import datetime, timedelta

    from policies.forecast import Forecaster

    fc = Forecaster(lead_s=900, history_days=7)
    monday = datetime(2027, 3, 1)
    fc.observe(monday + timedelta(hours=10, minutes=5), {"queue:research": 16.0})
    fc.observe(monday + timedelta(hours=13, minutes=10), {})
    fc.observe(monday + timedelta(hours=15), {})
    assert [fc.profile.predict("queue:research", h) for h in range(10, 15)] == [16.0, 16.0, 16.0, 16.0, 0.0]
    assert fc.profile.predict("queue:research", 9) is None  # before anything was seen
    # a week later the same hours are predicted before they are learned again, and scored
    fc.observe(monday + timedelta(days=7, hours=10), {"queue:research": 16.0})
    fc.observe(monday + timedelta(days=7, hours=11), {"queue:research": 16.0})
    assert fc.scores()["queue_gpus"] == {"scored_hours": 1, "profile_mae": 0.0, "last_hour_mae": 16.0}
    assert fc.wakes(monday + timedelta(hours=19, minutes=40)) == [1200.0, 300.0]  # the hour's end; one lead time before it


def test_the_forecast_asks_the_simulator_for_two_cycles_an_hour_however_many_jobs_come_and_go(tmp_path: Path):
    """Jobs at arbitrary instants (not on a microsecond): each cycle between two of the forecast's
    instants asks for the next one a few tenths of a microsecond apart from the others. Those were
    compared exactly, so every arrival and finish started a timer chain of its own that recurred
    twice an hour until the replay ended (about 25,000 cycles for a 1,000-job replay that needs
    ~3,000). One wake-up per instant: the cycles are the job events plus two an hour."""
    rng = random.Random(3)
    jobs = [{"id": f"j{i}", "queue": "research", "submit_s": rng.uniform(0, 86400), "tasks": 1, "gpus_per_task": 1,
             "duration_s": rng.uniform(60, 7200)} for i in range(40)]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in jobs))
    f = parse(CONFIG.replace("TIDAL", "tidal: [{name: prewarm, forecast: {history_days: 14, lead_s: 900}}]"))
    cycles = []

    class Counting(Simulator):
        def _cycle(self, t: float) -> None:
            cycles.append(t)
            super()._cycle(t)

    sim = Counting(f, read_jsonl(trace, f), SimOptions(seed=1))
    res = sim.run()
    assert all(r.finish_s is not None for r in res.jobs.values())
    hours = math.ceil(res.end_s / 3600)
    assert len(cycles) <= 2 * len(jobs) + 2 * hours + 10, (len(cycles), hours)
    assert len(set(cycles)) == len(cycles)  # one cycle per instant
    # and the forecast still learned every hour the replay ran through (it starts on a Monday at 00:00: hour of week = hour)
    learned = sim.cycle.forecast.profile.slots["queue:research"]
    assert all(learned[h] is not None for h in range(int(res.end_s // 3600))), learned


def test_the_cycles_demand_is_every_live_jobs_demand_summed_exactly():
    """`live_demand` (what each cycle learns from) counts alike jobs together in integers: the same
    keys as `job_demand` job by job, and 30 tenth-of-a-GPU jobs are 3 GPUs, not 3.0000000000000013."""
    from federation.model import JobSpec, Resources
    from policies.forecast import job_demand, live_demand

    tenth = [(JobSpec(f"t{i}", "online", 1, Resources(100, 1000, 1024), 0.0), None) for i in range(30)]
    mig = [(JobSpec(f"m{i}", "online", 2, Resources(0, 1000, 1024), 0.0, mig_profile="1g.10gb"), site) for i, site in enumerate((None, "a", "b", "c"))]
    jobs = tenth + mig + [(JobSpec("w", "research", 4, Resources(8000, 8000, 8192), 0.0), "c")]
    got = live_demand(iter(jobs), ("a", "b"))
    one_by_one: dict[str, float] = {}
    for spec, site in jobs:
        for key, amount in job_demand(spec, site, ("a", "b")):
            one_by_one[key] = one_by_one.get(key, 0.0) + amount
    assert got.keys() == one_by_one.keys() and all(math.isclose(got[k], one_by_one[k]) for k in got)
    assert got["queue:online"] == 3.0 and one_by_one["queue:online"] != 3.0  # the float sum drifts; the integer one does not
    # a MIG job waiting (no site) or at a site without MIG counts at every MIG site; one at a MIG site there only
    assert got == {"queue:online": 3.0, "a/1g.10gb": 6.0, "b/1g.10gb": 6.0, "queue:research": 32.0}
