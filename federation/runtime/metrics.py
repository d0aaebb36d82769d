"""Prometheus metrics for `GET /metrics`, read from the controller at scrape time."""

from __future__ import annotations

from collections import Counter

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class FederationCollector:
    def __init__(self, ctl):
        self.ctl = ctl

    def collect(self):
        ctl = self.ctl
        doc = ctl.status()
        usage = GaugeMetricFamily("federation_queue_gpu_usage", "GPUs used by each queue's running jobs", labels=["queue"])
        borrowed = GaugeMetricFamily("federation_queue_gpu_borrowed", "GPUs each queue uses beyond its deserved share", labels=["queue"])
        for q in doc["queues"]:
            usage.add_metric([q["name"]], q["usage_gpu"])
            borrowed.add_metric([q["name"]], q["borrowed_gpu"])
        pending = GaugeMetricFamily("federation_pending_jobs", "Pending jobs by pending reason", labels=["reason"])
        for reason, n in sorted(Counter(p["reason"] or "New" for p in doc["pending"]).items()):
            pending.add_metric([reason], n)
        admissions = CounterMetricFamily("federation_admissions", "Gangs admitted since the controller started", labels=["site"])
        for site, n in sorted(ctl.admissions.items()):
            admissions.add_metric([site], n)
        preemptions = CounterMetricFamily("federation_preemptions", "Gangs preempted since the controller started", labels=["reason"])
        for reason, n in sorted(ctl.preemptions.items()):
            preemptions.add_metric([reason], n)
        nodes = GaugeMetricFamily("federation_cloud_nodes", "Cloud nodes up, by site", labels=["site"])
        for site, n in sorted(Counter(n.site for n in ctl.cloud_nodes).items()):
            nodes.add_metric([site], n)
        in_flight = GaugeMetricFamily("federation_cloud_requests_in_flight", "Cloud capacity requests not yet delivered", labels=["site"])
        for site, n in sorted(Counter(f["site"] for f in doc["cloud"]["in_flight"]).items()):
            in_flight.add_metric([site], n)
        spend = GaugeMetricFamily("federation_cloud_spend_usd_month", "Cloud spend metered this month (federation time zone)")
        spend.add_metric([], doc["cloud"]["month_spend_usd"])
        health = doc["health"]
        last = GaugeMetricFamily("federation_last_cycle_timestamp_seconds", "When the last scheduling cycle succeeded (Unix time; 0: none yet)")
        last.add_metric([], health["last_cycle_s"] or 0.0)
        stalled = GaugeMetricFamily("federation_cycle_stalled", "1 while no scheduling cycle has succeeded for ten cycles (at least 30 s)")
        stalled.add_metric([], 1.0 if health["stalled"] else 0.0)
        errors = CounterMetricFamily("federation_errors", "Faults in the controller since it started, by where (cycle, dispatch)", labels=["where"])
        for where in ("cycle", "dispatch"):
            errors.add_metric([where], health["errors"].get(where, 0))
        yield from (usage, borrowed, pending, admissions, preemptions, nodes, in_flight, spend, last, stalled, errors)
        yield from ctl.cycle_seconds.collect()
