"""`fedctl demo --simulate`: the demo's story on a virtual clock, in a second.

It replays a small mixed workload through the real scheduling core, burst policy and
accounting: an inference job, two training gangs that contend for the IDC, and a gang that must
wait for burst nodes.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from federation.jobs import make_job
from federation.model import Federation
from federation.simulation.engine import SimOptions
from federation.simulation.run import simulate
from federation.simulation.traces import Trace, TraceJob


def demo_trace(fed: Federation) -> Trace:
    leaf = set(fed.leaf_queues)
    online = "online" if "online" in leaf else fed.leaf_queues[0]
    training = "training" if "training" in leaf else fed.leaf_queues[-1]
    batch = "batch" if "batch" in leaf else training
    spec = [
        dict(id="chat-serve", queue=online, submit_s=0, tasks=1, gpus_per_task=1, priority="online" if "online" in {p.name for p in fed.priority_classes} else None, kind="inference", duration=240),
        dict(id="train-a", queue=training, submit_s=1, tasks=2, gpus_per_task=2, kind="training", duration=120),
        dict(id="train-b", queue=training, submit_s=2, tasks=2, gpus_per_task=2, kind="training", duration=120),
        dict(id="train-big", queue=training, submit_s=3, tasks=2, gpus_per_task=4, kind="training", duration=90),
        dict(id="etl", queue=batch, submit_s=4, tasks=1, gpus_per_task=1, kind="batch", duration=60),
    ]
    jobs = []
    for s in spec:
        duration = s.pop("duration")
        jobs.append(TraceJob(make_job(fed, **s), float(duration)))
    return Trace(jobs)


def run_demo(fed: Federation, console: Console) -> dict:
    console.print(f"[bold]fedctl demo --simulate[/bold]: a simulation of [cyan]{fed.source}[/cyan]")
    report, res = simulate(fed, demo_trace(fed), None, SimOptions(seed=0), html=False)
    table = Table(title="jobs")
    for col in ("job", "queue", "gang", "submitted (s)", "started (s)", "site", "finished (s)", "preempted"):
        table.add_column(col)
    admits = {e["job"]: e["site"] for e in res.events if e["type"] == "admit"}
    for rec in res.jobs.values():
        s = rec.spec
        gang = f"{s.tasks} x {s.per_task.gpu:g} GPU"
        table.add_row(s.id, s.queue, gang, f"{s.submit_s:g}", "-" if rec.first_start_s is None else f"{rec.first_start_s:.1f}",
                      admits.get(s.id, "-"), "-" if rec.finish_s is None else f"{rec.finish_s:.1f}", str(rec.preemptions))
    console.print(table)
    for e in res.events:
        if e["type"] in ("scale_up", "node_down", "preempt"):
            console.print(f"  t={e['t']:>7.1f}s  {e['type']:<10} " + ", ".join(f"{k}={v}" for k, v in e.items() if k not in ("t", "type")))
    c = report["cloud"]
    console.print(f"summary: {report['jobs']['completed']}/{report['jobs']['submitted']} jobs completed, wait p95 {report['wait_s']['p95']} s, "
                  f"cloud {c['scale_ups']} scale-up(s), peak {c['peak_nodes']} node(s), {c['cost_usd']} USD; invariants {report['invariants']}")
    return report
