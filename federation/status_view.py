"""`fedctl status` for people: the status document as tables and lines (rich renderables)."""

from __future__ import annotations

from collections import Counter

from rich.table import Table
from rich.text import Text


def renderables(doc: dict) -> list:
    """Queues, sites, running and waiting jobs, MIG layouts, cloud and spend, in that order."""
    items: list = []
    health = doc.get("health") or {}
    if health.get("stalled"):
        items.append(f"[bold red]the scheduling cycle is stalled[/]: no cycle has succeeded since {health.get('last_cycle_s') or 'start-up'}; "
                     f"last error: {health.get('last_error')} (see the controller's log)")
    table = Table(title=f"queues of {doc['federation']}")
    books = (doc.get("showback") or {}).get("queues") or {}
    for col in ("queue", "parent", "guarantee GPU", "deserved GPU", "using GPU", "borrowed GPU", "GPU-hours", "cloud USD"):
        table.add_column(col)
    for q in doc["queues"]:
        mine = books.get(q["name"], {})
        name = q["name"] + (f" [bold yellow]({q['stopped']}ed)[/]" if q.get("stopped") else "")
        table.add_row(name, q["parent"] or "", f"{q['guarantee']['gpu']:g}", f"{q['deserved']['gpu']:g}", f"{q['usage_gpu']:g}", f"{q['borrowed_gpu']:g}",
                      f"{mine.get('gpu_hours', 0):g}", f"{mine.get('cost_usd', 0):.2f}")
    items.append(table)
    tidal = doc.get("tidal") or {}
    if tidal.get("active") or tidal.get("next_transition"):
        items.append(f"tidal windows active: {', '.join(tidal['active']) or 'none'}; next change at {tidal.get('next_transition') or 'none within 8 days'}")
    if tidal.get("forecast_prewarm_gpus"):
        items.append(f"forecast: {tidal['forecast_prewarm_gpus']:g} cloud GPUs wanted up ahead of the predicted peak")
    if fe := tidal.get("forecast_error"):
        items.append(f"forecast error over the last {fe['held_out_hours']} h, learned without them: {fe['profile_mae']:.2f} GPUs per queue and hour "
                     f"(\"the same as an hour ago\": {fe['last_hour_mae']:.2f})")
    items.append(sites_table(doc))
    if doc["running"]:
        items.append(running_table(doc["running"]))
    items.append(pending_table(doc["pending"]))
    for site, gpus in (doc.get("mig") or {}).items():
        sliced = [g for g in gpus if g["layout"]]
        if sliced:
            items.append(Text(f"MIG at {site}: " + "; ".join(f"{g['node']} GPU {g['gpu']}: " + "+".join(i["profile"] for i in g["layout"])
                                                         + ("" if g["state"] == "READY" else f" ({g['state'].lower()})") for g in sliced)))
    cloud = doc.get("cloud") or {}
    budget = cloud.get("budget_usd_per_month")
    items.append(Text(f"cloud: {len(cloud.get('in_flight', []))} request(s) in flight; this month's spend {cloud.get('month_spend_usd', 0):,.2f} USD"
                      + (f" of {budget:,.0f} USD budgeted" if budget is not None else "")))
    by_site = [f"{site} {v['month_spend_usd']:,.2f}" for site, v in (cloud.get("sites") or {}).items()]
    by_queue = [f"{q} {v['month_spend_usd']:,.2f}" + (f" of {v['budget_usd_per_month']:,.0f}" if v["budget_usd_per_month"] is not None else "")
                for q, v in (cloud.get("queues") or {}).items() if v["month_spend_usd"] or v["budget_usd_per_month"] is not None]
    if by_site:
        items.append(Text("  by site (USD): " + "; ".join(by_site)))
    if by_queue:
        items.append(Text("  by queue (USD, of its own budget): " + "; ".join(by_queue)))
    return items


def sites_table(doc: dict):
    """Each site with its nodes, GPUs and what is allocated of them."""
    nodes, gpus, used = Counter(), Counter(), Counter()
    for n in doc["nodes"]:
        nodes[n["site"]] += 1
        gpus[n["site"]] += n["gpus"]
    for r in doc["running"]:
        used[r["site"]] += r.get("gpus", 0)
    table = Table(title="sites")
    for col in ("site", "kind", "connected", "nodes", "GPUs", "allocated GPU"):
        table.add_column(col)
    for s in doc["sites"]:
        connected = "no" if not s["connected"] else f"[red]silent {s['silent_s']:g} s[/red]" if s.get("silent_s") is not None else "yes"
        table.add_row(s["name"], s["kind"], connected, str(nodes[s["name"]]), f"{gpus[s['name']]:g}", f"{used[s['name']]:g}")
    return table


def running_table(running: list[dict]):
    table = Table(title="running jobs")
    for col in ("job", "queue", "site", "GPUs"):
        table.add_column(col, no_wrap=col == "job")
    for r in running:
        table.add_row(r["job"], r.get("queue") or "", r["site"] or "", f"{r.get('gpus', 0):g}")
    return table


def pending_table(pending: list[dict]):
    """Waiting jobs as `fedctl status` shows them."""
    table = Table(title="pending jobs")
    for col in ("job", "queue"):  # whole, never cut: people copy them into `fedctl explain`; the reason wraps
        table.add_column(col, no_wrap=True, min_width=max((len(p[col]) for p in pending), default=0))
    table.add_column("#")
    table.add_column("why")
    for p in pending:
        table.add_row(p["job"], p["queue"], str(p["position"]), p["message"] or "")
    return table
