"""The algorithm registry and ``auto``: :data:`ALGORITHMS` maps the name a scenario uses
(``simulation.collectives``) to an :class:`~.algorithm.Algorithm`, one module per
algorithm. ``auto`` picks the smallest ``cost`` among algorithms that implement the kind,
fit the group's shape and whose ``in_auto`` admits it (:func:`choose_algorithm`), as
NCCL's tuner does; ties go to the first registered. ``nccl`` is NCCL's own tuner's choice
among the algorithms NCCL runs (:mod:`.nccl_tuner`).
"""

from __future__ import annotations

from .algorithm import ALGORITHMS, KINDS, Algorithm  # noqa: F401  (re-exported)
from .cost import Shape
from .group import Group
from .nccl_tuner import choose as nccl_choose
from .protocol import SIMPLE, Protocol, choose

#: the choice NCCL's tuner makes (``simulation.collectives`` value; :mod:`.nccl_tuner`)
NCCL = "nccl"
#: the choices a scenario may name besides an algorithm
SELECTORS = ("auto", NCCL)


def per_host(group: Group) -> tuple[int, ...]:
    """Members per host of ``group``: the shape the static rules read."""
    return tuple(len(v) for v in group.hosts.values())


def estimate_time(kind: str, algorithm: str, shape: Shape, nbytes: float, servers: int = 1) -> float:
    """Idle-network time (s) of ``kind`` by ``algorithm`` on a group of ``shape`` (its
    ranks, per-rank bandwidths and α's, hosts and how a ring across them pays its α's:
    :class:`~.cost.Shape`) for a buffer of ``nbytes`` (:mod:`.cost`); ``servers``: the
    parameter servers. Raises ``KeyError`` for an unknown algorithm or a kind its form does
    not cover.
    """
    if shape.n <= 1:
        return 0.0
    kind, nbytes = as_run(kind, nbytes)
    return ALGORITHMS[algorithm].cost(shape, kind, float(nbytes), servers)


def as_run(kind: str, nbytes: float) -> tuple[str, float]:
    """The collective that runs for ``kind``: a barrier runs as a zero-byte all-reduce."""
    return ("all_reduce", 0) if kind == "barrier" else (kind, nbytes)


def choose_algorithm(group: Group, kind: str, nbytes: int) -> str:
    """The ``auto`` choice: the smallest α-β estimate among algorithms able to run (a
    barrier is chosen as the zero-byte all-reduce it runs as)."""
    return plan(group, kind, nbytes)[0]


def may_choose(algorithm: Algorithm, kind: str, n: int, hosts: tuple[int, ...]) -> bool:
    """Whether ``auto`` may choose ``algorithm`` for ``kind`` on ``n`` members with
    ``hosts[h]`` of them on host ``h``: it implements the kind, fits the shape, its
    ``in_auto`` admits the shape and — across hosts — its ``across_hosts`` the kind."""
    return (
        kind in algorithm.kinds
        and algorithm.in_auto(n, hosts)
        and (len(hosts) == 1 or algorithm.across_hosts is None or kind in algorithm.across_hosts)
        and algorithm.fits(kind, n, hosts) is None
    )


def plan(group: Group, kind: str, nbytes: int, algorithm: str = "auto") -> tuple[str, Protocol, float]:
    """(algorithm, protocol, idle-network seconds) of one collective, as NCCL's tuner picks
    them: the least ``protocol latency + α-β time on the protocol's wire bytes`` over the
    group's protocols (each its latency for ``kind``, :meth:`~.protocol.Protocol.for_kind`) and — for ``auto`` — the algorithms able to run."""
    kind, nbytes = as_run(kind, nbytes)
    shape, n, hosts = group.shape(), len(group.members), per_host(group)
    if algorithm == "auto":
        names = [a.name for a in ALGORITHMS.values() if may_choose(a, kind, n, hosts)]
    elif algorithm == NCCL and n > 1:  # NCCL's tuner picks the pair (nccl_tuner.py)
        name, proto = nccl_choose(group, kind, nbytes)
        proto = ALGORITHMS[name].pays(shape, proto.for_kind(kind))
        return name, proto, proto.latency + estimate_time(kind, name, shape, proto.wire_bytes(nbytes))
    else:
        names = ["ring" if algorithm == NCCL else algorithm]
    # nothing to send: no protocol latency; else each protocol's latency for this kind
    protocols = tuple(p.for_kind(kind) for p in group.protocols) if n > 1 else (SIMPLE,)
    best = (None, protocols[0], float("inf"))
    for name in names:
        allowed = ALGORITHMS[name].protocols
        runs = tuple(p for p in protocols if allowed is None or p.name in allowed) or (SIMPLE,)
        runs = tuple(ALGORITHMS[name].pays(shape, p) for p in runs)
        proto, t = choose(runs, nbytes, lambda s, a=name: estimate_time(kind, a, shape, s))
        if t < best[2]:
            best = (name, proto, t)
    return best


def busiest_buffer(split: tuple) -> int:
    """The most bytes any member of an uneven all-to-all (``split[i][j]``: i sends j) sends
    or receives: the buffer its α-β time and protocol choice are worked out on."""
    sent = [sum(row) for row in split]
    received = [sum(col) for col in zip(*split)]
    return max(sent + received)
