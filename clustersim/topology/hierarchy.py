"""Routes on hierarchical topologies named from the hierarchy, without searching the graph.

The builders of ``single_node``, ``fat_tree``/``leaf_spine``, ``rail`` and ``star`` lay out
servers the same way (:mod:`.servers`: ``gpu{i}``, the intra-node switch ``nvswitch{n}`` or
``pcie{n}``, NIC ``node{n}.nic{k}`` serving GPU ``j`` when ``k = j · nics // gpus_per_node``)
and join the NICs to a network of known shape. Each declares that shape as a
:class:`Hierarchy` (graph attribute ``hierarchy``), and :meth:`Hierarchy.path` writes a
route's nodes down in O(levels): the same path, ECMP choice included, that the
breadth-first router (:class:`~.routing.Router`) finds on the graph — shortest by hops,
at a node with ``k`` equally short next hops (sorted by name) the one at ``flow mod k``,
the intra-node switch rather than a shared NIC between two GPUs of one server.
tests/test_hierarchy_routes.py compares the two on every pair of random builds.

Why each route is the shortest, by hop count (``S`` on server ``s``, ``D`` on server ``h``):

* one server: ``S → switch → D`` (through a NIC both share is as short, and excluded);
* ``fat_tree``: ``S → NIC → leaf → NIC → D`` under one leaf; else ``S → NIC → leaf →
  spine → leaf → NIC → D``, where every spine is as short (the ECMP choice);
* ``rail``: on one rail ``S → NIC → rail → NIC → D``; across rails six hops three ways —
  forwarded over NVLink first (``S → switch → Y → NIC → rail(D) → NIC → D``, ``Y`` any
  GPU of server ``s`` on ``D``'s rail), on ``S``'s rail to server ``h`` and over NVLink
  there (``… → rail(S) → NIC → Z → switch → D``, ``Z`` any GPU on that NIC), or with
  spines ``… → rail(S) → spine → rail(D) → NIC → D``; each fork is an ECMP choice among
  the names at that hop;
* ``star``: ``S → NIC → centre → NIC → D`` (the centre is the ``server`` node, or the
  ``hub`` in front of it), and to or from ``server`` itself.

A graph whose links changed after the build (``cluster.failed_links``) or whose nodes were
renamed (a ``wan`` site) has no ``hierarchy``: the breadth-first router serves it, as it
serves ``ring``, ``torus_2d``, ``wan`` and ``custom`` graphs. Endpoints other than GPUs (and
a star's ``server``) are left to it too.
"""

from __future__ import annotations

from dataclasses import dataclass

from .servers import ServerSpec

#: the networks above the NICs that :meth:`Hierarchy.path` knows
NETWORKS = ("none", "clos", "rail", "star")


@dataclass(frozen=True)
class Hierarchy:
    """The layout a hierarchical builder made (module docstring): enough to name every
    route's hops. ``spines`` are sorted by name, as ECMP takes them."""

    network: str
    gpus: int
    gpus_per_node: int
    nics_per_node: int
    switch: str
    nodes_per_leaf: int = 1
    spines: tuple[str, ...] = ()
    centre: str = ""

    @classmethod
    def of(cls, spec: ServerSpec, network: str, spines: int = 0, **kw) -> Hierarchy:
        """The hierarchy of servers built from ``spec`` (:func:`.servers.add_server`) under
        ``network`` with ``spines`` spine switches named ``spine{i}``."""
        assert network in NETWORKS, network
        return cls(
            network=network,
            gpus=spec.num_gpus,
            gpus_per_node=spec.gpus_per_node,
            nics_per_node=spec.nics_per_node,
            switch="nvswitch" if spec.intra_kind == "nvswitch" else "pcie",
            spines=tuple(sorted(f"spine{i}" for i in range(spines))),
            **kw,
        )

    def placement(self) -> dict[str, tuple[int, frozenset, int]]:
        """Per GPU (site 0, the switches its NIC links to, server): what
        :func:`.plugin.levels` reads off the graph, from the layout."""
        gpn, nics = self.gpus_per_node, self.nics_per_node
        # the switches above each of a server's GPUs, one set per leaf or rail shared by its GPUs:
        # under a clos the server's leaf, else the same for every server
        if self.network == "rail":
            every = [frozenset({f"rail{j * nics // gpn}"}) for j in range(gpn)]
        else:  # a lone server's NICs link to no switch; a star's to its centre (the hub is one)
            every = [frozenset({self.centre} if self.centre not in ("", "server") else ())] * gpn
        out = {}
        for host in range(self.gpus // gpn):
            above = (
                [frozenset({f"leaf{host // self.nodes_per_leaf}"})] * gpn if self.network == "clos" else every
            )
            for j, switches in enumerate(above):
                out[f"gpu{host * gpn + j}"] = (0, switches, host)
        return out

    def _gpu(self, name: str) -> int | None:
        """``N`` for a GPU node ``gpuN`` of this hierarchy, else None."""
        if name.startswith("gpu") and name[3:].isdigit():
            i = int(name[3:])
            if i < self.gpus and name == f"gpu{i}":
                return i
        return None

    def _nic(self, gpu: int) -> tuple[str, int]:
        """The NIC GPU ``gpu`` uses and its index on the server (its rail)."""
        gpn = self.gpus_per_node
        host, k = divmod(gpu, gpn)
        k = k * self.nics_per_node // gpn
        return f"node{host}.nic{k}", k

    def _on_nic(self, host: int, k: int) -> list[str]:
        """The GPUs of server ``host`` that use its NIC ``k``, sorted by name."""
        gpn, nics = self.gpus_per_node, self.nics_per_node
        return sorted(f"gpu{host * gpn + j}" for j in range(gpn) if j * nics // gpn == k)

    def path(self, src: str, dst: str, flow: int) -> tuple[str, ...] | None:
        """The nodes from ``src`` to ``dst`` (flow number ``flow``, :meth:`.Router.flow_number`),
        or None for endpoints this hierarchy does not route (the caller searches the graph)."""
        s, d = self._gpu(src), self._gpu(dst)
        if self.network == "star" and "server" in (src, dst):
            hub = () if self.centre == "server" else (self.centre,)
            if src == dst:
                return (src,)
            if src == "server" and d is not None:
                return (src, *hub, self._nic(d)[0], dst)
            if dst == "server" and s is not None:
                return (src, self._nic(s)[0], *hub, dst)
        if s is None or d is None:
            return None
        if s == d:
            return (src,)
        gpn = self.gpus_per_node
        host_s, host_d = s // gpn, d // gpn
        if host_s == host_d:
            return (src, f"{self.switch}{host_s}", dst)
        (nic_s, k_s), (nic_d, k_d) = self._nic(s), self._nic(d)
        if self.network == "clos":
            leaf_s, leaf_d = f"leaf{host_s // self.nodes_per_leaf}", f"leaf{host_d // self.nodes_per_leaf}"
            if leaf_s == leaf_d:
                return (src, nic_s, leaf_s, nic_d, dst)
            spine = self.spines[flow % len(self.spines)]
            return (src, nic_s, leaf_s, spine, leaf_d, nic_d, dst)
        if self.network == "star":
            return (src, nic_s, self.centre, nic_d, dst)
        assert self.network == "rail", self.network
        rail_s, rail_d = f"rail{k_s}", f"rail{k_d}"
        if k_s == k_d:
            return (src, nic_s, rail_s, nic_d, dst)
        switch_s = f"{self.switch}{host_s}"
        if sorted((nic_s, switch_s))[flow % 2] == switch_s:  # NVLink first, on the source server
            ys = self._on_nic(host_s, k_d)
            return (src, switch_s, ys[flow % len(ys)], f"node{host_s}.nic{k_d}", rail_d, nic_d, dst)
        across = f"node{host_d}.nic{k_s}"  # the source's rail to the destination server
        hop = sorted((across, *self.spines))[flow % (1 + len(self.spines))]
        if hop != across:
            return (src, nic_s, rail_s, hop, rail_d, nic_d, dst)
        zs = self._on_nic(host_d, k_s)
        return (src, nic_s, rail_s, across, zs[flow % len(zs)], f"{self.switch}{host_d}", dst)
