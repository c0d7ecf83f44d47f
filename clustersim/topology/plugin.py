"""What a topology plugin declares: its builder, its typed options and its placement levels.

A topology module defines ``TOPOLOGIES`` entries (:class:`Topology`) at import; the registry
(:mod:`.registry`) imports every module of this package, so adding a topology is adding one
file. Its builder receives a :class:`Site`: the servers, read once, and its options, typed. ``placement(graph)`` says where each GPU sits — ``(site, leaf, host)``: the site
index, the switches the GPU's own NIC links to, its server — for topologies whose routes
depend only on the levels two GPUs share; folding (:mod:`clustersim.parallel.fold_routes`)
compares twins' levels with their representative's. A topology whose routes depend on
position returns a reason string instead, and folding is refused there; one whose routes
depend on position at some levels only returns :class:`Placements` naming them, and folding
is refused where a folded transfer crosses at one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

import networkx as nx
from pydantic import BaseModel, ConfigDict

from ..plugins import Plugin, Registry
from .servers import ServerSpec

#: where a GPU sits: (site index, switches its NIC links to, server index)
Placement = tuple[int, frozenset, int]


class Placements(dict):
    """GPU name → :data:`Placement`, with ``unlike``: the levels (indices of
    :data:`clustersim.parallel.fold_routes.LEVELS`) at which two GPUs' route depends on where
    they sit, each with why (a rail topology's spines: cross-rail routes are an ECMP choice
    between unlike paths)."""

    def __init__(self, where: Mapping[str, Placement], unlike: Mapping[int, str]):
        super().__init__(where)
        self.unlike = dict(unlike)


class TopologyOptions(BaseModel):
    """Base of every topology's options (``cluster.topology``): unknown keys are refused, and
    so is a value of the wrong type (strict: ``"4"`` or ``true`` is no count). A quantity
    option typed :data:`~.graph.Bandwidth` or :data:`~.graph.Latency` is parsed as the model is
    validated (``"100 Gbit/s"`` → 1.25e10 bytes/s): the builder reads numbers in base units,
    and a bad value is refused naming the option, the value and what is accepted."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


@dataclass(frozen=True)
class Site:
    """What a topology's builder receives: the ``cluster`` mapping it builds (its servers
    read from it once, as :attr:`servers`), ``field``, the path errors name (``cluster``,
    or a wan site's), and ``options``, ``cluster.topology`` validated into the topology's
    own :class:`TopologyOptions` model."""

    cluster: Mapping
    field: str
    options: TopologyOptions

    @cached_property
    def servers(self) -> ServerSpec:
        """The servers' hardware (``nodes``, ``gpus_per_node``, ``intra_node``, ``nic``,
        ``pcie``) in base units, checked."""
        return ServerSpec.from_cluster(self.cluster, self.field)

    @property
    def topology_field(self) -> str:
        """The path of ``options`` (``cluster.topology``) in errors."""
        return f"{self.field}.topology"


def levels(graph: nx.DiGraph) -> dict[str, Placement]:
    """Per GPU node: (site, switches its own NIC links to, server) — the levels of a
    hierarchical topology (``site`` is 0 outside a wan); from the builder's layout where it
    declares one (:mod:`.hierarchy`)."""
    hierarchy = graph.graph.get("hierarchy")
    if hierarchy is not None:
        return hierarchy.placement()
    nodes = graph.nodes
    out = {}
    for node, data in nodes(data=True):
        if data.get("kind") != "gpu":
            continue
        nics = [v for v in graph.succ[node] if nodes[v].get("kind") == "nic"]
        leaves = frozenset(s for nic in nics for s in graph.succ[nic] if nodes[s].get("kind") == "switch")
        out[node] = (data.get("site", 0), leaves, data["host"])
    return out


def position_dependent(graph: nx.DiGraph) -> str:
    """The placement of a topology whose routes depend on where a GPU sits."""
    return (
        f"routes on a {graph.graph['kind']} topology depend on where a GPU sits; folding is not checked there"
    )


@dataclass(frozen=True)
class Topology(Plugin):
    """A topology kind: ``factory(site: Site) -> nx.DiGraph`` builds it (GPU nodes carry
    ``kind``/``host``, links ``bandwidth``/``latency``/``kind``); ``options`` is its
    :class:`TopologyOptions` model (with ``kind`` a Literal of its name), which the builder
    receives validated as ``site.options``; ``placement`` as in the module docstring."""

    placement: Callable[[nx.DiGraph], dict[str, Placement] | str] = position_dependent


#: topology kind (``cluster.topology.kind``) → :class:`Topology`; ``auto`` (the default) means
#: ``single_node`` for one node and ``fat_tree`` otherwise
TOPOLOGIES: Registry[Topology] = Registry("topology", "cluster.topology.kind")
