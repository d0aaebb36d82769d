"""Prometheus metrics for `GET /metrics`, read from the controller at scrape time.

Every series a dashboard or an alert names exists from the first scrape: counters and per-site
or per-queue gauges start at 0 for every site, queue and reason the federation knows, rather
than appearing once something happens (a missing series makes `rate()` and alerts blind).
`deploy/` holds the Grafana dashboard and the alert rules over these names.
"""

from __future__ import annotations

from collections import Counter
from importlib.metadata import PackageNotFoundError, version

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

PREEMPTION_REASONS = ("Reclaim", "ReclaimWhileBorrowing", "Priority", "Consolidation", "QuotaShrink", "WindowPrepare", "QueueDrained")


def package_version() -> str:
    try:
        return version("gpu-federation")
    except PackageNotFoundError:
        return "unknown"


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


class FederationCollector:
    def __init__(self, ctl):
        self.ctl = ctl

    def collect(self):
        import ray

        ctl = self.ctl
        doc = ctl.status()
        now = ctl.clock()
        fed = ctl.fed
        cloud_sites = [s.name for s in fed.sites if s.is_cloud]

        info = _gauge("federation_build_info", "The running build (always 1)", ["version", "ray_version", "federation"])
        info.add_metric([package_version(), ray.__version__, fed.name], 1)
        yield info

        usage = _gauge("federation_queue_gpu_usage", "GPUs used by each queue's running jobs", ["queue"])
        borrowed = _gauge("federation_queue_gpu_borrowed", "GPUs each queue uses beyond its deserved share", ["queue"])
        quota = {k: _gauge(f"federation_queue_gpu_{k}", f"Each queue's {k} in GPUs now (tidal windows applied; +Inf: no limit)", ["queue"])
                 for k in ("guarantee", "deserved", "capability")}
        for q in doc["queues"]:
            usage.add_metric([q["name"]], q["usage_gpu"])
            borrowed.add_metric([q["name"]], q["borrowed_gpu"])
            quota["guarantee"].add_metric([q["name"]], q["guarantee"]["gpu"] or 0.0)
            quota["deserved"].add_metric([q["name"]], q["deserved"]["gpu"] if q["deserved"]["gpu"] is not None else float("inf"))
            quota["capability"].add_metric([q["name"]], q["capability"]["gpu"] if q["capability"]["gpu"] is not None else float("inf"))
        yield from (usage, borrowed, *quota.values())

        # showback (the status document has just accounted it up to now)
        gpu_s = CounterMetricFamily("federation_queue_gpu_seconds", "GPU-seconds each queue's jobs held since the controller started", labels=["queue"])
        cloud_s = CounterMetricFamily("federation_queue_cloud_gpu_seconds", "Of those, GPU-seconds on cloud nodes", labels=["queue"])
        cost = CounterMetricFamily("federation_queue_cloud_cost_usd", "Cloud cost charged to each queue since the controller started "
                                   "(a node's cost split by GPU share; idle time to the queue that asked for it)", labels=["queue"])
        with ctl.showback_lock:  # the cycle books in its own thread
            books = ctl.showback
            for q in fed.queues:
                gpu_s.add_metric([q.name], books.gpu_s.get(q.name, 0.0))
                cloud_s.add_metric([q.name], books.cloud_gpu_s.get(q.name, 0.0))
                cost.add_metric([q.name], books.cost.get(q.name, 0.0))
        yield from (gpu_s, cloud_s, cost)

        pending = _gauge("federation_pending_jobs", "Pending jobs by pending reason", ["reason"])
        for reason, n in sorted(Counter(p["reason"] or "New" for p in doc["pending"]).items()):
            pending.add_metric([reason], n)
        by_queue = _gauge("federation_queue_pending_jobs", "Pending jobs by queue", ["queue"])
        oldest = _gauge("federation_queue_oldest_pending_seconds", "How long each queue's longest-waiting job has waited (0: none waits)", ["queue"])
        for q in fed.leaf_queues:
            mine = [p for p in doc["pending"] if p["queue"] == q]
            by_queue.add_metric([q], len(mine))
            oldest.add_metric([q], max((now - p["submitted_s"] for p in mine), default=0.0))
        yield from (pending, by_queue, oldest)

        site_gpus = _gauge("federation_site_gpus", "GPUs on each site's schedulable nodes now", ["site"])
        site_used = _gauge("federation_site_gpus_allocated", "GPUs each site has given to jobs", ["site"])
        gpus, used = Counter(), Counter()
        for n in ctl.nodes:
            if n.schedulable:
                gpus[n.site] += n.gpus
        for r in doc["running"]:
            used[r["site"]] += r.get("gpus", 0.0)
        silent = _gauge("federation_site_silent_seconds", "How long each site has not answered the federation (0: it answers)", ["site"])
        silent_s = {s["name"]: s.get("silent_s") or 0.0 for s in doc["sites"]}
        for s in fed.sites:
            site_gpus.add_metric([s.name], gpus[s.name])
            site_used.add_metric([s.name], used[s.name])
            silent.add_metric([s.name], silent_s.get(s.name, 0.0))
        yield from (site_gpus, site_used, silent)

        admissions = CounterMetricFamily("federation_admissions", "Gangs admitted since the controller started", labels=["site"])
        for s in fed.sites:
            admissions.add_metric([s.name], ctl.admissions.get(s.name, 0))
        preemptions = CounterMetricFamily("federation_preemptions", "Gangs preempted since the controller started", labels=["reason"])
        for reason in sorted(set(PREEMPTION_REASONS) | set(ctl.preemptions)):
            preemptions.add_metric([reason], ctl.preemptions.get(reason, 0))
        yield from (admissions, preemptions)

        nodes = _gauge("federation_cloud_nodes", "Cloud nodes up, by site", ["site"])
        in_flight = _gauge("federation_cloud_requests_in_flight", "Cloud capacity requests not yet delivered", ["site"])
        stuck = _gauge("federation_cloud_oldest_request_seconds", "Age of each site's oldest undelivered cloud request (0: none)", ["site"])
        up = Counter(n.site for n in ctl.cloud_nodes)
        asked = Counter(f["site"] for f in doc["cloud"]["in_flight"])
        for s in cloud_sites:
            nodes.add_metric([s], up[s])
            in_flight.add_metric([s], asked[s])
            stuck.add_metric([s], max((now - f.requested_s for f in ctl.in_flight.values() if f.site == s), default=0.0))
        spend = _gauge("federation_cloud_spend_usd_month", "Cloud spend metered this month (federation time zone)")
        spend.add_metric([], doc["cloud"]["month_spend_usd"])
        yield from (nodes, in_flight, stuck, spend)
        if fed.policies.burst.budget_usd_per_month is not None:
            budget = _gauge("federation_cloud_budget_usd_month", "The month's cloud budget (policies.burst.budget_usd_per_month)")
            budget.add_metric([], fed.policies.burst.budget_usd_per_month)
            yield budget
        by_queue = _gauge("federation_queue_cloud_spend_usd_month", "Cloud spend charged to each queue this month (showback split)", ["queue"])
        queue_budget = _gauge("federation_queue_cloud_budget_usd_month", "Each queue's own monthly cloud budget (burst.budget_usd_per_month)", ["queue"])
        for q, v in doc["cloud"]["queues"].items():
            by_queue.add_metric([q], v["month_spend_usd"])
            if v["budget_usd_per_month"] is not None:
                queue_budget.add_metric([q], v["budget_usd_per_month"])
        by_site = _gauge("federation_site_cloud_spend_usd_month", "Cloud spend of each cloud site this month (showback)", ["site"])
        for site, v in doc["cloud"]["sites"].items():
            by_site.add_metric([site], v["month_spend_usd"])
        yield from (by_queue, queue_budget, by_site)

        health = doc["health"]
        last = _gauge("federation_last_cycle_timestamp_seconds", "When the last scheduling cycle succeeded (Unix time; 0: none yet)")
        last.add_metric([], health["last_cycle_s"] or 0.0)
        stalled = _gauge("federation_cycle_stalled", "1 while no scheduling cycle has succeeded for ten cycles (at least 30 s)")
        stalled.add_metric([], 1.0 if health["stalled"] else 0.0)
        errors = CounterMetricFamily("federation_errors", "Faults in the controller since it started, by where (cycle, dispatch)", labels=["where"])
        for where in ("cycle", "dispatch"):
            errors.add_metric([where], health["errors"].get(where, 0))
        yield from (last, stalled, errors)
        yield from ctl.cycle_seconds.collect()
