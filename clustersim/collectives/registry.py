"""The algorithm table: for every collective algorithm, what it implements, how it is
built into send schedules, its α-β cost, and when it cannot run on a group.

One row per algorithm, so adding one is adding a row: :data:`ALGORITHMS` maps the name a
scenario uses (``simulation.collectives``) to an :class:`Algorithm`. ``auto`` picks the
smallest ``cost`` among rows that implement the kind, fit the group and whose ``in_auto``
admits the group (:func:`choose_algorithm`), as NCCL's tuner does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..plugins import Registry
from . import cost
from .direct import build_direct
from .group import Group
from .halving_doubling import build_halving_doubling, is_power_of_two
from .hierarchical import build_hierarchical
from .parameter_server import build_parameter_server
from .ring import build_ring, ring_orders
from .tree import build_tree

#: collective kinds (send/recv are the engine's own point-to-point ops)
KINDS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "barrier")


@dataclass(frozen=True)
class Options:
    """Per-call knobs of a build: the root (broadcast/reduce; the parameter server),
    ring channels, pipeline chunks, parameter servers."""

    root: str | None = None
    channels: int | None = None
    chunks: int | None = None
    servers: list[str] | None = None


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm: its name, the kinds it implements, a one-line summary,
    ``build(group, kind, nbytes, options) -> (engines, done)`` (see :mod:`.schedule`),
    ``cost(shape, kind, nbytes, servers) -> seconds`` on an idle network (:mod:`.cost`),
    ``misfit(group, kind) -> reason | None`` for group shapes it cannot run, and
    ``in_auto(group) -> bool``: whether ``auto`` may choose it for that group."""

    name: str
    kinds: frozenset
    description: str
    build: Callable
    cost: Callable
    misfit: Callable[[Group, str], str | None] = lambda group, kind: None
    in_auto: Callable[[Group], bool] = lambda group: True


def _halving_doubling_misfit(group: Group, kind: str) -> str | None:
    n = len(group.members)
    if kind != "all_reduce" and not is_power_of_two(n):
        return f"{kind} by halving_doubling needs a power-of-two group; got {n} members"
    return None


def _hierarchical_misfit(group: Group, kind: str) -> str | None:
    sizes = {len(v) for v in group.hosts.values()}
    if len(sizes) > 1:
        return f"hierarchical needs the same number of members on every host; got {sorted(sizes)} per host"
    return None


def _spans_hosts(group: Group) -> bool:
    # on one host hierarchical is a plain ring with extra steps
    return len(group.hosts) > 1


def _never(group: Group) -> bool:
    # a parameter server needs a server node, which only the caller can name
    return False


ALGORITHMS: Registry[Algorithm] = Registry("collective algorithm", "simulation.collectives")
for _algorithm in (
    Algorithm(
        "ring",
        frozenset(KINDS) - {"all_to_all"},
        "NCCL ring, multi-channel across hosts",
        lambda g, k, s, o: build_ring(g.env, k, ring_orders(g.hosts, o.channels), s, {}, o.root, o.chunks),
        cost.ring,
    ),
    Algorithm(
        "tree",
        frozenset({"all_reduce", "barrier"}),
        "double binary tree, pipelined",
        lambda g, k, s, o: build_tree(g.env, k, g.members, s, {}, o.root, o.chunks),
        cost.tree,
    ),
    Algorithm(
        "halving_doubling",
        frozenset({"all_reduce", "reduce_scatter", "all_gather", "barrier"}),
        "recursive halving (reduce-scatter) and doubling (all-gather)",
        lambda g, k, s, o: build_halving_doubling(g.env, k, g.members, s, {}),
        cost.halving_doubling,
        _halving_doubling_misfit,
    ),
    Algorithm(
        "hierarchical",
        frozenset({"all_reduce", "barrier"}),
        "intra-host reduce-scatter, inter-host all-reduce, intra-host all-gather",
        lambda g, k, s, o: build_hierarchical(g.env, k, g.hosts, s, {}),
        cost.hierarchical,
        _hierarchical_misfit,
        _spans_hosts,
    ),
    Algorithm(
        "direct",
        frozenset(KINDS),
        "every rank sends straight to every receiver",
        lambda g, k, s, o: build_direct(g.env, k, g.members, s, {}, o.root),
        cost.direct,
    ),
    Algorithm(
        "parameter_server",
        frozenset({"all_reduce", "reduce", "broadcast", "barrier"}),
        "workers push to server(s), servers push back",
        lambda g, k, s, o: build_parameter_server(g.env, k, g.members, s, {}, o.root, servers=o.servers),
        cost.parameter_server,
        in_auto=_never,
    ),
):
    ALGORITHMS.add(_algorithm)


def estimate_time(
    kind: str,
    algorithm: str,
    n: int,
    nbytes: float,
    bw: float,
    alpha: float,
    *,
    nodes: int = 1,
    bw_inter: float | None = None,
    alpha_inter: float | None = None,
    servers: int = 1,
) -> float:
    """Idle-network time (s) of ``kind`` by ``algorithm`` over ``n`` ranks (:mod:`.cost`).

    ``bw`` is bytes/s per rank, ``alpha`` seconds per step. ``nodes``/``bw_inter``/
    ``alpha_inter`` describe a group spread over hosts. Raises ``KeyError`` for an unknown
    algorithm or a kind its form does not cover.
    """
    if n <= 1:
        return 0.0
    kind, nbytes = as_run(kind, nbytes)
    shape = cost.Shape(n, bw, alpha, nodes, bw_inter, alpha_inter)
    return ALGORITHMS[algorithm].cost(shape, kind, float(nbytes), servers)


def as_run(kind: str, nbytes: float) -> tuple[str, float]:
    """The collective that runs for ``kind``: a barrier runs as a zero-byte all-reduce."""
    return ("all_reduce", 0) if kind == "barrier" else (kind, nbytes)


def choose_algorithm(group: Group, kind: str, nbytes: int) -> str:
    """The ``auto`` choice: the smallest α-β estimate among algorithms able to run (a
    barrier is chosen as the zero-byte all-reduce it runs as)."""
    kind, nbytes = as_run(kind, nbytes)
    shape = group.shape()
    best, best_t = None, float("inf")
    for algo in ALGORITHMS.values():
        if kind not in algo.kinds or not algo.in_auto(group) or algo.misfit(group, kind) is not None:
            continue
        t = estimate_time(kind, algo.name, len(group.members), nbytes, **shape)
        if t < best_t:
            best, best_t = algo.name, t
    return best
