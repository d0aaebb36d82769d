"""report.json, events.jsonl and report.html of a simulation (CONTRACTS.md section 3)."""

from __future__ import annotations

import base64
import html
import io
import math
from collections import Counter
from pathlib import Path

from federation.simulation.engine import SimResult


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    v = sorted(values)

    def pct(p: float) -> float:  # nearest rank
        return v[max(0, math.ceil(p / 100 * len(v)) - 1)]

    return {"p50": round(pct(50), 3), "p95": round(pct(95), 3), "p99": round(pct(99), 3), "max": round(v[-1], 3)}


def build_report(res: SimResult, invariants: dict, wall_s: float) -> dict:
    waits: dict[str, list[float]] = {q: [] for q in res.queues}
    preempted: dict[str, int] = dict.fromkeys(res.queues, 0)
    for rec in res.jobs.values():
        if rec.first_start_s is not None:
            waits[rec.spec.queue].append(rec.first_start_s - rec.spec.submit_s)
        preempted[rec.spec.queue] += rec.preemptions
    led = res.ledger
    per_queue = {}
    books = led.per_queue(res.end_s, res.queues)
    for q in res.queues:
        per_queue[q] = {"wait_s": percentiles(waits.get(q, [])), **books[q], "preempted": preempted.get(q, 0)}
    util = {s: round(led.site_alloc_gpu_s.get(s, 0.0) / a, 4) for s, a in led.site_avail_gpu_s.items() if a}
    total_avail = sum(led.site_avail_gpu_s.values())
    util["overall"] = round(sum(led.site_alloc_gpu_s.values()) / total_avail, 4) if total_avail else 0.0
    cloud_gpu_s = sum(led.site_alloc_gpu_s.get(s, 0.0) for s, cloud in res.sites.items() if cloud)
    all_waits = [w for ws in waits.values() for w in ws]
    return {
        "jobs": {
            "submitted": len(res.jobs),
            "completed": sum(1 for r in res.jobs.values() if r.finish_s is not None),
            "preempted": sum(1 for r in res.jobs.values() if r.preemptions),
            # Reclaim, Priority, Consolidation (jobs moved to make room), QuotaShrink, WindowPrepare
            "preemptions_by_reason": dict(Counter(reason for _, reason in res.preemptions)),
            "never_started": sum(1 for r in res.jobs.values() if r.first_start_s is None),
            "skipped_lines": res.skipped,
        },
        "wait_s": percentiles(all_waits),
        "per_queue": per_queue,
        "gpu_utilization": util,
        "cloud": {
            "gpu_hours": round(cloud_gpu_s / 3600, 3),
            "cost_usd": round(led.total_cost, 2),
            "paid_node_hours": round(led.paid_node_s / 3600, 3),
            "idle_paid_node_hours": round(led.idle_paid_node_s / 3600, 3),
            **res.cloud,
        },
        **({"mig": res.mig} if res.mig else {}),
        **({"tidal": _readiness(res.openings)} if res.openings else {}),
        **({"forecast": res.forecast} if res.forecast else {}),
        "pending_reasons_at_end": _reasons_at_end(res),
        # why work waited: GPU-hours of waiting jobs by their pending reason (GPUs asked x time waited)
        "waited_gpu_hours_by_reason": {k: round(v / 3600, 3) for k, v in sorted(res.wait_gpu_s.items(), key=lambda kv: -kv[1])},
        "invariants": invariants,
        "virtual_s": round(res.end_s, 3),
        "wall_s": round(wall_s, 3),
    }


def _readiness(openings: list[dict]) -> dict:
    """How much of each reserve a window raised was ready (used by its queue or idle on its sites) as it opened."""
    shares = [o["ready_gpus"] / o["reserve_gpus"] for o in openings]
    return {"openings": len(openings), "ready_share_min": round(min(shares), 4), "ready_share_mean": round(sum(shares) / len(shares), 4),
            "at_openings": openings}


def _reasons_at_end(res: SimResult) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in res.jobs.values():
        if r.first_start_s is None or (r.finish_s is None and r.last_reason):
            if r.last_reason:
                out[r.last_reason] = out.get(r.last_reason, 0) + 1
    return dict(sorted(out.items()))


def _png(fig) -> str:
    """The figure as an <img>, its title as the alt text (for screen readers, and for search)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    title = fig.axes[0].get_title() if fig.axes else "plot"
    plt.close(fig)
    return f'<img alt="{html.escape(title)}" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}"><br>'


def _table(head: list[str], rows: list[list], colours: list[str | None] | None = None) -> str:
    """An HTML table; a row may lead with a colour swatch (the queue's, as in every plot)."""
    def cell(v) -> str:
        return f"<td>{html.escape(str(v))}</td>"

    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for i, r in enumerate(rows):
        swatch = f'<span class="sw" style="background:{colours[i]}"></span>' if colours and colours[i] else ""
        out.append("<tr>" + f"<td>{swatch}{html.escape(str(r[0]))}</td>" + "".join(cell(v) for v in r[1:]) + "</tr>")
    return "".join(out) + "</table>"


def write_html(report: dict, res: SimResult, path: Path, title: str) -> None:
    """The story of a run for people: every plot on a time-of-day axis with the tidal windows
    shaded, one colour per queue in every plot and table, and the summary as tables."""
    from datetime import datetime, timedelta

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    start = res.start or datetime(2026, 1, 5)
    times = [start + timedelta(seconds=s["t"]) for s in res.samples]
    palette = plt.get_cmap("tab10" if len(res.queues) <= 10 else "tab20")
    colour = {q: matplotlib.colors.to_hex(palette(i % palette.N)) for i, q in enumerate(res.queues)}

    windows: dict[str, list[tuple]] = {}
    for i, sample in enumerate(res.samples[:-1]):
        for name in sample.get("windows", ()):
            spans = windows.setdefault(name, [])
            if spans and spans[-1][1] == times[i]:
                spans[-1] = (spans[-1][0], times[i + 1])
            else:
                spans.append((times[i], times[i + 1]))
    pastel = plt.get_cmap("Pastel1")
    shade = {name: pastel(i % pastel.N) for i, name in enumerate(windows)}

    def figure(title_: str, ylabel: str):
        fig, ax = plt.subplots(figsize=(9, 3))
        ax.set(title=title_, ylabel=ylabel)
        locator = mdates.AutoDateLocator()
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
        for name, spans in windows.items():  # each tidal window in its own shade, as the samples saw it open
            for k, (a, b) in enumerate(spans):
                ax.axvspan(a, b, color=shade[name], alpha=0.18, lw=0, label=None if k else f"window {name}")
        return fig, ax

    plots = []
    fig, ax = figure("GPU utilization per site", "% of GPUs allocated")
    for site in res.sites:
        ax.plot(times, [s["util"].get(site, 0) * 100 for s in res.samples], label=site + (" (cloud)" if res.sites[site] else ""))
    ax.legend(fontsize=7, loc="upper left")
    plots.append(_png(fig))
    fig, ax = figure("GPUs in use per queue (dashed: its deserved share)", "GPUs")
    for q in res.queues:
        ax.plot(times, [s.get("used_gpus", {}).get(q, 0) for s in res.samples], color=colour[q], label=q)
        if q in res.deserved_gpus:
            ax.axhline(res.deserved_gpus[q], color=colour[q], ls="--", lw=0.8)
    ax.legend(fontsize=7, loc="upper left")
    plots.append(_png(fig))
    fig, ax = figure("Waiting GPUs per queue", "GPUs")
    for q in res.queues:
        ax.plot(times, [s["pending_gpus"].get(q, 0) for s in res.samples], color=colour[q], label=q)
    ax.legend(fontsize=7, loc="upper left")
    plots.append(_png(fig))
    reasons = sorted({r for s in res.samples for r in s.get("pending_by_reason", {})})
    if reasons:
        fig, ax = figure("Why GPUs waited: waiting GPUs by pending reason", "GPUs")
        ax.stackplot(times, *[[s.get("pending_by_reason", {}).get(r, 0) for s in res.samples] for r in reasons], labels=reasons, alpha=0.8)
        ax.legend(fontsize=7, loc="upper left")
        plots.append(_png(fig))
    fig, ax = figure("Cloud nodes and spend", "nodes")
    nodes_line = ax.step(times, [s["cloud_nodes"] for s in res.samples], where="post", label="cloud nodes")
    ax2 = ax.twinx()
    spend_line = ax2.plot(times, [s["spend_usd"] for s in res.samples], color="tab:red", label="spend (USD, cumulative)")
    ax2.set_ylabel("USD, cumulative")
    ax.legend(handles=[*nodes_line, *spend_line], fontsize=7, loc="upper left")
    plots.append(_png(fig))
    fig, ax = figure("Fragmentation: free GPUs on partly used nodes (a whole-node gang cannot use them)", "GPUs")
    for site in res.sites:
        ax.plot(times, [s.get("stranded_gpus", {}).get(site, 0) for s in res.samples], label=site)
    ax.legend(fontsize=7, loc="upper left")
    plots.append(_png(fig))
    monthly = res.budgets_usd_per_month
    if any(res.sites.values()):
        fig, ax = figure("Cloud spend by site and by queue, against monthly budgets (dotted)", "USD, cumulative")
        for site, cloud_site in res.sites.items():
            if cloud_site:
                ax.plot(times, [s.get("site_spend_usd", {}).get(site, 0) for s in res.samples], label=f"site {site}", linewidth=2)
        for q in res.queues:
            series = [s.get("queue_spend_usd", {}).get(q, 0) for s in res.samples]
            if any(series):
                ax.plot(times, series, color=colour[q], label=f"queue {q}", linestyle="--")
            if q in monthly:
                ax.axhline(monthly[q], color=colour[q], linestyle=":")
        if "" in monthly:
            ax.axhline(monthly[""], color="black", linestyle=":", label="the federation's monthly budget")
        ax.legend(fontsize=7, loc="upper left")
        plots.append(_png(fig))
    marks, reslices = res.preemptions, res.reslices
    if marks or reslices:
        fig, ax = figure("Preemptions (by reason) and MIG re-slices", "count per hour")
        bins = [start + timedelta(hours=h) for h in range(int(res.end_s // 3600) + 2)]
        for reason in sorted({r for _, r in marks}):
            ax.hist([start + timedelta(seconds=t) for t, r in marks if r == reason], bins=bins, histtype="step", label=f"preempted: {reason}")
        if reslices:
            ax.hist([start + timedelta(seconds=t) for t in reslices], bins=bins, histtype="step", linestyle="--", label="MIG GPU re-sliced")
        ax.legend(fontsize=7, loc="upper left")
        plots.append(_png(fig))
    fig, ax = plt.subplots(figsize=(9, 3))
    for q in res.queues:
        w = sorted(r.first_start_s - r.spec.submit_s for r in res.jobs.values() if r.spec.queue == q and r.first_start_s is not None)
        if w:
            ax.step(w, [(i + 1) / len(w) for i in range(len(w))], where="post", color=colour[q], label=q)
    ax.set(title="Wait-time CDF per queue", xlabel="wait (s)", ylabel="fraction of jobs")
    ax.set_xscale("symlog")
    ax.legend(fontsize=7)
    plots.append(_png(fig))

    queues = list(report["per_queue"])
    per_queue = _table(["queue", "wait p50 (s)", "p95", "p99", "GPU-hours", "cloud GPU-hours", "cost (USD)", "preempted"],
                       [[q, v["wait_s"]["p50"], v["wait_s"]["p95"], v["wait_s"]["p99"], v["gpu_hours"], v["cloud_gpu_hours"], v["cost_usd"], v["preempted"]]
                        for q, v in report["per_queue"].items()], [colour.get(q) for q in queues])
    jobs = _table(["jobs", "count"], [[k.replace("_", " "), v] for k, v in report["jobs"].items()])
    util = _table(["site", "GPU utilization"], [[k, f"{v:.1%}"] for k, v in report["gpu_utilization"].items()])
    cloud = _table(["cloud", ""], [[k.replace("_", " "), v] for k, v in report["cloud"].items()])
    waited = _table(["pending reason", "GPU-hours waited"], [[k, v] for k, v in report.get("waited_gpu_hours_by_reason", {}).items()])
    inv = _table(["invariant", "violations"], [[k.replace("_", " "), v] for k, v in report["invariants"].items()])
    imgs = "".join(plots)
    span = f"{start:%Y-%m-%d %H:%M} to {start + timedelta(seconds=res.end_s):%Y-%m-%d %H:%M} ({start.tzname() or 'local time'})"
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;color:#1d2433}}table{{border-collapse:collapse;margin:0 1.5em 1em 0;display:inline-table;vertical-align:top}}
td,th{{border:1px solid #d5d8e0;padding:3px 8px;text-align:left}}th{{background:#eef0f5}}.sw{{display:inline-block;width:.8em;height:.8em;margin-right:.4em;vertical-align:middle}}</style></head>
<body><h1>{html.escape(title)}</h1><p>{html.escape(span)}; the overall wait was p50 {report['wait_s']['p50']} s, p95 {report['wait_s']['p95']} s.</p>
<h2>Queues</h2>{per_queue}
<h2>Why work waited</h2>{waited}
<h2>Summary</h2>{jobs}{util}{cloud}{inv}
<h2>Over time</h2>{imgs}</body></html>"""
    path.write_text(doc, encoding="utf-8")
