"""The tide, learned (pure): demand by hour of the week, exponentially weighted over past weeks.

A series is anything counted per hour (GPUs a queue asks for, instances of a MIG profile a site
needs). Each hour of the week keeps its own exponentially weighted mean of what was seen at that
hour in past weeks, so the profile follows a drifting tide and forgets old weeks at rate
`alpha`; an hour never seen has no prediction (None), which callers read as "no pre-warm".
`held_out_error` scores a profile on days it did not learn from, against the naive forecast
"the same as an hour ago", so its use can be shown, not assumed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

HOURS = 168  # hours in a week


# The series a federation learns, by key: each queue's GPUs, and each MIG site's instances of a profile.
def queue_key(queue: str) -> str:
    return f"queue:{queue}"


def mig_key(site: str, profile: str) -> str:
    return f"{site}/{profile}"


def is_queue_key(key: str) -> bool:
    return key.startswith("queue:")


@dataclass
class WeeklyProfile:
    alpha: float = 0.5  # weight of the newest week
    slots: dict[str, list[float | None]] = field(default_factory=dict)

    def observe(self, key: str, hour_of_week: int, value: float) -> None:
        s = self.slots.setdefault(key, [None] * HOURS)
        h = hour_of_week % HOURS
        s[h] = value if s[h] is None else self.alpha * value + (1 - self.alpha) * s[h]

    def predict(self, key: str, hour_of_week: int) -> float | None:
        s = self.slots.get(key)
        return None if s is None else s[hour_of_week % HOURS]


    def queue_gpus(self, queues: Iterable[str], hour_of_week: int) -> dict[str, float]:
        """Queue -> the GPUs predicted for it (0 where nothing is known)."""
        return {q: self.predict(queue_key(q), hour_of_week) or 0.0 for q in queues}

    def mig_instances(self, site: str, hour_of_week: int) -> dict[str, int]:
        """Profile -> the MIG instances predicted at `site`, rounded up."""
        out = {}
        for key in self.slots:
            where, _, profile = key.partition("/")
            if not is_queue_key(key) and where == site and (guess := self.predict(key, hour_of_week)):
                out[profile] = math.ceil(guess)
        return out


def hour_of_week(local: datetime) -> int:
    """0 = Monday 00:00, in the federation's time zone."""
    return local.weekday() * 24 + local.hour


def alpha_for(history_days: float) -> float:
    """The weight of the newest week that makes the profile remember about `history_days`."""
    return min(1.0, 7 / history_days)


def learn(series: dict[str, Sequence[float]], first_hour_of_week: int = 0, alpha: float = 0.5) -> WeeklyProfile:
    """A profile from hourly series that start at `first_hour_of_week` (0 = Monday 00:00)."""
    p = WeeklyProfile(alpha)
    for key, values in series.items():
        for i, v in enumerate(values):
            p.observe(key, first_hour_of_week + i, v)
    return p


def held_out_error(p: WeeklyProfile, series: dict[str, Sequence[float]], first_hour_of_week: int) -> dict[str, float]:
    """Mean absolute error of the profile and of the naive last-hour forecast on `series`."""
    err = naive = 0.0
    n = 0
    for key, values in series.items():
        for i, v in enumerate(values):
            guess = p.predict(key, first_hour_of_week + i)
            err += abs((guess or 0.0) - v)
            naive += abs((values[i - 1] if i else v) - v)
            n += 1
    return {"profile_mae": err / n if n else 0.0, "last_hour_mae": naive / n if n else 0.0}


def hourly(intervals: Iterable[tuple[str, float, float, float]], start_s: float, hours: int) -> dict[str, list[float]]:
    """Per key, the mean of `amount` over each hour from `start_s`, from (key, amount, from_s, to_s)."""
    out: dict[str, list[float]] = {}
    for key, amount, a, b in intervals:
        s = out.setdefault(key, [0.0] * hours)
        first, last = max(0, int((a - start_s) // 3600)), min(hours - 1, int((b - start_s) // 3600))
        for h in range(first, last + 1):
            lo, hi = max(a, start_s + h * 3600), min(b, start_s + (h + 1) * 3600)
            if hi > lo:
                s[h] += amount * (hi - lo) / 3600
    return out


def hourly_peak(intervals: Iterable[tuple[str, float, float, float]], start_s: float, hours: int) -> dict[str, list[float]]:
    """Per key, the most `amount` held at once in each hour from `start_s`, from (key, amount,
    from_s, to_s): the demand a peak needs ready, as the simulator observes it cycle by cycle."""
    edges: dict[str, list[tuple[float, float]]] = {}
    for key, amount, a, b in intervals:
        if b > a:
            edges.setdefault(key, []).extend(((a, amount), (b, -amount)))
    out: dict[str, list[float]] = {}
    for key, evs in edges.items():
        peaks, level = [0.0] * hours, 0.0
        evs.sort(key=lambda e: (e[0], e[1]))  # at one instant, ends before starts
        for i, (t, delta) in enumerate(evs):
            level += delta
            nxt = evs[i + 1][0] if i + 1 < len(evs) else t
            if nxt <= t or level <= 0:
                continue
            first, last = max(0, int((t - start_s) // 3600)), min(hours - 1, int((nxt - start_s - 1e-9) // 3600))
            for h in range(first, last + 1):
                peaks[h] = max(peaks[h], level)
        out[key] = peaks
    return out


def job_demand(spec, site: str | None, mig_sites: Sequence[str]) -> list[tuple[str, float]]:
    """What one live job (waiting or running) counts for in the demand: its queue's GPUs, as
    many as it asks for, and for a MIG job its instances at its site (at every MIG site while it
    has none there yet: any may serve it)."""
    return _demand(spec.queue, spec.per_task.gpu_milli * spec.tasks, spec.mig_profile, site, spec.tasks, mig_sites)


def live_demand(jobs: Iterable[tuple], mig_sites: Sequence[str]) -> dict[str, float]:
    """`job_demand` summed over (spec, site) pairs, by key. Jobs alike in queue, MIG profile and
    site are counted together in integers first: a cycle sums every live job (50,000 waiting
    took ~100 ms a cycle one by one), and integer sums are exact where floats drifted."""
    groups: dict[tuple, list[int]] = {}
    for spec, site in jobs:
        profile = spec.mig_profile
        k = (spec.queue, profile, site if profile is not None else None)
        g = groups.get(k)
        if g is None:
            g = groups[k] = [0, 0]
        g[0] += spec.per_task.gpu_milli * spec.tasks
        g[1] += spec.tasks
    out: dict[str, float] = {}
    for (queue, profile, site), (milli, tasks) in groups.items():
        for key, amount in _demand(queue, milli, profile, site, tasks, mig_sites):
            out[key] = out.get(key, 0.0) + amount
    return out


def _demand(queue: str, gpu_milli: int, profile: str | None, site: str | None, tasks: int, mig_sites: Sequence[str]) -> list[tuple[str, float]]:
    out = [(queue_key(queue), gpu_milli / 1000)]
    if profile is not None:
        out += [(mig_key(s, profile), float(tasks)) for s in ([site] if site in mig_sites else mig_sites)]
    return out


class Forecaster:
    """The forecast as the decision cycle keeps it, in the simulator and the live controller alike.

    Each cycle's demand (what live jobs ask for, `job_demand`) raises the peak of the hour under
    way; when the hour is over its peak is scored against what the profile had predicted for it
    (beside "the same as the hour before") and then learned. An hour with no cycle held the
    demand of the last one. The live controller seeds the profile from its journal at start."""

    def __init__(self, lead_s: float, history_days: float, mig_sites: Sequence[str] = ()):
        self.lead_s, self.mig_sites = lead_s, tuple(mig_sites)
        self.profile = WeeklyProfile(alpha_for(history_days))
        self.hour: datetime | None = None  # local start of the hour under way
        self.level: dict[str, float] = {}  # the demand at the last cycle
        self.peak: dict[str, float] = {}  # the most demand in the hour under way
        self.last_peak: dict[str, float] = {}  # the hour before's
        # scored apart: queues' GPUs (backlogs included) and MIG instances are different quantities
        self.err = {kind: {"hours": 0, "profile_abs": 0.0, "last_hour_abs": 0.0} for kind in ("queue_gpus", "mig_instances")}

    def observe(self, local: datetime, demand: dict[str, float]) -> None:
        hour = local.replace(minute=0, second=0, microsecond=0)
        if self.hour is None or hour - self.hour > timedelta(hours=HOURS):
            self.hour = hour  # first sight, or after an outage longer than any history: start afresh
        while self.hour < hour:
            self._close(hour_of_week(self.hour))
            self.hour += timedelta(hours=1)
            self.peak = dict(self.level)
        self.level = demand
        for k, v in demand.items():
            if v > self.peak.get(k, 0.0):
                self.peak[k] = v

    def _close(self, how: int) -> None:
        for key in self.peak.keys() | self.last_peak.keys():
            v = self.peak.get(key, 0.0)
            guess = self.profile.predict(key, how)
            if guess is not None:
                e = self.err["queue_gpus" if is_queue_key(key) else "mig_instances"]
                e["hours"] += 1
                e["profile_abs"] += abs(guess - v)
                e["last_hour_abs"] += abs(self.last_peak.get(key, 0.0) - v)
            self.profile.observe(key, how, v)
        self.last_peak = self.peak

    def ahead(self, local: datetime) -> int:
        """The hour of the week one lead time from `local`: the one to get ready for."""
        return hour_of_week(local + timedelta(seconds=self.lead_s))

    def wakes(self, local: datetime) -> list[float]:
        """Seconds from `local` to the instants the forecast needs a cycle: the hour's end (to
        learn it) and one lead time before it (to get ready for the next)."""
        left = 3600 - (local.minute * 60 + local.second + local.microsecond / 1e6)
        return [s for s in (left, left - self.lead_s % 3600) if s > 0]

    def scores(self) -> dict[str, dict]:
        """Per kind of demand, the profile's mean hourly error over the hours it predicted, beside "the same as an hour ago"."""
        return {kind: {"scored_hours": e["hours"], "profile_mae": round(e["profile_abs"] / e["hours"], 3),
                       "last_hour_mae": round(e["last_hour_abs"] / e["hours"], 3)} for kind, e in self.err.items() if e["hours"]}
