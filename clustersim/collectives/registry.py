"""The algorithm registry and ``auto``: :data:`ALGORITHMS` maps the name a scenario uses
(``simulation.collectives``) to an :class:`~.algorithm.Algorithm`, one module per
algorithm. ``auto`` picks the smallest ``cost`` among algorithms that implement the kind,
fit the group's shape and whose ``in_auto`` admits it (:func:`choose_algorithm`), as
NCCL's tuner does; ties go to the first registered.
"""

from __future__ import annotations

from .algorithm import ALGORITHMS, KINDS, Algorithm, Options  # noqa: F401  (re-exported)
from .cost import Shape
from .group import Group


def per_host(group: Group) -> tuple[int, ...]:
    """Members per host of ``group``: the shape the static rules read."""
    return tuple(len(v) for v in group.hosts.values())


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
    latency: str = "overlapped",
) -> float:
    """Idle-network time (s) of ``kind`` by ``algorithm`` over ``n`` ranks (:mod:`.cost`).

    ``bw`` is bytes/s per rank, ``alpha`` seconds per step. ``nodes``/``bw_inter``/
    ``alpha_inter`` describe a group spread over hosts; ``latency`` how a ring spread over
    hosts pays its α's (``overlapped`` | ``nccl``, see :mod:`.cost`). Raises ``KeyError`` for an unknown
    algorithm or a kind its form does not cover.
    """
    if n <= 1:
        return 0.0
    kind, nbytes = as_run(kind, nbytes)
    shape = Shape(n, bw, alpha, nodes, bw_inter, alpha_inter, latency)
    return ALGORITHMS[algorithm].cost(shape, kind, float(nbytes), servers)


def as_run(kind: str, nbytes: float) -> tuple[str, float]:
    """The collective that runs for ``kind``: a barrier runs as a zero-byte all-reduce."""
    return ("all_reduce", 0) if kind == "barrier" else (kind, nbytes)


def choose_algorithm(group: Group, kind: str, nbytes: int) -> str:
    """The ``auto`` choice: the smallest α-β estimate among algorithms able to run (a
    barrier is chosen as the zero-byte all-reduce it runs as)."""
    kind, nbytes = as_run(kind, nbytes)
    shape, n, hosts = group.shape(), len(group.members), per_host(group)
    best, best_t = None, float("inf")
    for algo in ALGORITHMS.values():
        if kind not in algo.kinds or not algo.in_auto(n, hosts) or algo.fits(kind, n, hosts) is not None:
            continue
        t = estimate_time(kind, algo.name, len(group.members), nbytes, **shape)
        if t < best_t:
            best, best_t = algo.name, t
    return best
