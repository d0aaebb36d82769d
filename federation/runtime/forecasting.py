"""The live controller's forecast history: the weekly demand profile learned from the journal.

The decision cycle learns demand online, hour by hour, the same way in the simulator and live
(`policies.forecast.Forecaster`). A live controller starts from its journal instead of from
nothing: each queue's demand over `forecast.history_days` is the GPUs its jobs asked for while
they waited or ran (the most at once in each hour), and each MIG site's the instances of each
profile (a job that never ran counts for every MIG site, as in the cycle), the same measure
`job_demand` gives the cycle. The last day is scored before it is learned from, so `fedctl status`
can say how well the profile predicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from zoneinfo import ZoneInfo

from federation.errors import JobRejected
from federation.jobs import make_job
from federation.model import Federation
from federation.store import JobRow, Store
from policies.forecast import (
    Forecaster,
    WeeklyProfile,
    alpha_for,
    held_out_error,
    hour_of_week,
    hourly_peak,
    is_queue_key,
    job_demand,
    learn,
)

HELD_OUT_H = 24  # the last day of history, scored before it is learned from


def demand_intervals(fed: Federation, rows: Iterable[JobRow], now: float, mig_sites: Sequence[str] = ()) -> list[tuple[str, float, float, float]]:
    """(key, amount, from, to) per job, from its submission to its end (or now): `queue:<name>`
    GPUs, and for a MIG job `<site>/<profile>` instances at each of `mig_sites` it may use."""
    out = []
    for r in rows:
        try:
            spec = make_job(fed, id=r.id, submit_s=r.submitted_s, **r.request)
        except (JobRejected, TypeError):
            continue  # a queue or shape the config no longer has: not this federation's tide
        until = r.ended_s if r.ended_s is not None else now
        out += [(key, amount, r.submitted_s, until) for key, amount in job_demand(spec, r.site, mig_sites)]
    return out


def profile_from(fed: Federation, rows: Iterable[JobRow], now: float, history_days: float,
                 mig_sites: Sequence[str] = ()) -> tuple[WeeklyProfile, dict[str, float] | None]:
    """The profile learned from the whole history, and how well the queues' GPU demand of the
    last HELD_OUT_H hours was predicted by a profile learned without them (None with less than
    a week before them: a weekly profile predicts nothing yet)."""
    zone = ZoneInfo(fed.timezone)
    local = datetime.fromtimestamp(now - history_days * 86400, zone).replace(minute=0, second=0, microsecond=0)
    start = local.timestamp()
    hours = int((now - start) // 3600)  # whole hours only: the current one is not over
    series = hourly_peak(demand_intervals(fed, rows, now, mig_sites), start, hours)
    alpha, first = alpha_for(history_days), hour_of_week(local)
    error = None
    if hours - HELD_OUT_H >= 168:
        gpus = {k: v for k, v in series.items() if is_queue_key(k)}
        before = learn({k: v[:-HELD_OUT_H] for k, v in gpus.items()}, first, alpha)
        error = {"held_out_hours": HELD_OUT_H, **held_out_error(before, {k: v[-HELD_OUT_H:] for k, v in gpus.items()}, first + hours - HELD_OUT_H)}
    return learn(series, first, alpha), error


def seed(forecast: Forecaster, fed: Federation, store: Store, now: float) -> dict[str, float] | None:
    """Start the cycle's forecast from the journal's history; returns the held-out score."""
    days = next(t.forecast for t in fed.policies.tidal if t.forecast is not None).history_days
    forecast.profile, error = profile_from(fed, store.jobs(ended_after=now - days * 86400), now, days, forecast.mig_sites)
    return error
