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
  links at twice their use;
* ``ugal`` — UGAL-L (Kim et al. §4.2; Singh's UGAL): per flow, at its start, the minimal
  route or the Valiant one, whichever has the smaller load of its queue at the point
  where the two part (the source router's output toward each: flows in flight on that
  link) times its path length (links); ties go minimal, so an idle network routes
  minimal. Only a network model that sees flows in flight decides (``simulation.network:
  flow``, :attr:`~clustersim.network.base.Fabric.adaptive_routing`); a route asked for
  without load (estimates, planning) is the minimal one.

Flows within a group take the shortest route under every policy. A flow's choices (the
intermediate group, which of several global links between two groups) are taken, as the
fat tree's ECMP is (:mod:`.routing`), from a deterministic number — here the source
server plus the flow key: a group's servers spread evenly over the intermediate groups,
every run the same (Valiant's random draw, made even and repeatable). UGAL's Valiant
candidate is the one ``valiant`` would take.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the ``routing`` values of a dragonfly
DRAGONFLY_ROUTINGS = ("shortest", "minimal", "valiant", "ugal")


@dataclass(frozen=True)
class DragonflyWaypoints:
    """The global links of a dragonfly and its routing policy (module doc): ``per_group``
    servers in each of ``groups`` groups (server n in group n // per_group); ``gateways``
    maps a (from, to) pair of groups to its global links (router in from, router in to)."""

    routing: str
    groups: int
    per_group: int
    gateways: dict[tuple[int, int], tuple[tuple[str, str], ...]]

    @property
    def adaptive(self) -> bool:
        """Whether a flow's route is picked at its start by load (``ugal``)."""
        return self.routing == "ugal"

    def alternatives(self, src_host: int, dst_host: int, spread: int) -> tuple[tuple[str, ...], ...]:
        """The routers a flow from server ``src_host`` to ``dst_host`` must visit, in
        order, for each route the policy may give it; ``spread`` picks among the choices
        (module doc). One route, or under ``ugal`` between two groups with a third the
        minimal (the choice on an idle network) then the Valiant one."""
        a, b = src_host // self.per_group, dst_host // self.per_group
        if a == b:
            return ((),)
        minimal = self._hop(a, b, spread)
        mids = [g for g in range(self.groups) if g not in (a, b)]
        if self.routing not in ("valiant", "ugal") or not mids:
            return (minimal,)
        mid = mids[spread % len(mids)]
        valiant = self._hop(a, mid, spread) + self._hop(mid, b, spread)
        return (minimal, valiant) if self.routing == "ugal" else (valiant,)

    def _hop(self, a: int, b: int, spread: int) -> tuple[str, str]:
        links = self.gateways[a, b]
        return links[spread % len(links)]
