"""report.json, events.jsonl and report.html of a simulation (CONTRACTS.md section 3)."""

from __future__ import annotations

import base64
import html
import io
import json
import math
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


def write_events(events: list[dict], path: Path) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for e in events:
            fh.write(json.dumps(e, separators=(",", ":")) + "\n")


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def write_html(report: dict, res: SimResult, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = [s["t"] / 3600 for s in res.samples]
    plots = []
    fig, ax = plt.subplots(figsize=(8, 3))
    for site in res.sites:
        ax.plot(hours, [s["util"].get(site, 0) * 100 for s in res.samples], label=site)
    ax.set(title="GPU utilization per site", xlabel="hours", ylabel="% of GPUs allocated")
    ax.legend(fontsize=7)
    plots.append(_png(fig))
    fig, ax = plt.subplots(figsize=(8, 3))
    for q in res.queues:
        ax.plot(hours, [s["pending_gpus"].get(q, 0) for s in res.samples], label=q)
    ax.set(title="Pending GPUs per queue", xlabel="hours", ylabel="GPUs")
    ax.legend(fontsize=7)
    plots.append(_png(fig))
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.step(hours, [s["cloud_nodes"] for s in res.samples], where="post", label="cloud nodes")
    ax.set(title="Cloud nodes and spend", xlabel="hours", ylabel="nodes")
    ax2 = ax.twinx()
    ax2.plot(hours, [s["spend_usd"] for s in res.samples], color="tab:red", label="spend (USD)")
    ax2.set_ylabel("USD, cumulative")
    plots.append(_png(fig))
    fig, ax = plt.subplots(figsize=(8, 3))
    for q in res.queues:
        w = sorted(r.first_start_s - r.spec.submit_s for r in res.jobs.values() if r.spec.queue == q and r.first_start_s is not None)
        if w:
            ax.step(w, [(i + 1) / len(w) for i in range(len(w))], where="post", label=q)
    ax.set(title="Wait-time CDF per queue", xlabel="wait (s)", ylabel="fraction of jobs")
    ax.set_xscale("symlog")
    ax.legend(fontsize=7)
    plots.append(_png(fig))
    rows = "".join(
        f"<tr><td>{html.escape(q)}</td><td>{v['wait_s']['p50']}</td><td>{v['wait_s']['p95']}</td><td>{v['wait_s']['p99']}</td>"
        f"<td>{v['gpu_hours']}</td><td>{v['cloud_gpu_hours']}</td><td>{v['cost_usd']}</td><td>{v['preempted']}</td></tr>"
        for q, v in report["per_queue"].items()
    )
    imgs = "".join(f'<img alt="plot" src="data:image/png;base64,{p}"><br>' for p in plots)
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>Jobs: {report['jobs']}. Overall wait: {report['wait_s']}. Utilization: {report['gpu_utilization']}.</p>
<p>Cloud: {report['cloud']}. Invariants: {report['invariants']}.</p>
<table><tr><th>queue</th><th>wait p50 (s)</th><th>p95</th><th>p99</th><th>GPU-hours</th><th>cloud GPU-hours</th><th>cost (USD)</th><th>preempted</th></tr>{rows}</table>
{imgs}</body></html>"""
    path.write_text(doc, encoding="utf-8")
