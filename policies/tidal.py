"""Tidal windows: which policies are active at a local time, and the quotas they make effective.

Windows are read in the federation's timezone (zoneinfo handles DST). A window with `days`
starts on those days; one that crosses midnight (22:00-08:00) runs into the next day. A cron
window opens at each firing of its expression and lasts `duration_s`. Where active windows
overlap, the later-listed policy wins per field; a field an override leaves out keeps its
configured value. A window is prepared `prepare_s` before it opens: the reserves it raises are
held from then (`federation.holds`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import datetime, time, timedelta

from croniter import croniter

from federation import schema
from federation.model import Federation, Queue, Resources
from federation.quota import reserve_of
from federation.semantics import parse_hhmm

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def window_active(w: schema.Window, local: datetime) -> bool:
    if w.cron is not None:
        fired = croniter(w.cron, local + timedelta(seconds=1)).get_prev(datetime)  # the last firing at or before `local`
        return (local - fired).total_seconds() < w.duration_s
    start, end = parse_hhmm(w.start), parse_hhmm(w.end)
    minute = local.hour * 60 + local.minute
    days = set(w.days or DAYS)
    today = DAYS[local.weekday()]
    yesterday = DAYS[(local.weekday() - 1) % 7]
    if start < end:
        return today in days and start <= minute < end
    # crosses midnight: the evening part belongs to today, the morning part to yesterday's window
    return (today in days and minute >= start) or (yesterday in days and minute < end)


def active_policies(fed: Federation, local: datetime) -> list[schema.TidalPolicy]:
    return [t for t in fed.policies.tidal if t.window is not None and window_active(t.window, local)]


def _override(base: Resources, m: schema.ResourceMap | None) -> Resources:
    """`base` with the keys `m` gives replaced."""
    if m is None:
        return base
    vals = list(base.as_tuple())
    for i, (key, scale) in enumerate((("gpu", 1000), ("cpu", 1000), ("memory_gib", 1024))):
        v = getattr(m, key)
        if v is not None:
            vals[i] = round(v * scale)
    return Resources(*vals)


def effective_queues(fed: Federation, local: datetime) -> tuple[Queue, ...]:
    """The queues with every active window's overrides applied (later-listed wins)."""
    active = active_policies(fed, local)
    if not any(t.queues for t in active):
        return fed.queues
    out = []
    for q in fed.queues:
        for t in active:
            o = t.queues.get(q.name)
            if o is not None:
                q = replace(
                    q,
                    guarantee=_override(q.guarantee, o.guarantee),
                    deserved=_override(q.deserved, o.deserved),
                    capability=_override(q.capability, o.capability),
                    borrowing_limit=_override(q.borrowing_limit, o.borrowing_limit),
                    lending_limit=_override(q.lending_limit, o.lending_limit),
                )
        out.append(q)
    return tuple(out)


def widest_capability(fed: Federation, queue: Queue) -> Resources:
    """The largest capability `queue` has in any window (or outside them): what a job may ever use."""
    cap = queue.capability
    for t in fed.policies.tidal:
        o = t.queues.get(queue.name)
        if o is not None:
            cap = cap.max(_override(queue.capability, o.capability))
    return cap


def effective_burst(fed: Federation, local: datetime) -> tuple[bool, float]:
    """(burst enabled, budget in USD per hour) with active windows applied."""
    enabled, budget = fed.policies.burst.enabled, fed.policies.burst.budget_usd_per_hour
    for t in active_policies(fed, local):
        if t.burst is not None:
            enabled = t.burst.enabled if t.burst.enabled is not None else enabled
            budget = t.burst.budget_usd_per_hour if t.burst.budget_usd_per_hour is not None else budget
    return enabled, budget


def prepare_s(fed: Federation, w: schema.Window) -> float:
    """How long before it opens a window's raised reserves are made ready."""
    if w.prepare_s is not None:
        return w.prepare_s
    return max(fed.policies.preemption.grace_s, fed.policies.mig.reconfigure_drain_s)


def opening(fed: Federation, local: datetime) -> list[schema.TidalPolicy]:
    """Window policies not active now that open within their `prepare_s`."""
    return [t for t in fed.policies.tidal if t.window is not None and not window_active(t.window, local)
            and window_active(t.window, local + timedelta(seconds=prepare_s(fed, t.window)))]


def upcoming_reserves(fed: Federation, local: datetime) -> dict[str, int]:
    """Queue -> the GPU milli it will hold (its reserve) once the windows about to open are open."""
    out: dict[str, int] = {}
    for t in opening(fed, local):
        then = local + timedelta(seconds=prepare_s(fed, t.window))
        for q in effective_queues(fed, then):
            out[q.name] = max(out.get(q.name, 0), reserve_of(q).gpu_milli)
    return out


def _openings(w: schema.Window, start: datetime, horizon: timedelta):
    """(opens, closes) of each time `w` is open that overlaps `start` to `start + horizon`."""
    if w.cron is not None:
        duration = timedelta(seconds=w.duration_s)
        it = croniter(w.cron, start - duration)
        while (fired := it.get_next(datetime)) <= start + horizon:
            yield fired, fired + duration
        return
    opens, closes = parse_hhmm(w.start), parse_hhmm(w.end)
    days = set(w.days or DAYS)
    for day in range(-1, horizon.days + 1):
        date = (start + timedelta(days=day)).date()
        if DAYS[date.weekday()] in days:
            midnight = datetime.combine(date, time(0), start.tzinfo)
            yield midnight + timedelta(minutes=opens), midnight + timedelta(minutes=closes if opens < closes else closes + 1440)


def _edges(w: schema.Window, local: datetime, horizon: timedelta, lead: timedelta = timedelta(0)):
    """Times at which `w` may open or close (or start preparing, `lead` before it opens) between
    `local` and the horizon."""
    for opens, closes in _openings(w, local, horizon + lead):
        yield from (opens, closes, opens - lead)


def next_transition(fed: Federation, local: datetime, horizon_h: int = 8 * 24, prepare: bool = False) -> datetime | None:
    """The next time the set of active windows changes (with `prepare`, also the set of windows
    being prepared), or None within the horizon."""
    horizon = timedelta(hours=horizon_h)

    def phase(at: datetime) -> tuple:
        return ({p.name for p in active_policies(fed, at)}, {p.name for p in opening(fed, at)} if prepare else ())

    now = phase(local)
    edges = sorted({e for t in fed.policies.tidal if t.window is not None
                    for e in _edges(t.window, local, horizon, timedelta(seconds=prepare_s(fed, t.window)) if prepare else timedelta(0))
                    if local < e <= local + horizon})
    return next((e for e in edges if phase(e) != now), None)


def overlaps(windows: list[schema.Window], start: datetime, days: int = 8) -> set[tuple[int, ...]]:
    """The index tuples of two or more `windows` open together at some moment within `days` of
    `start`: a sweep over every opening and closing (a window is open from its opening, up to
    but not at its closing)."""
    horizon = timedelta(days=days)
    events = sorted((t, delta, i) for i, w in enumerate(windows) for a, b in _openings(w, start, horizon) for t, delta in ((a, 1), (b, -1)))
    open_: Counter[int] = Counter()
    out = set()
    for k, (t, delta, i) in enumerate(events):
        open_[i] += delta  # at one instant, closings (-1) sort before openings (+1)
        if k + 1 < len(events) and events[k + 1][0] == t:
            continue  # the set at `t` is known once every event at `t` is applied
        now = tuple(sorted(j for j, n in open_.items() if n > 0))
        if len(now) > 1 and start <= t <= start + horizon:
            out.add(now)
    return out


def effective_mig(fed: Federation, local: datetime) -> dict[str, dict[str, schema.MigTarget]]:
    """Site -> node group -> the MIG target of the active windows (later-listed wins per group)."""
    out: dict[str, dict[str, schema.MigTarget]] = {}
    for t in active_policies(fed, local):
        for site, groups in t.mig.items():
            out.setdefault(site, {}).update(groups)
    return out
