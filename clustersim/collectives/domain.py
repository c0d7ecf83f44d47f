"""Whether a collective runs inside one host's private links (its NVLink domain), where a
network model that shares links at flow level may time it by the α-β model instead
(:attr:`~clustersim.network.base.Fabric.coarse_collectives`, docs/fidelity.md).

A group qualifies when its members sit on one host, no route between two of them passes a
NIC or a node of another host, and no route between a member and a GPU of another host
uses a link of those routes: traffic between hosts (data-parallel rings, pipeline sends,
another job) can then never share a link with it. Its α-β time (:mod:`.cost`) is what the
schedule takes on those links when they are idle; what it gives up is contention with other
traffic inside the same host at the same moment (docs/fidelity.md).
"""

from __future__ import annotations

from ..topology.lazy import has_node, node_data
from ..topology.servers import number
from .group import Group


def in_private_domain(group: Group) -> bool:
    """Whether ``group``'s collectives can share no link with traffic between hosts (module
    docstring)."""
    if group.graph is None or len(group.hosts) != 1 or len(group.members) < 2:
        return False
    (host,) = group.hosts
    inside: set[tuple[str, str]] = set()
    for a in group.members:
        for b in group.members:
            if a != b:
                nodes = group.path(a, b)[2]
                for x in nodes[1:-1]:
                    data = node_data(group.graph, x)
                    if data.get("kind") == "nic" or data.get("host", host) != host:
                        return False
                inside.update(zip(nodes, nodes[1:], strict=False))
    outside = _gpu_elsewhere(group, host)
    if outside is None:
        return True
    for m in group.members:
        for src, dst in ((m, outside), (outside, m)):
            nodes = group.path(src, dst)[2]
            if inside.intersection(zip(nodes, nodes[1:], strict=False)):
                return False
    return True


def _gpu_elsewhere(group: Group, host) -> str | None:
    """A GPU of another host than ``host`` (None: the cluster has one host): the GPUs
    numbered next to the members' first (builders number a host's GPUs together), else the
    first such node of the graph."""
    numbers = [i for i in (number(m, "gpu") for m in group.members) if i is not None]
    near = [f"gpu{max(numbers) + 1}", f"gpu{min(numbers) - 1}"] if numbers else []
    for name in near:
        if has_node(group.graph, name) and _elsewhere(node_data(group.graph, name), host):
            return name
    return next((x for x, data in group.graph.nodes(data=True) if _elsewhere(data, host)), None)


def _elsewhere(data: dict, host) -> bool:
    return data.get("kind") == "gpu" and data.get("host") != host
