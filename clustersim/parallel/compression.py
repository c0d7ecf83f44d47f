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

from dataclasses import dataclass

import networkx as nx

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
