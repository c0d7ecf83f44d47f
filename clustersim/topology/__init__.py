"""Cluster topologies as networkx graphs, and routes through them.

:func:`build_topology` turns a resolved ``cluster`` dict into a directed graph (GPUs,
NICs, switches, servers; links with bandwidth and latency); :class:`Router` picks the
path a flow takes (shortest by hops, ECMP among equals). The fabrics in
:mod:`clustersim.network` move bytes along those paths. ``fat_tree``, ``leaf_spine`` and
``rail`` graphs are written on first use (:mod:`.lazy`): what routes and costs read of
them is answered from the builder's layout until something reads the graph itself.
"""

from .graph import NODE_KINDS, is_wire
from .registry import TOPOLOGIES, build_topology
from .routing import Router

__all__ = ["NODE_KINDS", "TOPOLOGIES", "Router", "build_topology", "is_wire"]
