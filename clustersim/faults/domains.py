"""Failure domains: components whose one failure takes several nodes out at once
(docs/fleet.md, "Correlated failures").

* ``leaf`` — a leaf (top-of-rack) switch of the topology: a fabric switch (one no server
  hosts) cabled to a NIC or GPU. Its failure takes every node with a NIC or GPU on it
  (on a rail-optimized fabric a leaf carries one rail of many nodes: each of them loses
  that rail, so each needs the switch back or a spare).
* ``rack`` — ``rack_nodes`` consecutive nodes behind one power distribution unit (the
  last rack may hold fewer).

A host taking its GPUs is the existing ``node`` class (and a ``gpu``/``nic`` failure
takes its node too): one node each. A domain's failure is one interruption — one
restart, one detection, one checkpoint read — but every node it took needs a spare or
the replacement wait (:mod:`.renewal`).
"""

from __future__ import annotations

from ..topology.inventory import unit_counts

#: the domain classes and what one unit of each is
DOMAINS = ("leaf", "rack")


def leaf_members(graph) -> tuple[tuple[int, ...], ...]:
    """The nodes each leaf switch of the topology ``graph`` takes (module doc), leaves in
    name order, nodes in order; leaves with no node are left out."""
    out = []
    for name, d in sorted(graph.nodes(data=True)):
        if d.get("kind") != "switch" or d.get("host") is not None:
            continue
        hosts = {
            graph.nodes[n].get("host")
            for n in graph.neighbors(name)
            if graph.nodes[n].get("kind") in ("nic", "gpu")
        }
        hosts.discard(None)
        if hosts:
            out.append(tuple(sorted(hosts)))
    return tuple(out)


def rack_members(nodes: int, rack_nodes: int) -> tuple[tuple[int, ...], ...]:
    """The nodes of each rack of ``rack_nodes`` consecutive nodes (the last: the rest)."""
    return tuple(tuple(range(i, min(i + rack_nodes, nodes))) for i in range(0, nodes, rack_nodes))


def domain_members(cluster: dict, graph, rack_nodes: int | None) -> dict[str, tuple[tuple[int, ...], ...]]:
    """Domain class → the nodes each of its units takes, for the ``cluster`` (a
    ClusterSpec's dict) and its topology ``graph`` (no racks without ``rack_nodes``)."""
    return {
        "leaf": leaf_members(graph),
        "rack": rack_members(cluster["nodes"], rack_nodes) if rack_nodes else (),
    }


def job_units(
    cluster: dict, graph, rack_nodes: int | None
) -> tuple[dict[str, int], dict[str, tuple[tuple[int, ...], ...]]]:
    """The units of the ``cluster`` with topology ``graph`` that failure rates are counted
    per (:func:`~clustersim.topology.inventory.unit_counts`, plus leaves and racks), and the
    nodes each domain unit takes (:func:`domain_members`)."""
    members = domain_members(cluster, graph, rack_nodes)
    return {**unit_counts(cluster, graph), **{c: len(m) for c, m in members.items()}}, members


def unit_sizes(members: dict[str, tuple[tuple[int, ...], ...]]) -> dict[str, tuple[int, ...]]:
    """Per domain class with units, how many nodes each of its ``members``' units takes."""
    return {c: tuple(len(u) for u in m) for c, m in members.items() if m}
