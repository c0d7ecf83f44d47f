"""Whether a folded job of a multi-job run meets the other jobs' traffic as its twins would.

A folded job simulates one representative per stage; what its folded-away twins send rides
beside it (shadows, or one orbit flow under ``fold_contention``: :mod:`clustersim.network.orbits`).
Alone, each twin runs at its representative's rate because a symmetry of the fabric maps
the twin's flows onto the representative's. Beside another job, that symmetry must also map
the other job's flows onto themselves, or a twin slowed by them where its representative is
not (or the other way round) would run at another pace than the one it is given.

Checked here, as a sufficient condition, on the merged Program (cluster GPU indices): take
each *orbit* of a folded job — a send with its shadow pairs, or a collective's transfer
between the members at positions (i, j) of its group with the same pair of each shadow
group — and each link that some flow of the orbit crosses and that another job's traffic may
cross. Every flow of the orbit must cross that link. Then the map from the representative to
any twin fixes every link where the jobs meet (it moves only links some flow of the orbit
leaves out, which no other job touches), so each twin meets the other job exactly as its
representative does; where both jobs fold, the condition holds both ways and their twin
maps act on disjoint links. The symmetry within a job is its own fold check's
(:func:`clustersim.resolve.fold.fold_obstacle`, and the orbit check of
:mod:`clustersim.network.orbits`).

The links a job's traffic may cross: the routes of its sends (and their shadows), and of
every ordered pair of members of each collective group (and shadow group) — a superset of
what any collective algorithm sends (ring neighbours, tree edges, a hierarchy's leaders,
NVLS's GPU–switch links all lie on routes between members), so the check may refuse a run
a finer one would fold, never the other way round. Routes are the fabric's own (shortest,
ECMP by destination and source host: :class:`clustersim.topology.routing.Router`), free
wires left out.
"""

from __future__ import annotations

from itertools import permutations

import networkx as nx

from ..program import COLLECTIVE, SEND, Program
from ..topology.graph import carries_flows
from ..topology.routing import Router
from .merge import Placed


class _Routes:
    """The shared links (directed edges) of each route, worked out once per (src, dst)."""

    def __init__(self, graph: nx.DiGraph):
        self.graph, self.router = graph, Router(graph)
        self._seen: dict[tuple[int, int], tuple[tuple[str, str], ...]] = {}

    def __call__(self, a: int, b: int) -> tuple[tuple[str, str], ...]:
        hit = self._seen.get((a, b))
        if hit is None:
            hops = self.router.links(f"gpu{a}", f"gpu{b}") if a != b else ()
            hit = self._seen[a, b] = tuple(h for h in hops if carries_flows(self.graph.edges[h]))
        return hit


def _orbits(op, dst: int) -> list[list[tuple[int, int]]]:
    """``op``'s orbits: each (src, dst) pair its own traffic may take (module docstring) with
    the shadows' images of it; ``dst``: a send's receiving device."""
    if op.kind == SEND:
        return [[(op.origin(), dst), *op.shadows]]
    groups = (op.group, *op.shadows)
    n = len(op.group)
    return [[(g[i], g[j]) for g in groups] for i, j in permutations(range(n), 2)]


def _traffic(prog: Program, where: Placed):
    """The distinct sends and collectives of one job of the merged Program (every member's op
    of a collective, every micro-batch's send, once), each as (op, the device a send's recv
    sits on, or −1)."""
    ops, seen = prog.ops, set()
    for i in where.ops:
        op = ops[i]
        if op.kind not in (SEND, COLLECTIVE):
            continue
        dst = ops[op.peer].device if op.kind == SEND else -1
        key = (op.origin(), dst, op.shadows) if op.kind == SEND else (op.group, op.shadows)
        if key not in seen:
            seen.add(key)
            yield op, dst


def shared_link_obstacles(
    prog: Program, placed: list[Placed], folded: set[str], graph: nx.DiGraph
) -> dict[str, str]:
    """For each job named in ``folded`` whose twins would meet another job's traffic unlike
    its representative (module docstring), why — naming both jobs and the link; the jobs
    that pass are left out. ``prog`` is the merged Program, ``placed`` where each job's ops
    landed (:func:`~.merge.merge_programs`), ``graph`` the cluster's topology."""
    route = _Routes(graph)
    links: dict[str, set[tuple[str, str]]] = {}
    for where in placed:
        mine = links[where.name] = set()
        for op, dst in _traffic(prog, where):
            for orbit in _orbits(op, dst):
                for pair in orbit:
                    mine.update(route(*pair))
    out = {}
    for where in placed:
        if where.name not in folded:
            continue
        foreign = {link: p.name for p in placed if p.name != where.name for link in links[p.name]}
        why = _first_unlike(prog, where, foreign, route) if foreign else None
        if why is not None:
            out[where.name] = why
    return out


def _first_unlike(prog: Program, where: Placed, foreign: dict, route: _Routes) -> str | None:
    """Why the first orbit of job ``where`` that meets ``foreign`` traffic (link → job) on a
    link not all its flows cross does (module docstring), or None."""
    for op, dst in _traffic(prog, where):
        if not op.shadows:
            continue  # no twin rides with it: its flows are all simulated
        for orbit in _orbits(op, dst):
            flows = [route(a, b) for a, b in orbit if a != b]
            count: dict[tuple[str, str], int] = {}
            for links in flows:
                for link in links:
                    count[link] = count.get(link, 0) + 1
            for link, n in count.items():
                if n < len(flows) and link in foreign:
                    u, v = link
                    return (
                        f"job '{where.name}''s folded twins ({op.name!r}, gpu{orbit[0][0]} → gpu{orbit[0][1]} "
                        f"and its twins' images) cross {u} → {v}, which {n} of their {len(flows)} flows cross, "
                        f"beside job '{foreign[link]}''s traffic (a twin would meet it unlike its representative)"
                    )
    return None
