"""The forecast in the live controller: the weekly demand profile learned from the journal.

Each queue's demand is the GPUs its jobs held or waited for, hour by hour (the most at once in
the hour), over the config's `forecast.history_days`; each MIG site's is the instances of each
profile its jobs held or waited for (a job that never ran counts for every MIG site, as in the
simulator). The profile is learned again each hour. From it, the cloud GPUs to have up one
`lead_s` ahead (`policies.burst.prewarm_gpus`), which the burst policy boots within its limits
and budgets, and the MIG instances each site's manager slices for ahead of the predicted peak.
The simulator learns the same demand as it runs, cycle by cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from federation.errors import JobRejected
from federation.jobs import make_job
from federation.model import Federation
from federation.store import JobRow, Store
from policies import burst as burst_policy
from policies.forecast import (
    WeeklyProfile,
    alpha_for,
    held_out_error,
    hour_of_week,
    hourly_peak,
    is_queue_key,
    learn,
    mig_key,
    queue_key,
)
from policies.tidal import effective_queues

RELEARN_S = 3600.0
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
        out.append((queue_key(spec.queue), spec.per_task.gpu * spec.tasks, r.submitted_s, until))
        if spec.mig_profile is not None:
            for site in [r.site] if r.site in mig_sites else mig_sites:
                out.append((mig_key(site, spec.mig_profile), spec.tasks, r.submitted_s, until))
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


class LiveForecast:
    def __init__(self, fed: Federation, store: Store, mig_sites: Sequence[str] = ()):
        self.fed, self.store, self.mig_sites = fed, store, tuple(mig_sites)
        self.spec = next((t.forecast for t in fed.policies.tidal if t.forecast is not None), None)
        self.profile: WeeklyProfile | None = None
        self.error: dict[str, float] | None = None  # the held-out score of the last learning
        self.learned_s = float("-inf")
        self.last_gpus = 0.0

    def refresh(self, now: float) -> None:
        """Learn the profile again if an hour has passed (only then is the journal read: the
        jobs going, or ended within the history)."""
        if self.spec is not None and now - self.learned_s >= RELEARN_S:
            days = self.spec.history_days
            rows = self.store.jobs(ended_after=now - days * 86400)
            (self.profile, self.error), self.learned_s = profile_from(self.fed, rows, now, days, self.mig_sites), now

    def _ahead(self, now: float) -> datetime:
        """The local time one lead time ahead, with the profile up to date."""
        self.refresh(now)
        return datetime.fromtimestamp(now, ZoneInfo(self.fed.timezone)) + timedelta(seconds=self.spec.lead_s)

    def prewarm_gpus(self, now: float, fixed_gpus: float) -> float:
        """Cloud GPUs to have up now for the hour one lead time ahead."""
        if self.spec is None:
            return 0.0
        ahead = self._ahead(now)
        predicted = self.profile.queue_gpus(self.fed.leaf_queues, hour_of_week(ahead))
        self.last_gpus = burst_policy.prewarm_gpus(self.fed, predicted, fixed_gpus, effective_queues(self.fed, ahead))
        return self.last_gpus

    def mig_instances(self, site: str, now: float) -> dict[str, int] | None:
        """Profile -> the instances predicted at `site` for the hour one lead time ahead (None
        without a forecast policy), for its MIG manager to slice ahead of the peak."""
        if self.spec is None or site not in self.mig_sites:
            return None
        ahead = self._ahead(now)  # first: it may learn the profile
        return self.profile.mig_instances(site, hour_of_week(ahead))
