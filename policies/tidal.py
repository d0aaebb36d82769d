"""Tidal windows: which policies are active at a local time, and the quotas they make effective.

Windows are read in the federation's timezone (zoneinfo handles DST). A window with `days`
starts on those days; one that crosses midnight (22:00-08:00) runs into the next day. Where
active windows overlap, the later-listed policy wins per field; a field an override leaves out
keeps its configured value.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from federation import schema
from federation.model import Federation, Queue, Resources
from federation.semantics import parse_hhmm

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def window_active(w: schema.Window, local: datetime) -> bool:
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


def next_transition(fed: Federation, local: datetime, horizon_h: int = 8 * 24) -> datetime | None:
    """The next minute at which the set of active windows changes (None within the horizon)."""
    now = {t.name for t in active_policies(fed, local)}
    t = local.replace(second=0, microsecond=0)
    for _ in range(horizon_h * 60):
        t += timedelta(minutes=1)
        if {p.name for p in active_policies(fed, t)} != now:
            return t
    return None


def effective_mig(fed: Federation, local: datetime) -> dict[str, dict[str, schema.MigTarget]]:
    """Site -> node group -> the MIG target of the active windows (later-listed wins per group)."""
    out: dict[str, dict[str, schema.MigTarget]] = {}
    for t in active_policies(fed, local):
        for site, groups in t.mig.items():
            out.setdefault(site, {}).update(groups)
    return out
