"""The nodes a federation's config lists, as the simulator and the live controller both see them.

A fixed node group's nodes are named `<site>/<group>-<i>` (the name their Ray node carries as its
`federation-node/<name>` resource) and in the group's `rack`, or spread round-robin over its `racks`,
so that gang topology decides alike live and in a replay. Nodes an API lists (a Kubernetes fleet, a cloud's
instances) carry their own names and racks.
"""

from __future__ import annotations

from collections.abc import Iterable

from federation.model import Federation, Node, NodeGroup


def group_node(site: str, g: NodeGroup, name: str, rack: str | None = None, schedulable: bool = True) -> Node:
    """A node of a group, its capacity the group's (a cloud node's rack is its group's own, unless listed)."""
    r = g.node_resources
    return Node(name, site, g.name, g.gpu_model, g.gpus_per_node, r.cpu_milli, r.memory_mib, rack=rack or g.rack or f"{g.name}-rack-0",
                schedulable=schedulable)


def config_nodes(fed: Federation, sites: Iterable[str] | None = None) -> tuple[Node, ...]:
    """The fixed nodes the config lists (for these sites; default every site)."""
    wanted = None if sites is None else set(sites)
    return tuple(
        group_node(s.name, g, f"{s.name}/{g.name}-{i}", rack=g.rack or f"{g.name}-rack-{i % g.racks}")
        for s in fed.sites if wanted is None or s.name in wanted for g in s.node_groups for i in range(g.count)
    )
