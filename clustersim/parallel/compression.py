"""Compression of traffic on chosen links: what a scenario's ``gradient_compression`` and
``activation_compression`` sections mean to the compiler.

A :class:`Compression` says by how much bytes shrink, what coding costs in GPU time, and
which transfers it applies to: all of them (``links: all``), or only those between two
GPUs in different sites of a ``wan`` topology (``inter_site``) or different servers
(``inter_node``). Gradients: :mod:`.gradient_sync`. Activations: a pipeline send that
crosses a compressed link carries bytes/ratio; the producing GPU runs a ``compress`` op
(bytes·c/2) on its compute lane right after the pass, the consuming GPU a ``decompress``
op (bytes·c/2) right before the pass that uses them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import networkx as nx

from ..errors import ScenarioError
from ..topology import build_topology
from ..topology.graph import gpu_names
from ..topology.wan import gpu_sites

GIB = 2**30


@dataclass(frozen=True)
class Compression:
    """Bytes shrink ``ratio`` times; coding costs ``seconds_per_byte`` of compute per
    uncompressed byte (half to compress, half to decompress). ``domains``: per device,
    its site or server index when only traffic between domains is compressed (``links``
    names which); None compresses everything."""

    ratio: float
    seconds_per_byte: float
    links: str = "all"
    domains: tuple[int, ...] | None = None

    def crosses(self, a: int, b: int) -> bool:
        """Whether a transfer between devices ``a`` and ``b`` is compressed."""
        return self.domains is None or self.domains[a] != self.domains[b]

    def half_seconds(self, nbytes: float) -> float:
        """GPU seconds to compress (or to decompress) ``nbytes`` of uncompressed data: half the
        codec time of those bytes."""
        return nbytes * self.seconds_per_byte / 2

    def shrunk(self, nbytes: float) -> int:
        """The bytes that ``nbytes`` of uncompressed data take once compressed."""
        return int(nbytes / self.ratio)


def compression_of(spec, g: nx.DiGraph | None) -> Compression | None:
    """The :class:`Compression` of a ``CompressionSpec`` (None for None); sites and
    servers come from the topology graph ``g`` (unread with ``links: all``)."""
    if spec is None:
        return None
    per_byte = spec.time_per_gib / GIB
    if spec.links == "all":
        return Compression(spec.ratio, per_byte)
    domains = gpu_sites(g) if spec.links == "inter_site" else [g.nodes[n]["host"] for n in gpu_names(g)]
    return Compression(spec.ratio, per_byte, spec.links, tuple(domains))


def check_even_domains(spec, cluster, plan) -> None:
    """Raise ScenarioError unless every data-parallel group holds as many GPUs in each site
    (``inter_site``) or server (``inter_node``): the hierarchical compressed all-reduce
    (:mod:`.gradient_sync`) needs it."""
    domains = compression_of(spec, build_topology(cluster.model_dump())).domains
    where = "site" if spec.links == "inter_site" else "server"
    for s in range(plan.pp):
        for t in range(plan.tp):
            counts = Counter(domains[d] for d in plan.dp_group(s, t))
            if len(counts) > 1 and len(set(counts.values())) > 1:
                raise ScenarioError(
                    "parallel.gradient_compression.links",
                    spec.links,
                    f"stage {s}'s data-parallel group holds {dict(counts)} GPUs per {where}; the hierarchical "
                    f"compressed all-reduce needs the same number in each {where}; accepted: all, or a "
                    f"plan/cluster that does",
                )
