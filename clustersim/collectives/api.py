"""The engine's entry point: :func:`run_collective`, the :data:`ALGORITHMS` registry, and
the checks that turn a bad group into a :class:`~clustersim.errors.ScenarioError`."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ScenarioError
from .cost import estimate_time
from .direct import build_direct
from .group import Group
from .halving_doubling import build_halving_doubling, is_power_of_two
from .hierarchical import build_hierarchical
from .parameter_server import build_parameter_server
from .ring import build_ring, ring_orders
from .schedule import execute
from .tree import build_tree

#: collective kinds (send/recv are the engine's own point-to-point ops)
KINDS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "barrier")


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm: its name, the kinds it implements, a one-line summary, and
    whether ``auto`` may choose it."""

    name: str
    kinds: frozenset
    doc: str
    in_auto: bool = True


ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm("ring", frozenset(KINDS) - {"all_to_all"}, "NCCL ring, multi-channel across hosts"),
    Algorithm("tree", frozenset({"all_reduce", "barrier"}), "double binary tree, pipelined"),
    Algorithm("halving_doubling", frozenset({"all_reduce", "reduce_scatter", "all_gather", "barrier"}),
              "recursive halving (reduce-scatter) and doubling (all-gather)"),
    Algorithm("hierarchical", frozenset({"all_reduce", "barrier"}),
              "intra-host reduce-scatter, inter-host all-reduce, intra-host all-gather"),
    Algorithm("direct", frozenset(KINDS), "every rank sends straight to every receiver"),
    Algorithm("parameter_server", frozenset({"all_reduce", "reduce", "broadcast", "barrier"}),
              "workers push to server(s), servers push back", in_auto=False),
)}


def run_collective(env, fabric, kind: str, members: list[str], nbytes: int, algorithm: str = "auto",
                   alpha: float | dict | None = None, root: str | None = None, label: str = "", *,
                   channels: int | None = None, chunks: int | None = None, servers: list[str] | None = None):
    """SimPy process generator: run collective ``kind`` among ``members`` starting now.

    ``nbytes`` is the per-rank buffer as in nccl-tests (all-reduce: the buffer; all-gather:
    the total output; reduce-scatter: the total input; all-to-all: each rank's whole send
    buffer). ``algorithm`` is a key of :data:`ALGORITHMS` or ``"auto"`` (the fastest by
    the α-β model of :mod:`.cost`). ``alpha`` is the per-step latency in seconds: one
    number for every step, a mapping ``{"intra_node": s, "inter_node": s}``, or None for
    NCCL-derived defaults (:data:`~clustersim.collectives.group.DEFAULT_ALPHA`). ``root``
    is the root of broadcast/reduce (default: first member) and the server of
    ``parameter_server``. ``channels``, ``chunks``, ``servers`` tune ring channels,
    pipeline chunks and parameter servers. Returns ``{member: finish time (s)}``.
    """
    group = check_group(env, fabric, kind, members, nbytes, algorithm, alpha, root, servers)
    if kind == "barrier":
        kind, nbytes = "all_reduce", 0
    name = choose_algorithm(group, kind, nbytes, servers) if algorithm == "auto" else algorithm
    engines, _ = build_schedule(group, kind, name, int(nbytes), root, channels, chunks, servers)
    start = env.now
    finish = dict.fromkeys(group.members, start)
    yield from execute(env, fabric, engines, group.alpha_of, group.pace_of, label or f"{kind}:{name}", finish)
    return {m: finish[m] for m in group.members}


def build_schedule(group: Group, kind: str, name: str, nbytes: int, root=None, channels=None, chunks=None,
                   servers=None):
    """Compile one collective into engine programs (see :mod:`.schedule`)."""
    env, order = group.env, group.members
    if len(order) == 1 and name != "parameter_server":
        return [], {}
    check_shape(group, kind, name)
    if name == "ring":
        return build_ring(env, kind, ring_orders(group.hosts, channels), nbytes, {}, root, chunks)
    if name == "tree":
        return build_tree(env, kind, order, nbytes, {}, root, chunks)
    if name == "halving_doubling":
        return build_halving_doubling(env, kind, order, nbytes, {})
    if name == "hierarchical":
        return build_hierarchical(env, kind, group.hosts, nbytes, {})
    if name == "direct":
        return build_direct(env, kind, order, nbytes, {}, root)
    return build_parameter_server(env, kind, order, nbytes, {}, root, servers=servers)


def check_shape(group: Group, kind: str, name: str) -> None:
    """Raise ScenarioError when ``name`` cannot run ``kind`` on this group's shape."""
    n = len(group.members)
    if name == "halving_doubling" and kind != "all_reduce" and not is_power_of_two(n):
        raise ScenarioError("collective.algorithm", name,
                            f"{kind} by halving_doubling needs a power-of-two group; got {n} members")
    if name == "hierarchical":
        sizes = {len(v) for v in group.hosts.values()}
        if len(sizes) > 1:
            raise ScenarioError("collective.algorithm", name, "hierarchical needs the same number of members "
                                f"on every host; got {sorted(sizes)} per host")


def choose_algorithm(group: Group, kind: str, nbytes: int, servers=None) -> str:
    """The ``auto`` choice: the smallest α-β estimate among algorithms able to run."""
    shape = group.shape()
    best, best_t = None, float("inf")
    for algo in ALGORITHMS.values():
        if not algo.in_auto or kind not in algo.kinds:
            continue
        if algo.name == "hierarchical" and shape["nodes"] <= 1:
            continue
        try:
            check_shape(group, kind, algo.name)
        except ScenarioError:
            continue
        t = estimate_time(kind, algo.name, len(group.members), nbytes, **shape)
        if t < best_t:
            best, best_t = algo.name, t
    return best


def check_group(env, fabric, kind, members, nbytes, algorithm, alpha, root, servers=None) -> Group:
    """Validate a collective call; return its :class:`Group`. Errors name the field."""
    if kind not in KINDS:
        raise ScenarioError("collective.kind", kind, f"known kinds: {', '.join(KINDS)}")
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise ScenarioError("collective.algorithm", algorithm, f"known algorithms: auto, {', '.join(ALGORITHMS)}")
    if algorithm != "auto" and kind not in ALGORITHMS[algorithm].kinds:
        able = [a for a, spec in ALGORITHMS.items() if kind in spec.kinds]
        raise ScenarioError("collective.algorithm", algorithm,
                            f"{algorithm} does not implement {kind}; algorithms for {kind}: {', '.join(able)}")
    if isinstance(members, str) or not members:
        raise ScenarioError("collective.members", members, "expected a non-empty list of topology node names")
    seen = set()
    for m in members:
        if m in seen:
            raise ScenarioError("collective.members", m, "duplicate member; each rank may appear once")
        seen.add(m)
    graph = getattr(fabric, "graph", None)
    if graph is not None:
        for m in [*members, *(servers or [])]:
            if m not in graph:
                field = "collective.members" if m in seen else "collective.servers"
                raise ScenarioError(field, m, "not a node of the fabric's topology (GPU i is 'gpu<i>')")
    if isinstance(nbytes, bool) or not isinstance(nbytes, int | float) or nbytes < 0:
        raise ScenarioError("collective.nbytes", nbytes, "expected a size in bytes >= 0")
    if root is not None and root not in seen and not (algorithm == "parameter_server" and
                                                      (graph is None or root in graph)):
        raise ScenarioError("collective.root", root, f"must be one of the members: {', '.join(members)}")
    return Group(env, fabric, list(members), alpha)
