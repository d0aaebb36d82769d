"""Tidal windows: when they are active, what they change, and which wins when they overlap."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from federation.config import load, parse
from federation.errors import ConfigError
from policies.tidal import (
    active_policies,
    effective_burst,
    effective_queues,
    next_transition,
    upcoming_reserves,
)

from .conftest import CONFIGS

FED = load(CONFIGS / "idc-aws-gcp.yaml")
SH = ZoneInfo("Asia/Shanghai")


def at(day: int, hour: int, minute: int = 0, tz=SH) -> datetime:
    return datetime(2026, 1, 5 + day, hour, minute, tzinfo=tz)  # 2026-01-05 is a Monday


@pytest.mark.parametrize("when,active", [
    (at(0, 9), {"daytime-inference"}),  # Monday morning
    (at(0, 23), {"night-training"}),
    (at(1, 3), {"night-training"}),  # crosses midnight into Tuesday
    (at(5, 12), set()),  # Saturday noon: the day window is weekdays only
    (at(0, 8, 0), {"daytime-inference"}),  # start is inclusive
    (at(0, 22, 0), {"night-training"}),  # end is exclusive
])
def test_windows_are_active_in_the_federations_timezone(when, active):
    assert {p.name for p in active_policies(FED, when)} == active


def test_a_window_reshapes_quotas_and_leaves_unnamed_fields_alone():
    day = {q.name: q for q in effective_queues(FED, at(0, 10))}
    night = {q.name: q for q in effective_queues(FED, at(0, 23))}
    assert day["online"].guarantee.gpu == 32 and day["online"].deserved.gpu == 40
    assert day["online"].capability.gpu == 48  # not overridden
    assert night["online"].guarantee.gpu == 8 and night["research"].deserved.gpu == 72


def test_a_window_changes_the_burst_budget():
    assert effective_burst(FED, at(0, 23)) == (True, 300)
    assert effective_burst(FED, at(0, 10)) == (True, 150)


def test_the_later_listed_window_wins_where_windows_overlap():
    text = (CONFIGS / "idc-aws-gcp.yaml").read_text().replace(
        '    - name: forecast-prewarm', '''    - name: override
      window: {start: "09:00", end: "10:00"}
      queues:
        online: {guarantee: {gpu: 20}}
    - name: forecast-prewarm''')
    fed = parse(text)
    q = {q.name: q for q in effective_queues(fed, at(0, 9, 30))}["online"]
    assert q.guarantee.gpu == 20 and q.deserved.gpu == 40  # guarantee from the later window, deserved from the earlier


def _with_evening_window(days: str) -> str:
    # valid alone (online keeps its configured guarantee of 16), but not merged with the day
    # window, which raises online's guarantee to 32 until 22:00
    return (CONFIGS / "idc-aws-gcp.yaml").read_text().replace('    - name: forecast-prewarm', f'''    - name: evening-shrink
      window: {{days: [{days}], start: "20:00", end: "23:00"}}
      queues:
        online: {{deserved: {{gpu: 16}}}}
    - name: forecast-prewarm''')


def test_validate_rejects_windows_that_break_the_queue_rules_only_where_they_are_open_together():
    with pytest.raises(ConfigError) as e:
        parse(_with_evening_window("mon"), "f.yaml")
    [problem] = e.value.problems
    assert problem.path == "policies.tidal.2.queues.online.guarantee.gpu"
    assert "guarantee 32 is above deserved 16" in problem.message
    assert "'daytime-inference' and 'evening-shrink'" in problem.message
    parse(_with_evening_window("sat"))  # the day window is weekdays only: they never meet


def test_overlaps_are_found_by_sweeping_openings_and_a_window_is_not_open_at_its_end():
    from federation import schema
    from policies.tidal import overlaps

    day = schema.Window(days=["mon", "tue", "wed", "thu", "fri"], start="08:00", end="22:00")
    night = schema.Window(start="22:00", end="08:00")  # meets the day window at both ends, never overlaps it
    evening = schema.Window(cron="0 21 * * *", duration_s=7200)  # 21:00-23:00: the end of the day and the start of the night
    weekend = schema.Window(days=["sat"], start="10:00", end="12:00")
    assert overlaps([day, night, evening, weekend], at(0, 0)) == {(0, 2), (1, 2)}


def test_the_next_transition_is_the_next_window_edge():
    assert next_transition(FED, at(0, 10)) == at(0, 22)
    assert next_transition(FED, at(0, 23)) == at(1, 8)


def test_windows_follow_daylight_saving_time():
    text = (CONFIGS / "idc-aws-gcp.yaml").read_text().replace("timezone: Asia/Shanghai", "timezone: Europe/Berlin")
    fed = parse(text)
    berlin = ZoneInfo("Europe/Berlin")
    # 2026-03-30 (Monday, summer time) 08:30 local is 06:30 UTC; in winter 08:30 local is 07:30 UTC
    summer = datetime(2026, 3, 30, 6, 30, tzinfo=ZoneInfo("UTC")).astimezone(berlin)
    winter = datetime(2026, 1, 5, 7, 30, tzinfo=ZoneInfo("UTC")).astimezone(berlin)
    assert {p.name for p in active_policies(fed, summer)} == {"daytime-inference"}
    assert {p.name for p in active_policies(fed, winter)} == {"daytime-inference"}


def test_fedctl_tidal_preview_prints_the_effective_quotas_hour_by_hour():
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "federation.cli", "tidal", "preview", "--config", str(CONFIGS / "idc-aws-gcp.yaml"),
                        "--from", "2026-01-05T07:00", "--hours", "3", "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [row["windows"] for row in rows] == [["night-training"], ["daytime-inference"], ["daytime-inference"]]
    assert rows[1]["queues"]["online"] == {"guarantee_gpu": 32.0, "deserved_gpu": 40.0}
    assert rows[0]["burst_budget_usd_per_hour"] == 300


def test_a_window_is_prepared_ahead_of_its_opening_with_the_reserves_it_raises():
    # default lead: the longer of the preemption grace (120 s) and the MIG drain (300 s)
    assert upcoming_reserves(FED, at(0, 7, 0)) == {}
    ahead = upcoming_reserves(FED, at(0, 7, 56))
    assert ahead["online"] == 32000  # the daytime guarantee, four minutes early
    assert next_transition(FED, at(0, 7, 0), prepare=True) == at(0, 7, 55)
    assert next_transition(FED, at(0, 7, 0)) == at(0, 8)  # what `fedctl status` shows: the window edge itself
    custom = parse((CONFIGS / "idc-aws-gcp.yaml").read_text().replace('start: "08:00", end: "22:00"}', 'start: "08:00", end: "22:00", prepare_s: 1800}'))
    assert upcoming_reserves(custom, at(0, 7, 31))["online"] == 32000


def test_cron_windows_open_at_each_firing_for_their_duration():
    text = (CONFIGS / "idc-aws-gcp.yaml").read_text().replace(
        'window: {days: [mon, tue, wed, thu, fri], start: "08:00", end: "22:00"}', 'window: {cron: "30 8 * * 1-5", duration_s: 7200}')
    fed = parse(text)
    names = lambda t: {p.name for p in active_policies(fed, t)}  # noqa: E731
    assert "daytime-inference" in names(at(0, 8, 30)) and "daytime-inference" in names(at(0, 10, 29))
    assert "daytime-inference" not in names(at(0, 10, 30)) and "daytime-inference" not in names(at(0, 8, 29))
    assert "daytime-inference" not in names(at(5, 9))  # Saturday
    assert next_transition(fed, at(4, 11)) == at(4, 22)  # Friday: the night window is next
    assert next_transition(fed, at(4, 23)) == at(5, 8)  # Saturday 08:00, the night's end; the cron skips the weekend
    assert next_transition(fed, at(6, 23)) == at(7, 8)  # Sunday night: Monday 08:00 ends it ...
    assert next_transition(fed, at(7, 8)) == at(7, 8, 30)  # ... and the cron window opens at 08:30
