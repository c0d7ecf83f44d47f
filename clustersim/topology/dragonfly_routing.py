"""Dragonfly routing (``cluster.topology.routing`` of ``dragonfly``): the global links a
flow between two groups takes, as waypoints the router joins with shortest legs.

* ``shortest`` (default) — no waypoints: shortest by hops with ECMP (:mod:`.routing`),
  which may leave through a third group where that is as short;
* ``minimal`` — minimal dragonfly routing (Kim et al., ISCA 2008, §4): local hop to the
  router holding a global link to the destination's group, that link, local hop to the
  destination's router — one global link, always;
* ``valiant`` — Valiant's randomized routing as the dragonfly paper applies it: minimal
  to an intermediate group, then minimal to the destination (two global links), which
  spreads an adversarial pattern (every group sending to its neighbour) over all global
  links at twice their use.

Flows within a group take the shortest route under every policy. A flow's choices (the
intermediate group, which of several global links between two groups) are taken, as the
fat tree's ECMP is (:mod:`.routing`), from a deterministic number — here the source
server plus the flow key: a group's servers spread evenly over the intermediate groups,
every run the same (Valiant's random draw, made even and repeatable). UGAL (adaptive
choice between the two by queue length) is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the ``routing`` values of a dragonfly
DRAGONFLY_ROUTINGS = ("shortest", "minimal", "valiant")


@dataclass(frozen=True)
class DragonflyWaypoints:
    """The global links of a dragonfly and its routing policy (module doc): ``per_group``
    servers in each of ``groups`` groups (server n in group n // per_group); ``gateways``
    maps a (from, to) pair of groups to its global links (router in from, router in to)."""

    routing: str
    groups: int
    per_group: int
    gateways: dict[tuple[int, int], tuple[tuple[str, str], ...]]

    def waypoints(self, src_host: int, dst_host: int, spread: int) -> tuple[str, ...]:
        """The routers a flow from server ``src_host`` to ``dst_host`` must visit, in
        order; ``spread`` picks among the choices (module doc)."""
        a, b = src_host // self.per_group, dst_host // self.per_group
        if a == b:
            return ()
        if self.routing == "valiant":
            mids = [g for g in range(self.groups) if g not in (a, b)]
            if mids:
                mid = mids[spread % len(mids)]
                return self._hop(a, mid, spread) + self._hop(mid, b, spread)
        return self._hop(a, b, spread)

    def _hop(self, a: int, b: int, spread: int) -> tuple[str, str]:
        links = self.gateways[a, b]
        return links[spread % len(links)]
