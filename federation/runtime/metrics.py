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
        yield from (usage, borrowed, pending, admissions, preemptions, nodes, in_flight, spend)
        yield from ctl.cycle_seconds.collect()
