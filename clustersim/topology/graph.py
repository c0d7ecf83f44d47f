"""Shared pieces of every topology builder: links, field checks, the final validation.

A topology is a :class:`networkx.DiGraph`. Nodes carry ``kind`` (one of
:data:`NODE_KINDS`); GPUs also carry ``host`` (their server index). Every directed edge
carries ``bandwidth`` (bytes/s, float), ``latency`` (seconds, float) and ``kind`` (what
the link is: ``nvlink``, ``pcie``, ``nic``, ``fabric``, ``wan``, ``direct``, ``wire``,
``custom``), and each physical link is added in both directions.

A *wire* is a link with infinite bandwidth and zero latency: it joins two nodes for
routing but costs nothing, so the fabrics skip it (e.g. GPU→NIC when no PCIe link is
configured).
"""

from __future__ import annotations

import math
from typing import Annotated

import networkx as nx
from pydantic import AfterValidator

from ..errors import ScenarioError
from ..units import parse_bandwidth, parse_time, quantity

NODE_KINDS = ("gpu", "nic", "switch", "host", "server")


# The builders write networkx's adjacency themselves (``_node``, ``_succ``, ``_pred``: what
# ``DiGraph.add_node`` and ``add_edges_from`` write, without their per-call checks), through
# :func:`add_node` and :func:`add_link` here, the one module that does: a 16,384-GPU fat tree
# is 35k nodes and 106k edges, 0.24–0.28 s CPU through networkx's calls and 0.14–0.16 s
# written here (issue #19; a server's links in one call saved no more). tests/test_topology.py
# checks that both ways make the same graph, down to the order of every node's neighbours,
# so a networkx that keeps its graph otherwise fails there.


def add_node(g: nx.DiGraph, name: str, **attrs) -> None:
    """``g.add_node(name, **attrs)`` (module note): a new node gets ``attrs`` as its own
    attributes, a node already there has them updated."""
    if name in g._succ:
        g._node[name].update(attrs)
    else:
        g._succ[name], g._pred[name], g._node[name] = {}, {}, attrs
    _changed(g)


def link_attrs(bandwidth: float, latency: float, kind: str) -> dict:
    """The attributes of one direction of a link (what :func:`add_link` writes)."""
    return {"bandwidth": bandwidth, "latency": latency, "kind": kind}


#: a free wire's (bandwidth, latency, kind): :func:`add_wire`
WIRE = (math.inf, 0.0, "wire")


def add_link(g: nx.DiGraph, a: str, b: str, bandwidth: float, latency: float, kind: str) -> None:
    """Add one physical link between ``a`` and ``b``: an edge in each direction, each with
    its own attribute dict — ``g.add_edges_from(((a, b, attrs), (b, a, attrs)))`` (module
    note), nodes not there yet added with no attributes."""
    succ, pred = g._succ, g._pred
    for node in (a, b):
        if node not in succ:
            succ[node], pred[node], g._node[node] = {}, {}, {}
    if b in succ[a] or a in succ[b]:  # linked before: networkx updates the edges' dicts
        for u, v in ((a, b), (b, a)):
            data = succ[u].setdefault(v, {})
            data.update(bandwidth=bandwidth, latency=latency, kind=kind)
            pred[v][u] = data
    else:
        succ[a][b] = pred[b][a] = link_attrs(bandwidth, latency, kind)
        succ[b][a] = pred[a][b] = link_attrs(bandwidth, latency, kind)
    _changed(g)


def _changed(g: nx.DiGraph) -> None:
    """Drop what networkx cached about ``g`` (what its own writes do)."""
    cache = getattr(g, "__networkx_cache__", None)
    if cache:
        cache.clear()


def add_wire(g: nx.DiGraph, a: str, b: str) -> None:
    """Join ``a`` and ``b`` by a free wire (infinite bandwidth, zero latency)."""
    add_link(g, a, b, *WIRE)


def is_wire(data: dict) -> bool:
    """True when an edge's attributes describe a free wire the fabrics skip."""
    return data["bandwidth"] == math.inf and data["latency"] == 0.0


def carries_flows(data: dict) -> bool:
    """True when flows share an edge's bandwidth: neither a free wire (:func:`is_wire`) nor
    a link of infinite bandwidth."""
    return data["bandwidth"] != math.inf


#: what a link's bandwidth and latency must be, besides a quantity of their kind
BANDWIDTH_RULE = "a bandwidth must be positive and finite, e.g. 25 GB/s"
LATENCY_RULE = "a latency must be zero or positive, e.g. 1 us"


def _bandwidth_ok(bw: float) -> bool:
    return bw > 0 and math.isfinite(bw)


def _latency_ok(lat: float) -> bool:
    return lat >= 0 and math.isfinite(lat)


def _rule(ok, why: str) -> AfterValidator:
    """``ok`` as a pydantic check of a parsed quantity, refusing with ``why``."""

    def check(value: float) -> float:
        if not ok(value):
            raise ValueError(why)
        return value

    return AfterValidator(check)


#: a bandwidth option of a typed options model (:class:`~.plugin.TopologyOptions`): the model
#: holds it in bytes/s, positive and finite (as :func:`bandwidth_field` reads one)
Bandwidth = Annotated[float, quantity("bandwidth"), _rule(_bandwidth_ok, BANDWIDTH_RULE)]
#: a latency option of a typed options model: held in seconds, zero or positive
Latency = Annotated[float, quantity("time"), _rule(_latency_ok, LATENCY_RULE)]


def bandwidth_field(value: object, field: str) -> float:
    """A positive, finite bandwidth in bytes/s, or a ScenarioError naming ``field``."""
    bw = parse_bandwidth(value, field)
    if not _bandwidth_ok(bw):
        raise ScenarioError(field, value, BANDWIDTH_RULE)
    return bw


def latency_field(value: object, field: str) -> float:
    """A non-negative, finite latency in seconds, or a ScenarioError naming ``field``."""
    lat = parse_time(value, field)
    if not _latency_ok(lat):
        raise ScenarioError(field, value, LATENCY_RULE)
    return lat


def positive_number(value: object, field: str) -> float:
    """A positive finite plain number (a ratio such as oversubscription or efficiency)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise ScenarioError(field, value, "expected a positive number")
    return float(value)


def oversubscription_ratio(value: object, field: str) -> float:
    """An uplink oversubscription: a positive ratio ≥ 1 (1 = full bisection), or a
    ScenarioError naming ``field``."""
    oversub = positive_number(value, field)
    if oversub < 1.0:
        raise ScenarioError(field, oversub, "expected a ratio ≥ 1 (1 = full bisection)")
    return oversub


def count_field(value: object, field: str, minimum: int = 1) -> int:
    """A whole number ≥ ``minimum``, or a ScenarioError naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ScenarioError(field, value, f"expected a whole number ≥ {minimum}")
    return value


def check_fields(raw: dict, allowed: tuple[str, ...], field: str) -> None:
    """Reject keys of ``raw`` not in ``allowed`` (a typo must not be silently ignored)."""
    for key in raw:
        if key not in allowed:
            raise ScenarioError(f"{field}.{key}", raw[key], f"not a field here; known: {', '.join(allowed)}")


def gpu_names(g: nx.DiGraph) -> list[str]:
    """The GPU nodes of ``g``, in index order (``gpu0``, ``gpu1``, …)."""
    gpus = [n for n, k in g.nodes(data="kind") if k == "gpu"]
    return sorted(gpus, key=lambda n: int(n[3:]))


def check_connected(g: nx.DiGraph, field: str) -> None:
    """Every GPU must reach every other GPU along directed links.

    Raises a ScenarioError naming ``field`` and the first GPU that cannot.
    """
    gpus = gpu_names(g)
    if len(gpus) < 2:
        return
    reach = nx.descendants(g, gpus[0]) | {gpus[0]}
    back = nx.ancestors(g, gpus[0]) | {gpus[0]}
    for gpu in gpus[1:]:
        if gpu not in reach or gpu not in back:
            raise ScenarioError(
                field,
                gpu,
                f"every GPU must be joined by links to every other GPU; {gpu} is cut off from {gpus[0]}",
            )
