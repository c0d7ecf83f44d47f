"""Link degradation windows: a link runs at a fraction of its bandwidth for a while.

``cluster.link_degradations`` lists windows ``{between: [a, b], start, end, factor}``: from
``start`` to ``end`` (simulated seconds) both directions of the link between topology
nodes ``a`` and ``b`` carry ``factor`` × their bandwidth (a congested WAN circuit, a flapping
optic, a noisy neighbour on a shared uplink). Latency is unchanged.

A link's bandwidth is then piecewise constant in time, and a transfer of ``S`` bytes that
starts at ``t0`` on a link (or, in the analytical model, on a route whose rate at each
moment is the smallest bandwidth along it) ends at the ``T`` where ``∫_{t0}^{T} B(t) dt = S``
— :func:`finish_time` solves that exactly, window by window. The packet model applies it
to every chunk on every link it crosses; the analytical model to the whole message on its
route's bottleneck profile.
"""

from __future__ import annotations

import math

import networkx as nx

from ..errors import ScenarioError, SimulationStall

#: a link's windows: ((start_s, end_s, factor), ...) sorted by start; they may overlap
#: (factors then multiply)
Windows = tuple[tuple[float, float, float], ...]


def apply_degradations(graph: nx.DiGraph, windows) -> None:
    """Attach each window to both directions of its link as the edge attribute ``windows``.

    ``windows`` are validated LinkDegradation specs; a node or link missing from the
    topology is a ScenarioError naming the field and what is there instead."""
    for i, w in enumerate(windows):
        a, b = w.between
        for node in (a, b):
            if node not in graph:
                near = ", ".join(sorted(graph)[:12])
                raise ScenarioError(
                    f"cluster.link_degradations[{i}].between",
                    list(w.between),
                    f"{node!r} is not a node of this topology; nodes include: {near}, …",
                )
        if not graph.has_edge(a, b):
            raise ScenarioError(
                f"cluster.link_degradations[{i}].between",
                list(w.between),
                f"no link joins {a} and {b}; {a} links to: {', '.join(sorted(graph.successors(a)))}",
            )
        for u, v in ((a, b), (b, a)):
            if graph.has_edge(u, v):
                data = graph.edges[u, v]
                if data["bandwidth"] == math.inf:
                    raise ScenarioError(
                        f"cluster.link_degradations[{i}].between",
                        list(w.between),
                        "this is a free wire (infinite bandwidth); degrade a real link",
                    )
                end = math.inf if w.end is None else w.end  # no end: for ever
                data["windows"] = tuple(sorted((*data.get("windows", ()), (w.start, end, w.factor))))


def rate_profile(bandwidth: float, windows: Windows) -> list[tuple[float, float]]:
    """The link's bandwidth as ``[(from_s, bytes/s), ...]`` steps starting at 0."""
    cuts = sorted({0.0, *(t for s, e, _ in windows for t in (s, e))})
    steps = []
    for t in cuts:
        rate = bandwidth
        for s, e, f in windows:
            if s <= t < e:
                rate *= f
        if not steps or steps[-1][1] != rate:
            steps.append((t, rate))
    return steps


def min_profile(profiles: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The pointwise minimum of several rate profiles (a route's bottleneck over time)."""
    cuts = sorted({t for p in profiles for t, _ in p})
    steps = []
    for t in cuts:
        rate = min(_rate_at(p, t) for p in profiles)
        if not steps or steps[-1][1] != rate:
            steps.append((t, rate))
    return steps


def _rate_at(profile: list[tuple[float, float]], t: float) -> float:
    rate = profile[0][1]
    for start, r in profile:
        if start > t:
            break
        rate = r
    return rate


def finish_time(
    profile: list[tuple[float, float]], start: float, nbytes: float, where: str = "a link"
) -> float:
    """The time at which ``nbytes`` started at ``start`` have crossed a link of this rate
    profile; :class:`SimulationStall` naming ``where`` if the link is down for ever first."""
    left, t = float(nbytes), start
    if left <= 0:
        return start
    for k, (step_start, rate) in enumerate(profile):
        step_end = profile[k + 1][0] if k + 1 < len(profile) else math.inf
        if step_end <= t:
            continue
        t = max(t, step_start)
        if left <= rate * (step_end - t):
            return t + left / rate
        if step_end == math.inf:  # the last step carries nothing, for ever
            raise down_for_ever(where, left, t)
        left -= rate * (step_end - t)
        t = step_end
    return t


def down_for_ever(where: str, left: float, t: float) -> SimulationStall:
    """The stall of a transfer that needs a link whose bandwidth is 0 from ``t`` on, for ever."""
    return SimulationStall(
        f"{where} is down for ever (a cluster.link_degradations window with factor 0 and no end) "
        f"with {left:,.0f} bytes of a transfer still to carry at t = {t:.6g} s; "
        "give the window an end, or list the cable in cluster.failed_links so routes avoid it"
    )
