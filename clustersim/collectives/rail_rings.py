"""Rail-aligned ring channels: NCCL's rings on rail-optimized and multi-plane fabrics.

On a fat tree any NIC reaches any other through the leaves, so a ring channel may leave a
host through one GPU's NIC and enter the next host through another's (:func:`.ring.ring_orders`
rotates every host's members alike: channel ``c`` leaves through local GPU ``c − 1`` and
enters through local GPU ``c``). On a ``rail`` or ``multi_plane`` fabric those two NICs sit on
different rails (planes) that join only over NVLink (PXN) or a spine, so the crossings of
neighbouring channels meet on one NIC and the ring runs at about half the NICs' rate.
NCCL does not build such rings there: its search (``src/graph/search.cc``, rings with the
same NIC in and out, ``NCCL_CROSS_NIC`` 0 or 2) keeps each channel on one rail, so the
channel leaving a host through NIC ``i`` enters the next host through its NIC ``i`` — GPU ``i``
of each node talks to GPU ``i`` of the next ("rail-aligned").

:func:`aligned_orders` builds such rings: in channel ``c`` host ``h`` is entered through
member ``e_h`` and left through ``e_{h+1}`` (the next host's entry position, so every crossing
joins two GPUs on one rail); ``e_h`` alternates between positions ``c`` and ``c + 1`` from
host to host (an odd host count ends on ``c + 2`` so the ring closes on position ``c``), and
the other members sit between in rotated order. The crossings of the channels use distinct
positions between every pair of hosts, so each NIC carries one channel each way — as on a
fat tree, and with the same hops (GPU → NIC → rail → NIC → GPU against GPU → NIC → leaf →
NIC → GPU). It applies where every host holds the same number (≥ 2; ≥ 3 for an odd host
count) of members and position ``p`` of every host's list uses the same NIC index; other
groups keep :func:`.ring.ring_orders`.
"""

from __future__ import annotations

from ..topology.lazy import node_data, successors

#: topology kinds whose NICs of one index form a rail (plane) reached only through it
RAIL_KINDS = frozenset({"rail", "multi_plane"})


def nic_index(graph, gpu: str) -> int | None:
    """The index ``k`` of the NIC ``node{n}.nic{k}`` that ``gpu`` links to (None: no NIC)."""
    for nbr in successors(graph, gpu):
        if node_data(graph, nbr).get("kind") == "nic":
            return int(nbr.rsplit("nic", 1)[1])
    return None


def rail_matched(graph, hosts: dict[object, list[str]]) -> bool:
    """Whether ``graph`` is a rail or multi-plane fabric and every host of ``hosts`` has the
    same number of members, position by position on the same NIC index (module docstring)."""
    if graph is None or graph.graph.get("kind") not in RAIL_KINDS or len(hosts) < 2:
        return False
    locals_ = list(hosts.values())
    g = len(locals_[0])
    if g < (3 if len(locals_) % 2 else 2) or any(len(m) != g for m in locals_):
        return False
    first = [nic_index(graph, m) for m in locals_[0]]
    return None not in first and all([nic_index(graph, m) for m in grp] == first for grp in locals_[1:])


def aligned_orders(hosts: dict[object, list[str]], channels: int) -> list[list[str]]:
    """Rail-aligned ring orders, one per channel, for hosts :func:`rail_matched` accepts."""
    locals_ = list(hosts.values())
    n_hosts, g = len(locals_), len(locals_[0])
    shift = [h % 2 for h in range(n_hosts)]
    if n_hosts % 2:
        shift[-1] = 2  # an odd ring closes from position c + 2 back onto c
    orders = []
    for c in range(channels):
        entry = [(c + s) % g for s in shift]
        order = []
        for h, grp in enumerate(locals_):
            e, x = entry[h], entry[(h + 1) % n_hosts]
            middle = [(e + k) % g for k in range(1, g) if (e + k) % g != x]
            order += [grp[p] for p in (e, *middle, x)]
        orders.append(order)
    return orders
