"""The engine's entry point: :func:`run_collective`, and the checks that turn a bad group
into a :class:`~clustersim.errors.ScenarioError`. The algorithms are rows of
:data:`clustersim.collectives.registry.ALGORITHMS`."""

from __future__ import annotations

from dataclasses import replace

from ..errors import ScenarioError
from .algorithm import DEFAULT_TUNING, NO_OPTIONS, Options, Tuning
from .group import Group
from .registry import ALGORITHMS, KINDS, SELECTORS, as_run, busiest_buffer, per_host, plan
from .ring import merge_plan
from .schedule import recipe, replay, start


def run_collective(
    env,
    fabric,
    kind: str,
    members: list[str],
    nbytes: int,
    algorithm: str = "auto",
    tuning: Tuning = DEFAULT_TUNING,
    options: Options = NO_OPTIONS,
    label: str = "",
):
    """SimPy process generator: run collective ``kind`` among ``members`` starting now.

    ``nbytes`` is the per-rank buffer as in nccl-tests (all-reduce: the buffer; all-gather:
    the total output; reduce-scatter: the total input; all-to-all: each rank's whole send
    buffer). ``algorithm`` is a key of :data:`ALGORITHMS` or ``"auto"`` (the fastest by
    the α-β model of :mod:`.cost`) or ``"nccl"`` (NCCL's tuner's pick, :mod:`.nccl_tuner`). ``tuning`` is the system's :class:`~.algorithm.Tuning`
    (per-step α, how a ring across hosts pays it, NCCL protocols): the call runs the
    protocol NCCL's tuner would pick — its latency first, then the schedule on the
    protocol's wire bytes. ``options`` are the call's own :class:`~.algorithm.Options`:
    ``root`` of broadcast/reduce (default: first member) and the server of
    ``parameter_server``; ``channels``, ``chunks``, ``servers`` tune ring channels,
    pipeline chunks and parameter servers; ``split[i][j]``: the bytes member i sends member
    j in an uneven all-to-all (all-to-all-v; ``direct`` only). Returns ``{member: finish
    time (s)}``.
    """
    call = prepare_collective(env, fabric, kind, members, nbytes, algorithm, tuning, options)
    return (yield from call.run(label))


class Call:
    """One collective call checked and planned — its :class:`Group`, the algorithm and NCCL
    protocol it runs, the bytes on the wire — which :meth:`run` runs from scratch each time.
    Nothing here depends on when it runs, so a caller that repeats a call (the engine: every
    micro-batch's same collective) prepares it once (:func:`prepare_collective`)."""

    __slots__ = ("group", "kind", "name", "protocol", "nbytes", "options", "recipe", "merge")

    def __init__(self, group: Group, kind: str, name: str, protocol, nbytes: int, options: Options):
        self.group, self.kind, self.name, self.protocol = group, kind, name, protocol
        self.nbytes, self.options = nbytes, options
        #: the first build's :func:`~.schedule.recipe` (empty: built every time), None before it
        self.recipe: tuple | None = None
        #: the ring's :class:`~.merged_ring.RingPlan` (False: none), None before the first run
        self.merge = None

    def run(self, label: str = "", shadow: bool = False):
        """SimPy process generator: run the call starting now (:func:`run_collective`) — a
        ring across hosts whose links are free in closed form (:mod:`.merged_ring`);
        a ``shadow`` (a folded twin's call, which only loads the links) on a fabric whose
        loads skip events returns once its messages are under way, with nothing
        (:func:`~.schedule.start`)."""
        group, env = self.group, self.group.env
        shadow = shadow and group.fabric.loads_without_events
        label = label or f"{self.kind}:{self.name}"
        merged = None if shadow else self._merged(label)
        if merged is not None:  # timed in closed form while it has its links to itself
            ring, finish = merged
            if self.protocol.latency > 0:
                yield env.timeout(self.protocol.latency)
            yield ring.done
            return {m: finish[m] for m in group.members}
        if len(group.members) == 1 and self.name != "parameter_server":
            engines = []
        else:
            engines = self._engines()
        if self.protocol.latency > 0:
            yield env.timeout(self.protocol.latency)
        finish = dict.fromkeys(group.members, env.now)
        done = start(env, group.fabric, engines, group.alpha_of, group.pace_of, label, finish, shadow)
        if shadow:
            return None
        if done is not None:
            yield done
        return {m: finish[m] for m in group.members}

    def _merged(self, label: str):
        """(a :class:`~.merged_ring.MergedRing` holding its links from now, the finish dict it
        fills) for a ring call whose closed form is exact and whose links are free now, else
        None (:mod:`.merged_ring`); the plan is worked out once per call."""
        if self.name != "ring" or len(self.group.members) < 2:
            return None
        if self.merge is None:
            self.merge = merge_plan(self.group, self.kind, self.nbytes, self.options) or False
        if not self.merge:
            return None
        env, latency = self.group.env, self.protocol.latency
        finish = dict.fromkeys(self.group.members, env.now + latency)
        ring = self.merge.hold(env, self.group.fabric, finish, label, latency)
        return None if ring is None else (ring, finish)

    def _engines(self) -> list:
        """The call's message engines, made anew for each run (their events fire once): the
        algorithm builds them the first time, and later runs replay that build's recipe,
        which skips the algorithm's own bookkeeping (a TP all-reduce repeats thousands of
        times) — unless the build scheduled an event of its own (the recipe is empty)."""
        if self.recipe:
            return replay(self.group.env, self.recipe)
        engines, _ = ALGORITHMS[self.name].build(self.group, self.kind, self.nbytes, self.options)
        if self.recipe is None:
            self.recipe = recipe(engines)
        return engines


def prepare_collective(
    env,
    fabric,
    kind: str,
    members: list[str],
    nbytes: int,
    algorithm: str = "auto",
    tuning: Tuning = DEFAULT_TUNING,
    options: Options = NO_OPTIONS,
) -> Call:
    """Check and plan one collective call (arguments as :func:`run_collective`'s); raises
    ScenarioError naming the field for a call that cannot run."""
    group = check_group(env, fabric, kind, members, nbytes, algorithm, tuning, options)
    kind, nbytes = as_run(kind, nbytes)
    if algorithm not in SELECTORS and len(group.members) > 1:
        check_shape(group, kind, algorithm)  # before its cost is estimated
    split = options.split
    name, protocol, _ = plan(group, kind, busiest_buffer(split) if split else nbytes, algorithm)
    if split is not None:  # each message of an all-to-all-v takes its protocol's wire bytes
        split = tuple(tuple(protocol.wire_bytes(b) for b in row) for row in split)
        options = replace(options, split=split)
    if len(group.members) > 1 or name == "parameter_server":
        check_schedule(group, kind, name, split)
    return Call(group, kind, name, protocol, protocol.wire_bytes(nbytes), options)


def check_schedule(group: Group, kind: str, name: str, split) -> None:
    """Raise ScenarioError when ``name`` cannot build ``kind`` on this group (its shape, or
    an uneven all-to-all it cannot run)."""
    check_shape(group, kind, name)
    if split is not None and (kind != "all_to_all" or name != "direct"):
        raise ScenarioError("collective.algorithm", name, "an uneven all-to-all (split) runs by direct only")


def check_shape(group: Group, kind: str, name: str) -> None:
    """Raise ScenarioError when ``name`` cannot run ``kind`` on this group's shape or links."""
    spec = ALGORITHMS[name]
    why = spec.fits(kind, len(group.members), per_host(group)) or spec.hardware(group.shape(), kind)
    if why is not None:
        raise ScenarioError("collective.algorithm", name, why)


def check_group(
    env,
    fabric,
    kind: str,
    members: list[str],
    nbytes: int,
    algorithm: str,
    tuning: Tuning = DEFAULT_TUNING,
    options: Options = NO_OPTIONS,
) -> Group:
    """Validate a collective call; return its :class:`Group`. Errors name the field."""
    if kind not in KINDS:
        raise ScenarioError("collective.kind", kind, f"known kinds: {', '.join(KINDS)}")
    if algorithm not in SELECTORS and algorithm not in ALGORITHMS:
        raise ScenarioError(
            "collective.algorithm",
            algorithm,
            f"known algorithms: {', '.join(SELECTORS)}, {', '.join(ALGORITHMS)}",
        )
    if algorithm not in SELECTORS and kind not in ALGORITHMS[algorithm].kinds:
        able = [a for a, spec in ALGORITHMS.items() if kind in spec.kinds]
        raise ScenarioError(
            "collective.algorithm",
            algorithm,
            f"{algorithm} does not implement {kind}; algorithms for {kind}: {', '.join(able)}",
        )
    if isinstance(members, str) or not members:
        raise ScenarioError("collective.members", members, "expected a non-empty list of topology node names")
    seen = set()
    for m in members:
        if m in seen:
            raise ScenarioError("collective.members", m, "duplicate member; each rank may appear once")
        seen.add(m)
    graph = getattr(fabric, "graph", None)
    if graph is not None:
        for m in [*members, *(options.servers or [])]:
            if m not in graph:
                field = "collective.members" if m in seen else "collective.servers"
                raise ScenarioError(field, m, "not a node of the fabric's topology (GPU i is 'gpu<i>')")
    if isinstance(nbytes, bool) or not isinstance(nbytes, int | float) or nbytes < 0:
        raise ScenarioError("collective.nbytes", nbytes, "expected a size in bytes >= 0")
    root = options.root
    if (
        root is not None
        and root not in seen
        and not (algorithm == "parameter_server" and (graph is None or root in graph))
    ):
        raise ScenarioError("collective.root", root, f"must be one of the members: {', '.join(members)}")
    return Group(env, fabric, list(members), tuning.alpha, tuning.latency, tuning.protocols)
