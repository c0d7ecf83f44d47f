"""What a run will cost before it is compiled: ops, simulated events and wall seconds.

:func:`estimate` reads only the resolved Job — GPUs simulated (folded or not), micro-batches,
model chunks per stage and the segments of each pass (layers and granularity), the schedule's
phases, pipeline sends, data-parallel collectives, iterations — and prices each op in
simulated events by the network model: on ``packet`` a message is ``⌈bytes / chunk⌉`` chunks
on each link of its route (``simulation.chunk_size``, ``max_chunks``), on ``flow`` a start and
an end, on ``analytical``/``direct`` one timeout; a collective on the fabric is its
algorithm's point-to-point messages (a ring all-reduce of n members: 2(n − 1) per member),
under ``collective_model: analytical`` three events. Folded runs count the shadow traffic of
the twins they drop. The wall time is ops × :data:`SECONDS_PER_OP` + events × the
network's :data:`SECONDS_PER_EVENT` (measured on the project's 2-core machine, docs/fidelity.md).

An unfolded run that ``simulate`` evaluates as replicas of its folded Program
(:func:`.replication.replica_obstacle`, given the run's training mode) is priced as it runs:
the folded evaluation (its ops and events) plus every span expanded to the tp × dp twins
(:data:`SECONDS_PER_ROW`). Its ``ops`` are then the ops the run records (every GPU's, the
rows of its tables: the memory side of the budget) and its ``events`` the events it
evaluates (the folded pass's: the time side), so ``max_ops`` compares the expanded rows
and ``max_events`` the folded work.

It is an estimate, not a count: tests/test_estimate.py holds it within 2× of the real op and
event counts of shipped scenarios. :func:`check_budget` refuses a run whose estimate passes
``simulation.max_events`` or ``simulation.max_ops`` — before compiling, so a slip of a few
digits is a one-line error instead of a run that never ends — and :func:`advice` says which
fidelity preset or knob brings the estimate down, and by how much.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..errors import ProgramError, ScenarioError
from ..schedules.orders import stage_order
from ..topology.graph import is_wire
from ..topology.lazy import link_data
from ..topology.routing import Router
from .replication import replica_obstacle

#: wall seconds per op (compile, check, engine plans, result tables) and per simulated event,
#: measured on the project's 2-core machine (docs/fidelity.md); a rough scale, not a promise
SECONDS_PER_OP = 30e-6
SECONDS_PER_EVENT = {"packet": 3e-6, "flow": 9e-6}  # (a flow event re-solves the shares)
OTHER_SECONDS_PER_EVENT = 4e-6
#: wall seconds per op of a replicated run for expanding its span to each twin (spans,
#: memory samples, result tables; GPT-3 175B and LLaMA-3 405B unfolded, docs/performance.md)
SECONDS_PER_ROW = 2.5e-6
#: the packet model's chunk when ``simulation.chunk_size`` is unset (network/packet.py)
DEFAULT_CHUNK = 1 << 20
#: events a flow-model message costs: its start, its end and its share of the rate changes
#: other flows cause (measured on GPT-3 175B folded and GPT-7.5B, docs/fidelity.md)
FLOW_EVENTS = 5
#: events a collective's point-to-point step costs besides its message (the step's process
#: waking, the send's completion and the receiver's wake-up; measured, docs/fidelity.md)
STEP_EVENTS = 3
#: a run estimated longer than this gets advice printed before it starts
ADVICE_S = 60.0


@dataclass(frozen=True)
class Estimate:
    """Ops the run records, events it simulates and wall seconds it is expected to take;
    ``replicas``: how many twins each evaluated op stands for (1 unless replicated, module
    docstring)."""

    ops: int
    events: int
    seconds: float
    replicas: int = 1

    def line(self) -> str:
        """One line for the log: ``~1.2 M ops, ~54 M events, ~3 min`` (a replicated run:
        ``~2.7 M ops (~42 k evaluated × 64 replicas), …``)."""
        ops = f"~{_count(self.ops)} ops"
        if self.replicas > 1:
            ops += f" (~{_count(self.ops / self.replicas)} evaluated × {self.replicas} replicas)"
        return f"{ops}, ~{_count(self.events)} events, ~{_duration(self.seconds)}"


def _count(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f}"


def _duration(s: float) -> str:
    if s < 1:
        return "< 1 s"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.3g} h"


@dataclass(frozen=True)
class _Knobs:
    """The settings an estimate is taken under (the Job's, or an alternative for advice)."""

    network: str
    collective_model: str
    granularity: str
    fold: bool
    chunk: int
    max_chunks: int | None
    iterations: int


def _knobs(job) -> _Knobs:
    sim = job.simulation
    return _Knobs(
        network=sim.network,
        collective_model=sim.collective_model,
        granularity=sim.granularity,
        fold=job.fold.enabled,
        chunk=int(sim.chunk_size or DEFAULT_CHUNK),
        max_chunks=sim.max_chunks,
        iterations=sim.iterations,
    )


def estimate(job, knobs: _Knobs | None = None, mode_name: str | None = None) -> Estimate:
    """The cost of running ``job`` (a resolved Job) under its own settings, or ``knobs``;
    ``mode_name``: the training mode ``simulate`` runs it in, which decides whether an
    unfolded run is replicated (None: a run that is not, e.g. one job of a multi-job run)."""
    k = knobs or _knobs(job)
    if mode_name is not None and not k.fold:
        why_not = replica_obstacle(job, mode_name, False, k.network, k.collective_model)
        if why_not is None:
            return _replicated(job, k)
    hops = _Hops(job, k.network)
    if job.layer_costs is not None:  # a parameter server: workers push and pull per layer
        return _parameter_server(job, k, hops)
    if job.trace is not None:
        return _trace(job.trace, k, hops)
    plan, cl = job.plan, job.cluster
    gpn = cl.gpus_per_node
    m = job.num_microbatches
    tp, dp, pp = plan.tp, plan.dp, plan.pp
    replicas, ranks = (1, 1) if k.fold else (dp, tp)
    # a folded send or DP collective carries its twins' traffic on a fabric whose links are
    # shared; on analytical and direct the shadows load nothing
    twins = tp * dp if k.fold and k.network in ("packet", "flow") else 1
    w_share = _weight_share(job, m)
    tp_hops, tp_channels = (hops.inter, gpn) if tp > gpn else (hops.intra, 1)
    ops = events = 0.0
    for s in range(pp):
        chunks = job.stage_chunks(s)
        seg_c = seg_x = 0.0  # compute and TP-collective ops of one micro-batch on this stage
        tp_events = 0.0  # the TP collectives' fabric events
        for c in chunks:
            cost = job.chunk_costs[c]
            for phase, weight in (("F", 1.0), ("B", 1.0), ("W", w_share)):
                if weight == 0:
                    continue
                comp, colls = _pass_ops(cost.segments(phase, split_backward=w_share > 0), k.granularity)
                seg_c += weight * comp
                seg_x += weight * len(colls)
                tp_events += weight * sum(
                    _collective_events(k, kd, tp, n, tp_hops, tp_channels) for kd, n in colls
                )
        # pipeline sends: forward activations out of every chunk but the last, gradients back
        sends = 2 * len(chunks) - (s == 0) - (s == pp - 1) if pp > 1 else 0
        act = max((job.chunk_costs[c].activation_bytes for c in chunks), default=0)
        pp_hops = hops.inter if tp * dp >= gpn else hops.intra
        per_send = _message_events(k, act, pp_hops) * twins
        dp_ops, dp_events = _data_parallel(job, k, chunks, dp, tp, gpn, hops, twins)
        per_rank_ops = m * (seg_c + seg_x + 2 * sends) + dp_ops + 1  # + the optimizer step
        per_rank_events = (
            m * (seg_c + _own_events(k, tp) * seg_x + tp_events + sends * per_send) + dp_events + 1
        )
        ops += per_rank_ops * replicas * ranks
        events += per_rank_events * replicas * ranks
    return _priced(k, ops * k.iterations, events * k.iterations)


def _replicated(job, k: _Knobs) -> Estimate:
    """The folded run's estimate, plus each of its ops expanded to the tp × dp twins."""
    folded = estimate(job, replace(k, fold=True))
    twins = job.plan.tp * job.plan.dp
    rows = folded.ops * twins
    return Estimate(rows, folded.events, folded.seconds + rows * SECONDS_PER_ROW, twins)


def _parameter_server(job, k: _Knobs, hops: _Hops) -> Estimate:
    """Each worker runs m forward and backward passes per layer and sends and receives
    each layer's parameters once per iteration; the server applies each layer once."""
    layers = job.layer_costs[job.cluster.gpu]
    n, m = job.num_gpus, job.num_microbatches
    per_layer = sum(_message_events(k, c.gradient_bytes, hops.inter) for c in layers)
    ops = k.iterations * (n * (2 * m + 4) * len(layers) + len(layers))
    events = k.iterations * (n * (2 * m * len(layers) + 2 * per_layer) + len(layers))
    return _priced(k, ops, events)


def _trace(prog, k: _Knobs, hops: _Hops) -> Estimate:
    """A trace's ops are known (and run once, whatever ``simulation.iterations``): each
    costs one event, a message its packets or flow events (taken between nodes), a
    collective its algorithm's messages."""
    events = 0.0
    for op in prog.ops:
        events += 1
        if op.kind == "send":
            events += _message_events(k, op.nbytes, hops.inter)
        elif op.kind == "collective":
            n = len(op.group)
            events += _own_events(k, n) + _collective_events(k, op.collective, n, op.nbytes, hops.inter)
    return _priced(k, len(prog.ops), events)


def _priced(k: _Knobs, ops: float, events: float) -> Estimate:
    ops, events = int(ops), int(max(events, ops))
    per_event = SECONDS_PER_EVENT.get(k.network, OTHER_SECONDS_PER_EVENT)
    return Estimate(ops, events, ops * SECONDS_PER_OP + events * per_event)


def _pass_ops(segs, granularity: str) -> tuple[int, list[tuple[str, int]]]:
    """A pass's compute ops and its collectives (kind, bytes): as built, or merged as
    ``granularity: stage`` builds it (compute halves around one summed collective per kind)."""
    colls = [(s.collective, s.nbytes) for s in segs if s.kind == "collective"]
    if granularity != "stage":
        return len(segs) - len(colls), colls
    sums: dict[str, int] = {}
    for kind, n in colls:
        sums[kind] = sums.get(kind, 0) + n
    return (2 if sums else 1), list(sums.items())


def _weight_share(job, m: int) -> float:
    """W passes per F pass in the schedule's order (zero-bubble schedules split the backward);
    read off stage 0's order for a few micro-batches."""
    p, v = job.plan.pp, job.parallel.virtual_stages
    mm = min(m, 4 * p * v)
    try:
        order = stage_order(job.schedule, 0, p, mm, v, 1)
    except (ScenarioError, ProgramError, ValueError):
        return 0.0
    f = sum(1 for item in order if item[0] == "F")
    return sum(1 for item in order if item[0] == "W") / f if f else 0.0


class _Hops:
    """Links a message crosses inside a node and between nodes (two sample routes)."""

    def __init__(self, job, network: str):
        self.intra = self.inter = 1
        if network == "direct":
            return
        graph, gpn = job.graph, job.cluster.gpus_per_node
        router = Router(graph)
        gpus = job.cluster.num_gpus

        def hops(a: int, b: int) -> int:
            try:
                links = router.links(f"gpu{a}", f"gpu{b}")
            except ScenarioError:  # no route between the samples: the run says so if it needs one
                return 1
            return max(1, sum(1 for u, w in links if not is_wire(link_data(graph, u, w))))

        if gpn > 1:
            self.intra = hops(0, 1)
        # a GPU 32 nodes on: under another leaf of a fat tree (4–32 nodes per leaf by
        # default), else on another node — the longest route most traffic takes
        far = min(gpus - 1, 32 * gpn)
        self.inter = hops(0, far) if far >= gpn else self.intra


def _message_events(k: _Knobs, nbytes: float, hops: int) -> float:
    """Simulated events of one point-to-point message of ``nbytes`` over ``hops`` links."""
    if k.network == "packet":
        chunk = k.chunk
        if k.max_chunks:
            chunk = max(chunk, math.ceil(nbytes / k.max_chunks))
        return max(1, math.ceil(nbytes / chunk)) * hops
    return FLOW_EVENTS if k.network == "flow" else 1


def _own_events(k: _Knobs, n: int) -> float:
    """Engine events of one member's collective op besides its messages: its rendezvous and
    phases — three per member on the fabric, three per whole collective when it is timed
    analytically (engine/dag.py counts them so)."""
    return 3 / n if k.collective_model == "analytical" else 3


def _collective_events(k: _Knobs, kind: str, n: int, nbytes: float, hops: int, channels: int = 1) -> float:
    """Events one member's collective op costs beyond its own op: none more under the
    analytical collective model, else the algorithm's messages (ring-like: 2(n − 1) steps of
    nbytes/n for an all-reduce, n − 1 for the other kinds, on each of ``channels`` rings —
    NCCL's one ring per member of a host when the group spans hosts, collectives/ring.py)."""
    if k.collective_model == "analytical" or n <= 1:
        return 0.0
    steps = 2 * (n - 1) if kind == "all_reduce" else n - 1
    return channels * steps * (STEP_EVENTS + _message_events(k, nbytes / n / channels, hops))


def _data_parallel(job, k: _Knobs, chunks, dp, tp, gpn, hops, twins) -> tuple[float, float]:
    """Ops and events of one rank's data-parallel traffic in one iteration."""
    if dp <= 1:
        return 0.0, 0.0
    d = job.data_parallel
    spans = tp * dp > gpn
    dp_hops = hops.inter if spans else hops.intra
    channels = max(1, gpn // tp) if spans and tp < gpn else 1
    ops = events = 0.0
    for c in chunks:
        cost = job.chunk_costs[c]
        grads = cost.gradient_bytes
        pieces, kinds = 1, ("all_reduce",)
        if d is not None:
            if d.bucket_size:
                pieces = max(1, math.ceil(grads / d.bucket_size))
            if d.sharded or d.fsdp:
                kinds = ("reduce_scatter", "all_gather")
            if d.fsdp:
                pieces = max(pieces, math.ceil(cost.layers / d.unit)) * job.num_microbatches
        for kind in kinds:
            ops += pieces
            events += pieces * (
                _own_events(k, dp)
                + _collective_events(k, kind, dp, grads / pieces, dp_hops, channels) * twins
            )
    return ops, events


#: alternatives :func:`advice` tries, in order: (what to tell the user, settings changed)
_ALTERNATIVES = (
    (
        "simulation.fidelity: fast",
        {"network": "analytical", "collective_model": "analytical", "granularity": "stage"},
    ),
    ("simulation.fidelity: balanced", {"network": "flow", "granularity": "stage"}),
    ("simulation.fold: true", {"fold": True}),
    ("simulation.granularity: stage", {"granularity": "stage"}),
    ("simulation.network: flow", {"network": "flow"}),
    ("simulation.collective_model: analytical", {"collective_model": "analytical"}),
    ("simulation.max_chunks: 16", {"max_chunks": 16}),
    ("simulation.iterations: 1", {"iterations": 1}),
)


def advice(job, est: Estimate | None = None, mode_name: str | None = None) -> list[str]:
    """What brings the estimate down, best first: ``'simulation.fold: true (~1.2 k ops, …; 40× fewer events)'``
    (``mode_name`` as in :func:`estimate`)."""
    est = est or estimate(job, mode_name=mode_name)
    base = _knobs(job)
    out = []
    for label, change in _ALTERNATIVES:
        if change.get("fold") and not job.foldable:
            continue
        alt = replace(base, **{key: val for key, val in change.items() if key != "fold"})
        if "fold" in change:
            alt = replace(alt, fold=True)
        if alt == base:
            continue
        other = estimate(job, alt, mode_name)
        if other.seconds < est.seconds / 1.5:
            out.append(
                (other.seconds, f"{label} ({other.line()}; {est.seconds / other.seconds:.0f}× faster)")
            )
    return [text for _, text in sorted(out)]


def check_budget(job, mode_name: str | None = None) -> Estimate:
    """The run's :class:`Estimate` (``mode_name`` as in :func:`estimate`); a ScenarioError on
    ``simulation.max_events`` (or ``max_ops``) with the estimate and :func:`advice` when it
    passes the budget."""
    est = estimate(job, mode_name=mode_name)
    sim = job.simulation
    for field, used, budget in (
        ("max_ops", est.ops, sim.max_ops),
        ("max_events", est.events, sim.max_events),
    ):
        if used > budget:
            tips = advice(job, est, mode_name)
            hint = f"; to reduce it: {'; '.join(tips[:3])}" if tips else ""
            raise ScenarioError(
                f"simulation.{field}",
                budget,
                f"this run is estimated at {est.line()}, past the budget of {_count(budget)} "
                f"{field.removeprefix('max_')}{hint} (or raise simulation.{field})",
            )
    return est
