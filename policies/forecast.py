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
from datetime import datetime

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
