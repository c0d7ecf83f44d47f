"""Routes: which links a flow from one node to another crosses.

Paths are shortest by hop count. Where several next hops are equally short (the spines
of a fat-tree, the two directions around a torus), the choice is made hop by hop, as an
ECMP switch does, from a deterministic number of the flow:

    flow number = index(dst) + host(src) + index(flow_key)

where ``index(gpuN) = N`` and any other name or key maps through a stable BLAKE2b hash
(never Python's salted ``hash``). A node with ``k`` equally short next hops (sorted by
name) takes the one at ``flow number mod k``. This is the destination-mod-k rule of
InfiniBand fat-trees, extended by the source server and a flow key: unlike a random
hash (CRC32 or otherwise), it spreads permutation traffic evenly — 8 flows from one leaf
to 8 consecutive GPUs land 2 per spine on 4 spines — while every flow still keeps one
path, the same in every run and process. Flows between one pair of GPUs spread by giving
them different ``flow_key`` values (e.g. channel indices 0, 1, 2, …).

On the hierarchical topologies (``single_node``, ``fat_tree``, ``rail``, ``star``) the
builder declares its layout (graph attribute ``hierarchy``, :mod:`.hierarchy`) and a route
between GPUs is written down from it in O(levels) — the same path the search below finds.
Elsewhere (and for other endpoints) distances to each destination are computed once (one
reverse BFS per destination); next hops only for the nodes a path visits; every path is
cached. A topology whose routing is not shortest-path (a dragonfly's ``minimal`` or
``valiant``: :mod:`.dragonfly_routing`) declares the routers a flow between two servers
must visit (graph attribute ``waypoints``); the route joins them with shortest legs. An
adaptive policy (``ugal``) declares several such routes per flow: :meth:`Router.choices`
lists them, and a network model that sees its load picks one per flow
(:attr:`~clustersim.network.base.Fabric.adaptive_routing`); :meth:`Router.path` is the
first (the choice on an idle network).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Hashable
from itertools import pairwise

import networkx as nx

from ..errors import ScenarioError
from .hierarchy import Hierarchy
from .lazy import has_node, link_data, node_data


def _stable_hash(text: str) -> int:
    """A 64-bit hash of ``text`` that is the same in every process and run."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _index(name: Hashable) -> int:
    """``N`` for ``"gpuN"`` or an int, else a stable hash of the name's text."""
    if isinstance(name, int) and not isinstance(name, bool):
        return name
    if isinstance(name, str) and name.startswith("gpu") and name[3:].isdigit():
        return int(name[3:])
    return _stable_hash(str(name))


class Router:
    """Shortest-path routing with ECMP over a topology graph (see the module docstring)."""

    def __init__(self, graph: nx.DiGraph):
        self.graph = graph
        self.hierarchy: Hierarchy | None = graph.graph.get("hierarchy")
        self.waypoints = graph.graph.get("waypoints")  # a policy's routers to visit (module doc)
        self._pred: dict[str, tuple[str, ...]] | None = None  # who links into each node (on demand)
        self._dist: dict[str, dict[str, int]] = {}
        self._next: dict[tuple[str, str], tuple[str, ...]] = {}
        self._paths: dict[tuple, tuple[str, ...]] = {}
        self._choices: dict[tuple, tuple[tuple[str, ...], ...]] = {}
        self._costs: dict[tuple, tuple[float, float]] = {}
        self._hops: dict[tuple[str, str], tuple[float, float]] = {}  # a link's (latency, bandwidth)

    def _distances(self, dst: str) -> dict[str, int]:
        """Hop count from every node that reaches ``dst`` (one reverse BFS, cached)."""
        dist = self._dist.get(dst)
        if dist is None:
            # a plain level-by-level BFS over the predecessor lists: networkx's generic one
            # costs most of building a 1,000-GPU job's routes
            if self._pred is None:
                self._pred = {v: tuple(self.graph.pred[v]) for v in self.graph}
            pred, dist, level, hops = self._pred, {dst: 0}, [dst], 0
            while level:
                hops += 1
                reached = []
                for v in level:
                    for u in pred[v]:
                        if u not in dist:
                            dist[u] = hops
                            reached.append(u)
                level = reached
            self._dist[dst] = dist
        return dist

    def _next_hops(self, node: str, dst: str, dist: dict[str, int]) -> tuple[str, ...]:
        """``node``'s next hops on a shortest path to ``dst``, sorted by name (cached)."""
        key = (node, dst)
        hops = self._next.get(key)
        if hops is None:
            d, kinds = dist[node], self.graph.nodes
            hops = sorted(v for v in self.graph.succ[node] if dist.get(v, -1) == d - 1)
            if (
                len(hops) > 1
                and kinds[node].get("kind") == "gpu"
                and kinds[dst].get("kind") == "gpu"
                and kinds[node].get("host") == kinds[dst].get("host")
            ):
                # a NIC shared by several GPUs of a server is as many hops away as their
                # intra-node switch, but it does not carry traffic between them
                hops = [v for v in hops if kinds[v].get("kind") != "nic"] or hops
            hops = self._next[key] = tuple(hops)
        return hops

    def flow_number(self, src: str, dst: str, flow_key: Hashable = None) -> int:
        """The number ECMP choices are taken from (see the module docstring)."""
        host = node_data(self.graph, src).get("host", 0)
        return _index(dst) + host + (0 if flow_key is None else _index(flow_key))

    def path(self, src: str, dst: str, flow_key: Hashable = None) -> tuple[str, ...]:
        """The nodes a flow from ``src`` to ``dst`` visits, both ends included.

        ``flow_key`` distinguishes flows between the same pair (e.g. a channel index);
        flows with the same key take the same path.
        """
        key = (src, dst, flow_key)
        cached = self._paths.get(key)
        if cached is not None:
            return cached
        if self.hierarchy is not None and has_node(self.graph, src):
            path = self.hierarchy.path(src, dst, self.flow_number(src, dst, flow_key))
            if path is not None:
                self._paths[key] = path
                return path
        for end, name in (("src", src), ("dst", dst)):
            if name not in self.graph:
                raise ScenarioError(f"route.{end}", name, "a node of the topology (gpu0, gpu1, …)")
        path = self._paths[key] = self._join(src, dst, self._via(src, dst, flow_key)[0], flow_key)
        return path

    def choices(self, src: str, dst: str, flow_key: Hashable = None) -> tuple[tuple[str, ...], ...]:
        """Every route the topology's policy may give this flow, :meth:`path` first: one,
        or under an adaptive policy (a dragonfly's ``ugal``) its minimal and its Valiant
        route, for the network model to pick from by load (module doc)."""
        key = (src, dst, flow_key)
        hit = self._choices.get(key)
        if hit is None:
            hit = (self.path(src, dst, flow_key),)  # first: it checks both ends are nodes
            vias = self._via(src, dst, flow_key) if self.waypoints is not None else ((),)
            hit = self._choices[key] = hit + tuple(self._join(src, dst, via, flow_key) for via in vias[1:])
        return hit

    def _join(self, src: str, dst: str, via: tuple[str, ...], flow_key: Hashable) -> tuple[str, ...]:
        """The route from ``src`` through the routers ``via`` to ``dst`` (both nodes of the
        topology): shortest legs, ECMP choices from the flow's number."""
        flow = self.flow_number(src, dst, flow_key)
        nodes = [src]
        for end in (*via, dst):
            nodes.extend(self._walk(nodes[-1], end, flow)[1:])
        return tuple(nodes)

    def _via(self, src: str, dst: str, flow_key: Hashable) -> tuple[tuple[str, ...], ...]:
        """The routers the topology's policy sends a flow through, for each route it may
        take (one route through none by default)."""
        if self.waypoints is None:
            return ((),)
        s, d = node_data(self.graph, src).get("host"), node_data(self.graph, dst).get("host")
        if s is None or d is None or s == d:
            return ((),)
        return self.waypoints.alternatives(s, d, s + (0 if flow_key is None else _index(flow_key)))

    def _walk(self, src: str, dst: str, flow: int) -> list[str]:
        """The shortest route from ``src`` to ``dst``, ECMP choices from ``flow``."""
        dist = self._distances(dst)
        if src not in dist:
            raise ScenarioError("route.dst", dst, f"a node reachable from {src}; no links lead there")
        nodes = [src]
        node = src
        while node != dst:
            cands = self._next_hops(node, dst, dist)
            node = cands[0] if len(cands) == 1 else cands[flow % len(cands)]
            nodes.append(node)
        return nodes

    def links(self, src: str, dst: str, flow_key: Hashable = None) -> tuple[tuple[str, str], ...]:
        """The directed links ``(u, v)`` of :meth:`path`, in order."""
        p = self.path(src, dst, flow_key)
        return tuple(pairwise(p))

    def cost(self, src: str, dst: str, flow_key: Hashable = None) -> tuple[float, float]:
        """``(summed latency s, bottleneck bandwidth bytes/s)`` of :meth:`path` (cached);
        free wires add nothing (zero latency, infinite bandwidth)."""
        key = (src, dst, flow_key)
        cost = self._costs.get(key)
        if cost is None:
            latency, bottleneck, hops = 0.0, math.inf, self._hops
            for hop in self.links(src, dst, flow_key):
                known = hops.get(hop)
                if known is None:  # read from the graph once per link (a direct call routes n² pairs)
                    data = link_data(self.graph, *hop)
                    known = hops[hop] = (data["latency"], data["bandwidth"])
                latency += known[0]
                bottleneck = min(bottleneck, known[1])
            cost = self._costs[key] = (latency, bottleneck)
        return cost
