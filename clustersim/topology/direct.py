"""``ring`` and ``torus_2d``: GPUs joined by direct GPU–GPU links, no switches.

GPUs route through each other (as TPU-style tori and NVLink rings do). A link between two
GPUs of the same server runs at the intra-node bandwidth and latency; a link between
servers at the NIC's — unless the topology gives its own ``bandwidth`` and ``latency``,
which then apply to every link.

``ring`` joins ``gpu{i}`` to ``gpu{i+1 mod N}``. ``torus_2d`` lays the GPUs out row by row
on a ``rows × cols`` grid (``gpu{r*cols + c}``) and joins each to its four neighbours with
wrap-around; default ``rows = nodes, cols = gpus_per_node`` (one node per row), or the
most nearly square factorization for a single node. A dimension of size 2 has one link,
not two.
"""

from __future__ import annotations

import math
from typing import Literal

import networkx as nx

from ..errors import ScenarioError
from .graph import Bandwidth, Latency, add_link, count_field
from .plugin import TOPOLOGIES, Site, Topology, TopologyOptions
from .servers import ServerSpec


class RingOptions(TopologyOptions):
    """``cluster.topology`` of ``ring`` (module docstring)."""

    kind: Literal["ring"]
    bandwidth: Bandwidth | None = None
    latency: Latency | None = None


class Torus2dOptions(RingOptions):
    """``cluster.topology`` of ``torus_2d`` (module docstring)."""

    kind: Literal["torus_2d"]
    rows: int | None = None
    cols: int | None = None


def _graph_with_gpus(spec: ServerSpec) -> nx.DiGraph:
    g = nx.DiGraph()
    for i in range(spec.num_gpus):
        g.add_node(f"gpu{i}", kind="gpu", host=i // spec.gpus_per_node)
    g.graph["border"] = ["gpu0"]
    return g


def _linker(site: Site):
    """Return ``join(i, j)`` adding the link between GPU i and GPU j."""
    opts, spec = site.options, site.servers
    bw, lat = opts.bandwidth, opts.latency

    def join(g: nx.DiGraph, i: int, j: int) -> None:
        if i == j:
            return
        same = i // spec.gpus_per_node == j // spec.gpus_per_node
        b = bw if bw is not None else (spec.intra_bandwidth if same else spec.nic_bandwidth)
        t = lat if lat is not None else (spec.intra_latency if same else spec.nic_latency)
        add_link(g, f"gpu{i}", f"gpu{j}", b, t, "direct")

    return join


def build_ring(site: Site) -> nx.DiGraph:
    """Build a bidirectional ring over all GPUs of the cluster."""
    spec = site.servers
    g = _graph_with_gpus(spec)
    join = _linker(site)
    n = spec.num_gpus
    for i in range(n):
        join(g, i, (i + 1) % n)
    return g


def _square_factor(n: int) -> int:
    return max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)


def build_torus_2d(site: Site) -> nx.DiGraph:
    """Build a 2-D torus (wrap-around grid) over all GPUs of the cluster."""
    spec, tf = site.servers, site.topology_field
    n = spec.num_gpus
    rows, cols = site.options.rows, site.options.cols
    if rows is None and cols is None:
        rows = spec.nodes if spec.nodes > 1 else _square_factor(n)
    if rows is not None:
        rows = count_field(rows, f"{tf}.rows")
    if cols is not None:
        cols = count_field(cols, f"{tf}.cols")
    rows = rows if rows is not None else max(1, n // cols)
    cols = cols if cols is not None else max(1, n // rows)
    if rows * cols != n:
        raise ScenarioError(f"{tf}.rows", rows, f"rows × cols ({rows} × {cols}) must equal the GPU count {n}")
    g = _graph_with_gpus(spec)
    join = _linker(site)
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            join(g, i, r * cols + (c + 1) % cols)
            join(g, i, ((r + 1) % rows) * cols + c)
    return g


TOPOLOGIES.add(
    Topology(
        "ring", "GPUs in one bidirectional ring of direct links", factory=build_ring, options=RingOptions
    )
)
TOPOLOGIES.add(
    Topology(
        "torus_2d",
        "GPUs on a rows × cols torus of direct links",
        factory=build_torus_2d,
        options=Torus2dOptions,
    )
)
