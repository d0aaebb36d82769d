"""The simulator's clouds: requests for nodes carried out on the virtual clock, nodes that boot
(with jitter), requests that fail for lack of capacity (`failure_rate`, per group), and spot nodes
interrupted at random or after a known lifetime. What to ask for, and when to give up, is the
decision cycle's; this only plays the clouds' part."""

from __future__ import annotations

from dataclasses import replace

from federation.cycle import ProvisionFailure
from federation.inventory import group_node
from federation.scheduler import node_capacity
from policies import burst as burst_policy
from providers.errors import CAPACITY

FAIL_AFTER_S = 30.0  # a failed provisioning request reports back after this long


class SimCloud:
    """A mixin of the Simulator (it holds the nodes, requests, clock and random generator)."""

    def _scale_up(self, t: float, up: burst_policy.ScaleUp) -> None:
        g = self.fed.site(up.site).node_group(up.group)
        site = self.fed.site(up.site)
        failure_rate = site.provider.rate_for(up.group) if site.provider is not None and site.provider.kind == "simulated" else 0.0
        req_id = str(next(self.req_ids))
        self.in_flight[req_id] = burst_policy.InFlight(req_id, up.site, up.group, up.count, t, up.jobs)
        self.cloud_stats["scale_ups"] += 1
        self.emit(t, "scale_up", site=up.site, node_group=up.group, count=up.count, jobs=list(up.jobs))
        head_s = 0.0
        if site.cluster is not None:  # a cluster that is down comes up first: its workers join its head
            if up.site not in self.heads:
                self.heads[up.site] = t + site.cluster.head_boot_s
                self.ledger.set_heads(t, {s: self.fed.site(s).head_price_usd_per_hour for s in self.heads})  # billed from its launch
                self.emit(t, "cluster_up", site=up.site, ready_s=self.heads[up.site])
            head_s = self.heads[up.site]
        for i in range(up.count):  # a node slower than provisioning_timeout_s is given up on by the cycle
            if self.rng.random() < failure_rate:
                self.push(t + FAIL_AFTER_S, "failed", req_id, i)
            else:
                self.push(max(head_s, t + g.boot_s * self.rng.uniform(*self.opt.boot_jitter)), "ready", req_id, i)

    def _on_ready(self, t: float, req_id: str, index: int) -> None:
        f = self.in_flight.get(req_id)
        if f is None:
            return  # timed out before it came up
        g = self.fed.site(f.site).node_group(f.group)
        name = f"{f.site}/{f.group}-r{req_id}-{index}"
        node = group_node(f.site, g, name)
        self._node_up(t, node, request=f)
        self.state.cluster.add_node(node)
        self.state.quota.capacity = node_capacity(self.nodes.values())
        self._finish_request_part(req_id)
        lifetime = getattr(self.fed.site(f.site).provider, "group_lifetimes_s", {}).get(g.name)
        if lifetime is not None:
            self.push(t + lifetime, "interrupt", name)
        elif g.spot and g.spot_interruptions_per_hour > 0:
            self.push(t + self.rng.expovariate(g.spot_interruptions_per_hour / 3600), "interrupt", name)

    def _finish_request_part(self, req_id: str) -> None:
        f = self.in_flight[req_id]
        if f.count <= 1:
            del self.in_flight[req_id]
        else:
            self.in_flight[req_id] = replace(f, count=f.count - 1)

    def _on_failed(self, t: float, req_id: str, index: int) -> None:
        """The cloud had no capacity for one of the request's nodes: as a live provider does, the
        whole request fails and keeps nothing it made (a gang cannot use part of its nodes)."""
        f = self.in_flight.get(req_id)
        if f is None:
            return
        self.failed.append(ProvisionFailure(req_id, f.site, f.group, CAPACITY, "InsufficientCapacity"))
        self.emit(t, "provision_failed", site=f.site, node_group=f.group, reason="InsufficientCapacity")
        self._give_up(t, req_id)

    def _give_up(self, t: float, req_id: str) -> None:
        """A request is over undelivered: what it did bring up goes back (its jobs are requeued, as live)."""
        self.in_flight.pop(req_id, None)
        for name in [n for n, r in self.cloud.items() if r == req_id]:
            self._lose(t, name)
            self._node_down(t, name)

    def _on_interrupt(self, t: float, node: str) -> None:
        if node not in self.nodes:
            return
        self.emit(t, "spot_interruption", site=self.nodes[node].site, node=node)
        self._lose(t, node)
        self._node_down(t, node)
