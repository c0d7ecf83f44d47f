"""What a cluster is made of, counted: GPUs, nodes, NICs, scale-out cables and switches
(the units failure rates and device power are counted per)."""

from __future__ import annotations


def unit_counts(cluster: dict, graph) -> dict[str, int]:
    """How many GPUs, nodes, NICs (``nic.per_node`` a node), scale-out cables (``wire`` and
    ``fabric`` links of the topology ``graph``, each cable once), switches (NVSwitches
    included) and fabric switches (not) the ``cluster`` (a ClusterSpec's dict) has."""
    nodes, gpn = cluster["nodes"], cluster["gpus_per_node"]
    nic = cluster.get("nic") or {}
    cables = {frozenset((a, b)) for a, b, d in graph.edges(data=True) if d.get("kind") in ("wire", "fabric")}
    return {
        "gpu": nodes * gpn,
        "node": nodes,
        "nic": nodes * int(nic.get("per_node") or 0),
        "link": len(cables),
        "switch": sum(1 for _, d in graph.nodes(data=True) if d.get("kind") == "switch"),
        # the fabric's own: leaves, spines, routers (a server's NVSwitch carries its host)
        "fabric_switch": sum(
            1 for _, d in graph.nodes(data=True) if d.get("kind") == "switch" and d.get("host") is None
        ),
    }
