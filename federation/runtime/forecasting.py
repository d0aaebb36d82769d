"""The forecast in the live controller: the weekly demand profile learned from the journal.

Each queue's demand is the GPUs its jobs held or waited for, hour by hour (the most at once in
the hour), over the config's `forecast.history_days`; the profile is learned again each hour.
From it, the cloud GPUs to have up one `lead_s` ahead (`policies.burst.prewarm_gpus`), which
the burst policy boots within its limits and budgets. The simulator learns the same demand as it
runs, cycle by cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from federation.errors import JobRejected
from federation.jobs import make_job
from federation.model import Federation
from federation.store import JobRow
from policies import burst as burst_policy
from policies.forecast import WeeklyProfile, alpha_for, hour_of_week, hourly_peak, learn
from policies.tidal import effective_queues

RELEARN_S = 3600.0


def demand_intervals(fed: Federation, rows: Iterable[JobRow], now: float) -> list[tuple[str, float, float, float]]:
    """(queue key, GPUs, from, to) per job: from its submission to its end (or now)."""
    out = []
    for r in rows:
        try:
            spec = make_job(fed, id=r.id, submit_s=r.submitted_s, **r.request)
        except (JobRejected, TypeError):
            continue  # a queue or shape the config no longer has: not this federation's tide
        out.append((f"queue:{spec.queue}", spec.per_task.gpu * spec.tasks, r.submitted_s, r.ended_s if r.ended_s is not None else now))
    return out


def profile_from(fed: Federation, rows: Iterable[JobRow], now: float, history_days: float) -> WeeklyProfile:
    zone = ZoneInfo(fed.timezone)
    local = datetime.fromtimestamp(now - history_days * 86400, zone).replace(minute=0, second=0, microsecond=0)
    start = local.timestamp()
    hours = int((now - start) // 3600)  # whole hours only: the current one is not over
    series = hourly_peak(demand_intervals(fed, rows, now), start, hours)
    return learn(series, hour_of_week(local), alpha_for(history_days))


class LiveForecast:
    def __init__(self, fed: Federation):
        self.fed = fed
        self.spec = next((t.forecast for t in fed.policies.tidal if t.forecast is not None), None)
        self.profile: WeeklyProfile | None = None
        self.learned_s = float("-inf")
        self.last_gpus = 0.0

    def prewarm_gpus(self, now: float, rows: Callable[[], Iterable[JobRow]], fixed_gpus: float) -> float:
        """Cloud GPUs to have up now for the hour one lead time ahead; `rows()` reads the
        journal, once an hour, when the profile is learned again."""
        if self.spec is None:
            return 0.0
        if now - self.learned_s >= RELEARN_S:
            self.profile, self.learned_s = profile_from(self.fed, rows(), now, self.spec.history_days), now
        ahead = datetime.fromtimestamp(now, ZoneInfo(self.fed.timezone)) + timedelta(seconds=self.spec.lead_s)
        predicted = {q: self.profile.predict(f"queue:{q}", hour_of_week(ahead)) or 0.0 for q in self.fed.leaf_queues}
        self.last_gpus = burst_policy.prewarm_gpus(self.fed, predicted, fixed_gpus, effective_queues(self.fed, ahead))
        return self.last_gpus
