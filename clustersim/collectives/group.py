"""What a collective needs to know about its group: hosts, step latency α, link speeds.

:class:`Group` reads the fabric's topology graph (``fabric.graph``, nodes with a ``host``
attribute and edges with ``bandwidth``/``latency``) when there is one; a fabric without a
graph (e.g. :class:`~clustersim.network.base.DirectFabric`) is one host whose every pair
is joined at ``fabric.bandwidth``/``fabric.latency``.

α defaults (seconds per step, on top of the fabric's own link latency) are NCCL's
``hwLat`` for the Ring algorithm and the Simple protocol — the protocol NCCL uses for the
large messages this simulator cares about — from ``src/graph/tuning.cc`` (NCCL 2.19+):
NVLink 3.4 µs, PCIe 5.7 µs, network 14.0 µs. See ``docs/collectives.md``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ScenarioError
from ..hardware.presets import DEFAULT_ALPHA
from ..topology.lazy import link_data, node_data, successors
from ..topology.routing import Router
from .cost import Shape
from .nccl_hardware import nvls_efficiency
from .protocol import resolve_protocols

#: α per link kind a user sets (``cluster.collective_alpha``): same host vs different hosts
ALPHA_KEYS = ("intra_node", "inter_node")


def resolve_alpha(alpha: float | Mapping[str, float] | None, intra_kind: str = "nvlink") -> dict[str, float]:
    """Return ``{"intra_node": s, "inter_node": s}`` from a number, a partial mapping or None."""
    out = {
        "intra_node": DEFAULT_ALPHA["pcie" if intra_kind == "pcie" else "nvlink"],
        "inter_node": DEFAULT_ALPHA["net"],
    }
    if alpha is None:
        return out
    if isinstance(alpha, Mapping):
        for key, value in alpha.items():
            if key not in ALPHA_KEYS:
                raise ScenarioError(f"collective.alpha.{key}", value, f"known keys: {', '.join(ALPHA_KEYS)}")
            out[key] = _non_negative(f"collective.alpha.{key}", value)
        return out
    value = _non_negative("collective.alpha", alpha)
    return {"intra_node": value, "inter_node": value}


def _non_negative(field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ScenarioError(field, value, "expected a time in seconds >= 0")
    return float(value)


class Group:
    """A validated group of members on a fabric, with per-pair α and link-speed lookups, and
    the system's NCCL protocols (:mod:`.protocol`; None: Simple alone)."""

    def __init__(
        self, env, fabric, members: list[str], alpha=None, latency: str = "overlapped", protocols=None
    ):
        self.env, self.fabric, self.members = env, fabric, list(members)
        self.latency = latency  # how a ring across hosts pays its α's (cluster.collective_latency)
        self.protocols = resolve_protocols(protocols)
        self.graph = getattr(fabric, "graph", None)
        # the fabric's router (its routes and costs are cached there), or one of our own
        self.router = None if self.graph is None else getattr(fabric, "router", None) or Router(self.graph)
        self._paths: dict[tuple[str, str], tuple[float, float, tuple]] = {}
        self._shape: Shape | None = None
        if self.graph is not None:
            self.host = {m: node_data(self.graph, m).get("host", m) for m in self.members}
        else:
            self.host = dict.fromkeys(self.members, 0)
        self.alpha = resolve_alpha(alpha, self.intra_kind())
        # hosts in order of first appearance, each with its members in group order
        self.hosts: dict[object, list[str]] = {}
        for m in self.members:
            self.hosts.setdefault(self.host[m], []).append(m)

    def intra_kind(self) -> str:
        """``pcie`` when the members reach each other over PCIe, else ``nvlink``."""
        g = self.graph
        if g is None or not self.members:
            return "nvlink"
        first = self.members[0]
        for nbr in successors(g, first):
            if "pcie" in str(node_data(g, nbr).get("kind", "")) or "pcie" in str(nbr):
                return "pcie"
        return "nvlink"

    # ---- per-pair lookups used by the executor -------------------------------------------
    def alpha_of(self, src: str, dst: str) -> float:
        """Step latency α of a message ``src → dst``."""
        return self.alpha["intra_node" if self.host[src] == self.host.get(dst, None) else "inter_node"]

    def path(self, src: str, dst: str) -> tuple[float, float, tuple]:
        """(bottleneck bandwidth B/s, summed latency s, nodes) of the route ``src → dst``."""
        if self.graph is None:
            return float(self.fabric.bandwidth), float(self.fabric.latency), (src, dst)
        out = self._paths.get((src, dst))
        if out is None:
            latency, bottleneck = self.router.cost(src, dst)
            out = self._paths[(src, dst)] = (bottleneck, latency, self.router.path(src, dst))
        return out

    def pace_of(self, src: str, dst: str) -> float | None:
        """Injection bandwidth of ``src → dst`` (bytes/s), or None when unknown."""
        bw = self.path(src, dst)[0]
        return bw if 0 < bw < float("inf") else None

    def shape(self) -> Shape:
        """α-β parameters of this group for :func:`~clustersim.collectives.registry.estimate_time`.

        ``bw``/``alpha``: a step between the first two members of one host (α includes the
        path latency); ``hops``: on one host whose ring hops differ, each hop's (the ring's
        exact time, :mod:`.ring_hops`; the other algorithms still read ``bw``/``alpha``);
        ``bw_inter``/``alpha_inter``: the slowest crossing between hosts next to
        each other in the ring's order (the last back to the first): a ring step waits for
        its slowest hop. A crossing's bandwidth per rank is its paths' bottleneck × distinct
        NICs used / ranks per host, and no more than any link's bandwidth over the paths
        through it (every channel crosses between two sites on the one WAN link; on a ``ring``
        topology, between two servers on the one link that joins them);
        ``latency``: ``cluster.collective_latency``. Computed once per group."""
        if self._shape is None:
            self._shape = self._ring_shape()
        return self._shape

    def _ring_shape(self) -> Shape:
        groups = list(self.hosts.values())
        first = groups[0]
        out = {}
        if len(first) > 1:
            bw, lat, via = self.path(first[0], first[1])
            out["nvls"] = nvls_efficiency(self.graph, via) if len(groups) == 1 else 0.0
            out["nccl_version"] = self.graph.graph.get("nccl_version") if self.graph is not None else None
        elif self.graph is None:
            bw, lat = float(self.fabric.bandwidth), float(self.fabric.latency)
        else:
            bw, lat = float("inf"), 0.0
        out.update(
            {
                "bw": bw,
                "alpha": self.alpha["intra_node"] + lat,
                "nodes": len(groups),
                "latency": self.latency,
            }
        )
        if len(groups) > 1:
            crossings = [self._crossing(a, groups[(i + 1) % len(groups)]) for i, a in enumerate(groups)]
            out["bw_inter"] = min(c[0] for c in crossings)
            out["alpha_inter"] = self.alpha["inter_node"] + max(c[1] for c in crossings)
            if out["bw"] == float("inf"):
                out["bw"] = out["bw_inter"]
        elif len(first) > 1 and self.graph is not None:
            out["hops"] = self._hops(first)
        return Shape(len(self.members), **out)

    def _hops(self, ring: list[str]) -> tuple[tuple[float, float], ...]:
        """(α + route latency, route bandwidth) of each hop of ``ring`` (the last back to the
        first) where they differ (:mod:`.ring_hops`); () where every hop is like the first."""
        paths = [self.path(a, ring[(i + 1) % len(ring)]) for i, a in enumerate(ring)]
        if all(p[:2] == paths[0][:2] for p in paths):
            return ()
        return tuple((self.alpha["intra_node"] + lat, bw) for bw, lat, _ in paths)

    def _crossing(self, here: list[str], there: list[str]) -> tuple[float, float]:
        """(bandwidth per rank, largest path latency) of the ranks of host ``here`` all
        sending to host ``there`` at once (:meth:`shape`)."""
        paths = [self.path(a, there[i % len(there)]) for i, a in enumerate(here)]
        nics = {next((x for x in p[2] if node_data(self.graph, x).get("kind") == "nic"), None) for p in paths}
        nics.discard(None)
        share = (len(nics) or len(here)) / len(here)
        bw = min(p[0] for p in paths) * share
        # every link the paths cross divides its bandwidth among those through it (on a
        # ring of equal links the one link between servers, not only a path's first)
        through: dict[tuple, int] = {}
        for p in paths:
            for link in zip(p[2], p[2][1:], strict=False):
                through[link] = through.get(link, 0) + 1
        for link, count in through.items():
            bw = min(bw, link_data(self.graph, *link)["bandwidth"] / count)
        return bw, max(p[1] for p in paths)
