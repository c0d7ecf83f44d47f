"""Folding under contention (``simulation.fold_contention``): a folded representative's
flow and its twins' mirror flows as one flow of the flow model.

A folded Program keeps one representative per stage; what its folded-away twins send is
listed beside each send and collective as ``shadows`` (:mod:`clustersim.resolve.fold`).
Without this module every shadow is a flow of its own: the same flows, allocations and
finish events as the unfolded run. Here a transfer and its twins' images — the *orbit*:
the representative's (src, dst) and each twin's — become **one** flow of
:class:`~.maxmin.Links` that crosses every link any of them crosses, with a multiplicity on
each link: how many of the orbit's flows cross it. Max-min sharing then treats it as that
many flows there, all at one rate (:meth:`~.maxmin.Links.add_flow`).

Why that is exact where the twins are symmetric: max-min fair rates are unique, so when a
symmetry of the topology maps every flow in flight onto a flow in flight (each twin's onto
the representative's), the twins' rates equal the representative's at every moment; then
progressive filling over the orbits — a link's share its capacity left over the
multiplicities of its unfrozen orbits — freezes each orbit exactly when the unfolded filling
freezes its flows, and the orbit ends when each of them would. Contention between orbits
(a twin's flow beside another orbit's representative) is on the real links, so it is kept.

Which orbits are taken as symmetric, checked per (src, dst) once: every flow of the orbit
crosses the same sequence of (bandwidth, multiplicity) links and has the same summed latency
as the representative's — so no twin sees another twin of the same orbit where the
representative does not, and no twin's route is slower or longer (a fat tree's ECMP that
spreads twins unevenly over spines fails it); links with degradation windows are never
folded (folding refuses them anyway). An orbit that fails keeps its twins as flows of their
own (the shadow traffic as without this switch). What is assumed, not checked: that the
symmetry holds across orbits — another orbit's twins cross the links the representative's
twins cross as that orbit's representative crosses the representative's (true of the
symmetric DP/TP/EP twins folding accepts on uniform trees, whose twins are images under one
shift of GPU indices; tests/test_fold_contention.py compares folded and unfolded runs).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Orbit:
    """A transfer and its twins' images as one flow: the links any of them crosses (the
    representative's first, in route order), the multiplicity on each (None: 1 on every one),
    and the representative's summed latency."""

    ids: tuple[int, ...]
    weights: tuple[int, ...] | None
    latency: float


def orbit_of(fabric, src: str, dst: str, mirrors) -> Orbit | None:
    """The :class:`Orbit` of a transfer ``src → dst`` whose twins' transfers are ``mirrors``
    ((src, dst) pairs) on a :class:`~.flow.FlowFabric`; None where they are not symmetric
    (module docstring)."""
    members = [(src, dst), *mirrors]
    if any(a == b for a, b in members):
        return None if any(a != b for a, b in members) else Orbit((), None, 0.0)
    routes = [fabric.route(a, b) for a, b in members]
    count: dict[int, int] = {}
    for links, _ in routes:
        for link in links:
            if link.profile is not None:
                return None
            count[link.id] = count.get(link.id, 0) + 1

    def signature(route):
        links, latency = route
        return tuple((link.bandwidth, count[link.id]) for link in links), latency

    own = signature(routes[0])
    if any(signature(r) != own for r in routes[1:]):
        return None
    weights = tuple(count.values())
    return Orbit(tuple(count), None if max(weights, default=1) == 1 else weights, routes[0][1])


class Orbits:
    """The orbits of one twin set's transfers, each worked out once per (src, dst):
    ``images(src, dst)`` gives the twins' (src, dst) pairs of a transfer."""

    __slots__ = ("fabric", "images", "_seen", "_classes")

    def __init__(self, fabric, images):
        self.fabric, self.images = fabric, images
        self._seen: dict[tuple[str, str], tuple[Orbit | None, list]] = {}
        self._classes: dict[tuple[str, str], list[tuple[Orbit | None, list]]] = {}

    def transfer(self, src: str, dst: str, nbytes: int, label: str = ""):
        """Start ``src → dst`` with its twins' images now; the event fires when the
        representative's last byte lands. An asymmetric orbit starts every flow on its own,
        the representative's first (as replica 0 in the unfolded run)."""
        fabric = self.fabric
        orbit, mirrors = self._worked_out(src, dst)
        if orbit is None:
            done = fabric.transfer(src, dst, nbytes, label)
            for a, b in mirrors:
                fabric.transfer(a, b, nbytes, label)
            return done
        return _flow(fabric, orbit, nbytes)

    def transfer_classes(self, src: str, dst: str, nbytes: int, label: str = "") -> list:
        """:meth:`transfer`, with the event of each flow's last byte: the representative's
        first. A symmetric orbit's flows land together, one event; an asymmetric orbit is cut
        into classes of flows whose routes cross links of the same bandwidths with the same
        latency (a ring's hops inside a leaf, and across its border), each class one orbit
        where it is symmetric within (:func:`orbit_of`, one event), else a flow (an event)
        each."""
        fabric = self.fabric
        orbit, mirrors = self._worked_out(src, dst)
        if orbit is not None:
            return [_flow(fabric, orbit, nbytes)]
        out = []
        for orbit, members in self._classes_of(src, dst, mirrors):
            if orbit is None:
                out.extend(fabric.transfer(a, b, nbytes, label) for a, b in members)
            else:
                out.append(_flow(fabric, orbit, nbytes))
        return out

    def orbit(self, src: str, dst: str) -> Orbit | None:
        """The :class:`Orbit` of ``src → dst`` (None: its twins are not symmetric)."""
        return self._worked_out(src, dst)[0]

    def _worked_out(self, src: str, dst: str) -> tuple[Orbit | None, list]:
        seen = self._seen.get((src, dst))
        if seen is None:
            mirrors = self.images(src, dst)
            seen = self._seen[src, dst] = (orbit_of(self.fabric, src, dst, mirrors), mirrors)
        return seen

    def _classes_of(self, src: str, dst: str, mirrors: list) -> list[tuple[Orbit | None, list]]:
        """The classes of an asymmetric orbit (:meth:`transfer_classes`), the representative's first."""
        hit = self._classes.get((src, dst))
        if hit is None:
            fabric, groups = self.fabric, {}
            for a, b in [(src, dst), *mirrors]:
                links, latency = fabric.route(a, b)
                groups.setdefault((tuple(link.bandwidth for link in links), latency), []).append((a, b))
            hit = self._classes[src, dst] = [
                (orbit_of(fabric, *members[0], members[1:]), members) for members in groups.values()
            ]
        return hit


def _flow(fabric, orbit: Orbit, nbytes: int):
    """Start ``orbit``'s flows as one flow; the event fires when its last byte lands."""
    if not orbit.ids or nbytes == 0:
        return fabric.env.timeout(orbit.latency)
    return fabric.start_flow(orbit.ids, orbit.weights, orbit.latency, nbytes)


def send_orbits(fabric, pairs) -> Orbits:
    """The orbits of a folded send whose twins' sends are ``pairs`` ((src, dst) names)."""
    return Orbits(fabric, lambda _src, _dst: list(pairs))


class MirroredFabric:
    """The fabric as a folded representative's collective sees it: each transfer between two
    members carries its images in the twins' groups (``groups``: the representative's member
    names, then each twin group's, position by position) as one orbit. Everything else is
    the fabric's own."""

    def __init__(self, fabric, groups):
        own, *twins = groups
        maps = [dict(zip(own, twin, strict=True)) for twin in twins]
        orbits = Orbits(fabric, lambda src, dst: [(m[src], m[dst]) for m in maps])
        self.transfer, self.orbit = orbits.transfer, orbits.orbit
        self._fabric = fabric

    def __getattr__(self, name):
        return getattr(self._fabric, name)
