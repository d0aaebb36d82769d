"""What each queue effectively gets, per resource it governs, as the scheduler reads its quota:
the table `fedctl validate --explain` prints."""

from __future__ import annotations

from federation.model import Federation, Resources
from federation.quota import QuotaTree


def explain_quotas(fed: Federation) -> str:
    """Each queue's effective quota per resource it governs, as the scheduler uses it ('-': no limit)."""
    held = QuotaTree(fed.queues, Resources()).held  # with nothing running: what each queue holds idle

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:g}"

    cols = ("queue", "resource", "reserved", "guarantee", "deserved", "capability", "borrowing_limit", "lending_limit")
    rows, ungoverned = [cols], set()
    for q in fed.queues:
        values = {name: r.to_dict() for name, r in (("reserved", held[q.name]), ("guarantee", q.guarantee), ("deserved", q.deserved),
                                                       ("capability", q.capability), ("borrowing_limit", q.borrowing_limit),
                                                       ("lending_limit", q.lending_limit))}
        for key in ("gpu", "cpu", "memory_gib"):
            if key != "gpu" and all(v[key] is None or (v[key] == 0 and n in ("reserved", "guarantee")) for n, v in values.items()):
                ungoverned.add(key)
                continue
            rows.append((q.name, key, *(fmt(values[c][key]) for c in cols[2:])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.append("reserved: held for the queue (and those under it) even while idle: guarantees, and what lending limits keep from lending")
    if ungoverned:
        lines.append(f"{', '.join(sorted(ungoverned))}: not limited by the queues that do not name them (rows left out)")
    return "\n".join(lines)
