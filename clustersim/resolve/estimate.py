"""What a run will cost before it is compiled: ops, simulated events, seconds and memory.

:func:`estimate` reads only the resolved Job and counts what the compilers will build:
for each stage, its GPUs (tp × the cp × dp replicas, its own stage replicas, or one when
folded) and the passes each runs (micro-batches the schedule sends through each model
chunk — one of a bidirectional stage's two chunks; every r-th on a stage replica;
forwards only when serving), each pass its segments as ``pass_segments`` gives them
(framework work, Megatron's all-gather of a received tensor, compute, TP/CP/expert
collectives, ring-attention steps and their K/V transfers, TP overlap's chunks; runs of
compute merged at stage granularity as ``coarsen`` merges them) and its pipeline
transfers; per optimizer step the data-parallel collectives (buckets, sharding, FSDP
units), the expert gradients' all-reduce and a flushing schedule's step work (the tied
embedding's all-reduce, the loss-scale check and the gradient norm with their scalar
all-reduces). Each collective is priced by :mod:`.estimate_comm`: the messages of the
algorithm the run will pick for its group, each at its network model's events; a member
holds 1/n of them, a folded representative all of them and its shadows'. A collective timed
by its α-β form (``collective_model: analytical``; on ``flow``, a group inside one host's
private links) is three events a call; a recv is none (its send's delivery ends it); where
communication slows compute (``cluster.comm_compute_slowdown``) each collective op re-times
the compute beside it (:data:`.estimate_gpu.SLOWDOWN_EVENTS`).

The CPU seconds follow from the counts: GPUs × :data:`SECONDS_PER_GPU` + ops ×
:data:`SECONDS_PER_OP` + events × the network's :data:`SECONDS_PER_EVENT` (the DAG pass's
cheaper rate where it evaluates the run); the peak memory (RSS) from the interpreter's own, ops, GPUs and the messages of the
largest collective call (:data:`BASE_RSS` and the ``RSS_PER_*`` rates), all measured on the
project's 2-core machine (``benchmarks/estimate_truth.py`` prints estimate against run).

An unfolded run that ``simulate`` evaluates as replicas of its folded Program
(:func:`.replication.replica_obstacle`, given the run's training mode) is priced as it runs:
the folded evaluation (its ops and events) plus every span expanded to the tp × dp twins
(:data:`SECONDS_PER_ROW`). Its ``ops`` are then the ops the run records (every GPU's, the
rows of its tables: the memory side of the budget) and its ``events`` the events it
evaluates (the folded pass's: the time side), so ``max_ops`` compares the expanded rows
and ``max_events`` the folded work.

It is an estimate, not a count: tests/test_estimate.py and tests/test_estimate_truth.py
hold it within 2× of the real op and event counts of every shipped scenario.
:func:`check_budget` refuses a run whose estimate passes ``simulation.max_events`` or
``simulation.max_ops`` — before compiling, so a slip of a few digits is a one-line error
instead of a run that never ends — or whose memory would pass what the machine has
available, and :func:`advice` says which fidelity preset or knob brings the estimate
down (or fits it), and by how much.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ProgramError, ScenarioError
from ..network.packet import DEFAULT_CHUNK_SIZE as DEFAULT_CHUNK
from ..schedules.orders import stage_order
from .estimate_comm import Collectives, Hops
from .estimate_gpu import GpuWork, Work, message_events_of, plain
from .replication import contention_free, replica_obstacle

#: wall seconds per op (compile, check, engine plans, result tables) and per simulated event,
#: measured on the project's 2-core machine (benchmarks/estimate_truth.py, docs/fidelity.md);
#: a rough scale, not a promise. Since the engine and the DAG pass share one lane-stepping core
#: an op costs either about the same (GPT 7.5B / 64 H100 at balanced, LLaMA-3 70B at 128K,
#: Megatron 2021's GPT 1T); an event of SimPy's costs more than one of the DAG pass's
SECONDS_PER_OP = 10e-6
BASE_SECONDS = 0.01  # what any run builds whatever its size (plans, result tables)
#: and per GPU (its topology nodes and links, routes, groups): what a run of few events still
#: costs — the family at balanced, its rings in closed form, 50–80 µs a GPU from 256 to 4,096
SECONDS_PER_GPU = 50e-6
SECONDS_PER_EVENT = {"packet": 2e-6, "flow": 6e-6}  # (a flow event re-solves the shares)
OTHER_SECONDS_PER_EVENT = 2e-6
#: an event where the DAG pass evaluates the run (engine/dag.py: no SimPy events)
DAG_SECONDS_PER_EVENT = 1e-6
#: wall seconds per op of a replicated run for expanding its span to each twin (spans,
#: memory samples, result tables; GPT-3 175B and LLaMA-3 405B unfolded, docs/performance.md)
SECONDS_PER_ROW = 0.4e-6
#: peak memory: the interpreter with clustersim and its libraries imported, then bytes per op
#: (the Program, the engine's plans, spans and result tables), per GPU (topology graph,
#: routes, per-device tables) and per span row a replicated run expands (docs/performance.md)
BASE_RSS = 110 * 2**20
RSS_PER_OP = 1700
RSS_PER_GPU = 20_000
RSS_PER_ROW = 200  # (GPT-3 175B / 1,024 unfolded 150 B, the TP-overlap family at 64–128 GPUs 170 B)
RSS_PER_MESSAGE = 1000
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
    rss_bytes: int = 0

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
    #: ``simulation.fold_contention``: a folded transfer and its twins' as one flow
    orbits: bool = False


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
        orbits=sim.fold_contention,
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
    hops = Hops(job, k.network)
    # a ring across hosts in closed form keeps its links to itself where no other traffic
    # crosses hosts: no pipeline, context-parallel or expert-parallel sends beside it, and no
    # folded twins' rings run as loads (collectives/merged_ring.py)
    par = job.parallel
    alone = par.pp == 1 and par.cp == 1 and par.ep == 1
    comm = Collectives(job, k.network, k.chunk, k.max_chunks, hops, merges=alone and (k.orbits or not k.fold))
    if job.layer_costs is not None:  # a parameter server: workers push and pull per layer
        return _parameter_server(job, k, hops)
    if job.trace is not None:
        return _trace(job, k, hops, comm)
    plan, m = job.plan, job.num_microbatches
    stage_replicas = job.parallel.stage_replicas
    w_share, visits = _order_shares(job, m)
    gpu = GpuWork(job, k, comm)
    # inference: forwards only, sent on and never back, no optimizer steps, and one
    # arrival op per request on each replica's first GPU (compilers/inference/compile.py)
    serving = job.training.mode == "inference"
    phases = (("F", 1.0),) if serving else (("F", 1.0), ("B", 1.0), ("W", w_share))
    arrivals = m * (1 if k.fold else plan.replicas) if serving else 0.0
    total = Work(arrivals, arrivals, arrivals)
    for s in range(plan.pp):
        # the stage's replicas (cp × dp ranks, or its own stage replicas) of tp GPUs each;
        # a stage replica runs every r-th micro-batch (compilers/replicated/compile.py)
        reps = stage_replicas[s] if stage_replicas else plan.replicas
        gpus, passes = (
            (1, m * visits) if k.fold else (plan.tp * reps, m * visits / (reps if stage_replicas else 1))
        )
        per_pass = Work()  # one micro-batch's passes on one GPU of this stage
        for c in job.stage_chunks(s):
            for phase, weight in phases:
                if weight:
                    per_pass += gpu.pass_cost(s, c, phase, w_share > 0) * weight
        # optimizer steps per iteration: one when the schedule flushes, else one per
        # micro-batch (merged over a stage's replicas: one per r of them)
        steps = 1 if job.schedule.flush else m / (reps if stage_replicas else 1)
        steps *= not serving
        total += (per_pass * passes + gpu.step_cost(s, job.stage_chunks(s), reps) * steps) * gpus
    dag = job.simulation.evaluator != "des" and contention_free(job, None, k.network, k.collective_model)[0]
    return _priced(k, total * k.iterations, job.num_gpus, gpu, dag)


def _replicated(job, k: _Knobs) -> Estimate:
    """The folded run's estimate, plus each of its ops expanded to the tp × dp twins."""
    folded = estimate(job, replace(k, fold=True))
    twins = job.plan.tp * job.plan.replicas
    rows = folded.ops * twins
    rss = folded.rss_bytes + rows * RSS_PER_ROW + job.num_gpus * RSS_PER_GPU
    return Estimate(rows, folded.events, folded.seconds + rows * SECONDS_PER_ROW, twins, int(rss))


def _parameter_server(job, k: _Knobs, hops: Hops) -> Estimate:
    """Each worker runs m forward and backward passes per layer and sends and receives
    each layer's parameters once per iteration; the server applies each layer once."""
    layers = job.layer_costs[job.cluster.gpu]
    n, m = job.num_gpus, job.num_microbatches
    per_layer = sum(message_events_of(k, c.gradient_bytes, hops.inter) for c in layers)
    ops = k.iterations * (n * (2 * m + 4) * len(layers) + len(layers))
    events = k.iterations * (n * (2 * m * len(layers) + 2 * per_layer) + len(layers))
    return _priced(k, plain(ops, events), n)


def _trace(job, k: _Knobs, hops: Hops, comm: Collectives) -> Estimate:
    """A trace's ops are known (and run once, whatever ``simulation.iterations``): each
    costs one event, a message its packets or flow events (taken between nodes), a
    collective its algorithm's messages."""
    prog, gpu = job.trace, GpuWork(job, k, comm)
    ops = events = weight = 0.0  # Work's three sums, added op by op in its order (one Work an op is slow)
    for op in prog.ops:
        kind = op.kind
        if kind == "send":
            sent = 1 + message_events_of(k, op.nbytes, hops.inter)
            ops, events, weight = ops + 1, events + sent, weight + sent
        elif kind == "collective":
            w = plain(0, 1) + gpu.collective(tuple(op.group), op.collective, op.nbytes, 1)
            ops, events, weight = ops + w.ops, events + w.events, weight + w.weight
        else:
            ops, events, weight = ops + 1, events + 1, weight + 1
    return _priced(k, Work(ops, events, weight), prog.num_devices, gpu)


def _priced(k: _Knobs, work: Work, gpus: int, gpu: GpuWork | None = None, dag: bool = False) -> Estimate:
    """The Estimate of ``work`` on ``gpus`` GPUs (``gpu``: what priced it, for the messages
    of its largest collective call; None: no collectives); ``dag``: the DAG pass evaluates it."""
    ops, events = int(work.ops), int(work.events)
    per_event = DAG_SECONDS_PER_EVENT if dag else SECONDS_PER_EVENT.get(k.network, OTHER_SECONDS_PER_EVENT)
    weight = work.events if dag else max(work.weight, ops)
    messages = gpu.peak_messages if gpu is not None else 0.0
    rss = BASE_RSS + ops * RSS_PER_OP + gpus * RSS_PER_GPU + messages * RSS_PER_MESSAGE
    seconds = BASE_SECONDS + gpus * SECONDS_PER_GPU + ops * SECONDS_PER_OP + weight * per_event
    return Estimate(ops, events, seconds, rss_bytes=int(rss))


def _order_shares(job, m: int) -> tuple[float, float]:
    """(W passes per F pass, F passes per micro-batch and model chunk) in the schedule's
    order — zero-bubble schedules split the backward, a bidirectional one sends each
    micro-batch through one of a stage's two chunks — read off stage 0's order for a few
    micro-batches."""
    p, v = job.plan.pp, job.parallel.virtual_stages
    mm = min(m, 4 * p * v)
    try:
        order = stage_order(job.schedule, 0, p, mm, v, 1)
    except (ScenarioError, ProgramError, ValueError):
        return 0.0, 1.0
    f = sum(1 for item in order if item[0] == "F")
    if not f:
        return 0.0, 1.0
    return sum(1 for item in order if item[0] == "W") / f, f / (mm * len(job.stage_chunks(0)))


#: alternatives :func:`advice` tries, in order: (what to tell the user, settings changed)
_ALTERNATIVES = (
    (
        "simulation.fidelity: fast",
        {"network": "analytical", "collective_model": "analytical", "granularity": "stage"},
    ),
    ("simulation.fidelity: balanced", {"network": "flow", "granularity": "stage"}),
    ("simulation.fold: true", {"fold": True}),
    # (folded, on the flow network only: clustersim/network/orbits.py)
    ("simulation.fold_contention: true", {"fold": True, "orbits": True}),
    ("simulation.granularity: stage", {"granularity": "stage"}),
    ("simulation.network: flow", {"network": "flow"}),
    ("simulation.collective_model: analytical", {"collective_model": "analytical"}),
    ("simulation.max_chunks: 16", {"max_chunks": 16}),
    ("simulation.iterations: 1", {"iterations": 1}),
)


def advice(
    job, est: Estimate | None = None, mode_name: str | None = None, memory: int | None = None
) -> list[str]:
    """What brings the estimate down, best first: ``'simulation.fold: true (~1.2 k ops, …; 40× faster)'``
    (``mode_name`` as in :func:`estimate`); with ``memory`` (bytes), what brings its peak
    memory under that, smallest first: ``'simulation.fold: true (…; ~0.4 GiB)'``."""
    est = est or estimate(job, mode_name=mode_name)
    base = _knobs(job)
    out = []
    for label, change in _ALTERNATIVES:
        if change.get("fold") and not job.foldable:
            continue
        alt = replace(base, **{key: val for key, val in change.items() if key != "fold"})
        if "fold" in change:
            alt = replace(alt, fold=True)
        if alt == base or (alt.orbits and alt.network != "flow"):
            continue
        other = estimate(job, alt, mode_name)
        if memory is not None:
            if other.rss_bytes <= memory:
                out.append((other.rss_bytes, f"{label} ({other.line()}; ~{_gib(other.rss_bytes)})"))
        elif other.seconds < est.seconds / 1.5:
            out.append(
                (other.seconds, f"{label} ({other.line()}; {est.seconds / other.seconds:.0f}× faster)")
            )
    return [text for _, text in sorted(out)]


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def available_memory() -> int | None:
    """Bytes of memory this machine can give a run now: Linux's ``MemAvailable``, else the
    free physical pages; None where the OS does not say."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None


def check_budget(job, mode_name: str | None = None) -> Estimate:
    """The run's :class:`Estimate` (``mode_name`` as in :func:`estimate`); a ScenarioError on
    ``simulation.max_events`` (or ``max_ops``) with the estimate and :func:`advice` when it
    passes the budget, and on ``memory`` when its peak memory would pass what the machine
    has available (:func:`available_memory`), with the settings whose estimate fits —
    refused before it starts, not killed by the operating system halfway."""
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
    free = available_memory()
    if free is not None and est.rss_bytes > free:
        tips = advice(job, est, mode_name, memory=free)
        hint = f"; to fit it: {'; '.join(tips[:3])}" if tips else "; no fidelity setting fits it"
        raise ScenarioError(
            "memory",
            f"~{_gib(est.rss_bytes)}",
            f"this run is estimated at {est.line()} and ~{_gib(est.rss_bytes)} of memory at its peak, "
            f"more than the {_gib(free)} this machine has available{hint}",
        )
    return est
