"""Compile per-stage schedule orders into a Program (the IR the engine interprets).

The schedule's orders (see :mod:`.orders`) cover the whole run. For every data-parallel
replica r and tensor-parallel rank t, on the device of (stage s, r, t), the compiler emits:

  * each pass (F, B, W of a micro-batch on a model chunk) as its segments: compute
    segments on the ``compute`` lane, tensor-parallel collectives on the ``tp`` lane over
    the stage's TP group, chained so each waits for the previous (kernels on one stream).
    A forward allocates the chunk's activation memory; the backward frees it (with a
    split backward, at the end of B — the W-held remainder is not modelled). With
    ``weights="stash"`` a forward also allocates a stashed weight version and the
    backward frees it;
  * a send after each pass whose output another stage consumes (activations to the
    stage of chunk k+1 after F, gradients to the stage of chunk k−1 after B) to the same
    TP rank of that stage, in producer order on the ``send`` lane — or a plain dependency
    when both chunks sit on the same stage;
  * a recv before each pass that consumes another stage's output, in consumer order on
    the ``recv`` lane, and a dependency of that pass on its recv. With activation
    compression, a send across a compressed link carries bytes/ratio, a ``compress`` op
    follows the producing pass and a ``decompress`` op (which the recv feeds) precedes
    the consuming one (:mod:`.compression`);
  * at every optimizer step ``("O", i)``: with dp > 1, a gradient all-reduce over the
    stage's data-parallel group on the ``comm`` lane after the stage's last pass (with
    gradient compression, the ops of :mod:`.gradient_sync`), then the optimizer op
    (after the all-reduce), which creates the next weight version. With
    ``parallel.data_parallel``, :mod:`.data_parallel` emits the data-parallel traffic
    instead (buckets, overlap, sharding, FSDP units) and splits passes into layers.

Folding (``fold=True``, see :mod:`clustersim.parallel.fold`): only replica 0, TP rank 0
is emitted — one representative per stage. Its collectives name the whole group but
expect one arrival (the folded twins arrive with it by symmetry); its sends and its DP
all-reduces carry the twins' traffic as ``shadows``, so shared links stay loaded. TP
collectives of other replicas are dropped: their groups sit inside other nodes.

Weight versions: every op of a pass carries ``version`` = the number of optimizer steps
its stage ran before the pass's forward (backward and W use their forward's version —
weight stashing); an optimizer op carries the version it creates.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from ..errors import ProgramError
from ..memory_kinds import StaticMemory
from ..parallel.plan import Plan
from ..program import COLLECTIVE, COMPUTE, Op, Program
from ..workload.stage_cost import Segment, StageCost
from .compression import Compression, coded_activation_bytes, emit_codec
from .data_parallel import DataParallel, StageSync
from .gradient_sync import emit_gradient_allreduce
from .orders import run_orders, stage_chunks
from .registry import Schedule
from .step_work import emit_step_work
from .tp_overlap import emit_overlap


def compile_pipeline(
    schedule: Schedule,
    plan: Plan,
    costs: list[StageCost],
    m: int,
    iterations: int = 1,
    fold: bool = False,
    compression: Compression | None = None,
    activations: Compression | None = None,
    replicas: list | None = None,
    data_parallel: DataParallel | None = None,
    sharded_optimizer: bool = False,
) -> Program:
    """The Program of ``iterations`` training iterations of ``schedule`` under ``plan``.

    ``costs`` holds one entry per model chunk (p·v of them, in model order). ``fold``
    emits one representative per stage (module docstring). ``compression``: DP gradients
    are compressed for their all-reduce, on all or on chosen links (:mod:`.gradient_sync`);
    ``activations``: pipeline sends across compressed links are (:mod:`.compression`).
    ``replicas`` (heterogeneous clusters): per data-parallel replica a
    :class:`~clustersim.parallel.hetero.ReplicaWork` — its own chunk costs and micro-batch
    count, used instead of ``costs`` and ``m``; replicas meet at the gradient all-reduce.
    ``data_parallel``: the data-parallel traffic of :mod:`.data_parallel` (None: one
    all-reduce per stage and step). ``sharded_optimizer``: the optimizer is sharded over
    the data-parallel group (ZeRO ≥ 1, the distributed optimizer), so the step's scalar
    all-reduces span every GPU (:mod:`.step_work`)."""
    p = plan.pp
    if data_parallel is not None and (compression is not None or replicas):
        raise ProgramError(
            "parallel.data_parallel runs neither with gradient compression nor uneven replicas"
        )
    if len(costs) % p:
        raise ProgramError(
            f"schedule {schedule.name!r}: {len(costs)} model chunks do not divide over {p} stages"
        )
    v = len(costs) // p
    work = [(w.costs, w.microbatches) for w in replicas] if replicas else [(costs, m)] * plan.dp
    orders = {}  # micro-batch count → the run's orders
    for _, mr in work:
        if mr not in orders:
            schedule.validate(p, mr, v)  # chunks per stage and the schedule's own constraints
            orders[mr] = run_orders(schedule, p, mr, v, iterations)
    prog = Program(plan.num_devices)
    for dev in range(plan.num_devices):
        chunks = stage_chunks(schedule, plan.coords(dev)[0], p, v)
        prog.static_memory[dev] = stage_static_memory(schedule, [costs[k] for k in chunks])
    for r in range(1 if fold else plan.dp):
        cr, mr = work[r]
        _emit_replica(
            prog,
            plan,
            schedule,
            cr,
            orders[mr],
            mr,
            v,
            r,
            fold,
            compression,
            activations,
            data_parallel,
            sharded_optimizer,
        )
    return prog


def stage_static_memory(schedule: Schedule, costs: list[StageCost]) -> StaticMemory:
    """What a GPU holding the model chunks of ``costs`` keeps for the whole run: their
    static bytes, plus one more copy of their weights when ``schedule`` keeps two weight
    versions (PipeDream-2BW's double buffer — nothing else doubles)."""
    static = StaticMemory.sum(c.static for c in costs)
    if schedule.weights == "double":
        return replace(static, stashed=static.weights)
    return static


def pass_transfers(costs: list[StageCost], phase: str, k: int) -> tuple[tuple[int, int] | None, ...]:
    """(received, sent) by pass ``phase`` of model chunk ``k``, each (the neighbour chunk, its
    bytes before compression) or None where the phase moves nothing that way (W, O) or that
    chunk does not exist. A forward receives chunk k−1's activations and sends its own to
    chunk k+1; a backward receives the gradient of its output from chunk k+1 and sends that of
    its input to chunk k−1: between chunks c and c+1, ``costs[c].activation_bytes`` move either
    way. Whether the two chunks share a stage (no transfer) is the caller's; activation
    compression shrinks what crosses a compressed link (:mod:`.compression`)."""
    if phase not in ("F", "B"):
        return None, None
    src, dst = (k - 1, k + 1) if phase == "F" else (k + 1, k - 1)
    return tuple((c, costs[min(k, c)].activation_bytes) if 0 <= c < len(costs) else None for c in (src, dst))


def pass_memory(cost: StageCost, phase: str, split: bool, stash: bool) -> tuple[int, int, int]:
    """(bytes allocated at the pass's start, bytes freed at its end, of those the stashed
    weights'): a forward takes the chunk's activations (and, with weight stashing, a
    weight version); the backward frees them — the stashed version only once its W is
    done when the backward is split."""
    weights = cost.weight_bytes if stash else 0
    if phase == "F":
        return cost.activation_memory + weights, 0, weights
    if phase == "B":
        held = 0 if split else weights
        return 0, cost.activation_memory + held, held
    return 0, weights, weights


def emit_pass(
    prog: Program,
    plan: Plan,
    cost: StageCost,
    phase: str,
    stage: int,
    r: int,
    t: int,
    mb: int,
    it: int,
    *,
    split: bool = False,
    name: str | None = None,
    version: int = -1,
    alloc: int | None = None,
    free: int | None = None,
    stash: int = 0,
    fold: bool = False,
    after: Op | None = None,
    received: bool = False,
) -> tuple[Op, Op]:
    """Emit one pass (its segments) on the device of (stage, r, t); return (first, last) op.

    ``split``: the backward is the input-gradient part only (a W pass follows). ``after``:
    the previous pass's last op on this GPU, which the first segment waits for (kernels and
    TP collectives share one stream in Megatron-LM). ``alloc``
    bytes are allocated when the first segment starts and ``free`` released when the last
    ends (default: a forward allocates and a backward frees the activation memory);
    ``stash`` of them are a stashed weight version (a pass allocates or frees, not both).
    ``received``: the pass consumes another stage's tensor, all-gathered first over the
    TP group when ``cost.recv_gather`` says so (training.fixed_costs)."""
    dev = plan.device(stage, r, t)
    name = name or f"{phase}{mb}"
    labels = {"stage": stage, "microbatch": mb, "phase": phase, "iteration": it, "version": version}
    group = tuple(plan.device(stage, r, q) for q in range(plan.tp))

    def compute(duration: float, flops: float, deps: tuple[int, ...], label: str = name) -> Op:
        return prog.add(dev, "compute", COMPUTE, label, duration=duration, flops=flops, deps=deps, **labels)

    def collective(label: str, kind: str, nbytes: int, deps, tag: str, algorithm: str = "auto") -> Op:
        return prog.add(
            dev,
            "tp",
            COLLECTIVE,
            label,
            nbytes=nbytes,
            deps=deps,
            group=group,
            collective=kind,
            algorithm=algorithm,
            tag=tag,
            arrivals=1 if fold else 0,
            **labels,
        )

    first, last = None, after  # a pass starts after the previous pass on this GPU, its collectives included
    extra: tuple[int, ...] = ()  # further ops the next segment waits for (a bulk overlap's collective)
    segments = cost.segments(phase, split_backward=split)
    if received and cost.recv_gather:  # Megatron's scatter/gather: the pieces the TP ranks sent
        gather = Segment("collective", nbytes=cost.recv_gather, collective="all_gather", name="pp all-gather")
        segments = (gather,) + segments
    if cost.pass_overhead:  # the framework's work before the pass (training.fixed_costs)
        segments = (Segment("compute", cost.pass_overhead, name="framework"),) + segments
    for k, seg in enumerate(segments):
        deps = ((last.id,) if last is not None else ()) + extra
        extra = ()
        tag = f"tp it{it} s{stage} r{r} {name} #{k}"
        if seg.kind == "compute":
            head = op = compute(seg.duration, seg.flops, deps, f"{seg.name} {name}" if seg.name else name)
        elif seg.kind == "collective":
            head = op = collective(seg.name or f"tp {seg.collective}", seg.collective, seg.nbytes, deps, tag)
        else:  # a TP collective pipelined with its GEMM, in chunks on both lanes
            head, op, extra = emit_overlap(seg, deps, compute, collective, tag)
        first = first or head
        last = op
    if extra:  # the pass ends once the overlapped collective has too
        last = compute(0.0, 0.0, (last.id,) + extra, f"{name} join")
    if alloc is None:
        alloc = cost.activation_memory if phase == "F" else 0
    if free is None:
        free = cost.activation_memory if phase == "B" else 0
    first.mem_alloc += alloc
    last.mem_free += free
    if alloc:
        first.stash_alloc += stash
    else:
        last.stash_free += stash
    return first, last


def _emit_stage(
    prog,
    plan,
    schedule,
    costs,
    order,
    m,
    v,
    s,
    r,
    t,
    passes,
    fold,
    compression,
    activations,
    data_parallel,
    sharded,
) -> None:
    dev = plan.device(s, r, t)
    has_w = {(j, k) for ph, j, k in order if ph == "W"}
    stash = schedule.weights == "stash"
    sync = None
    if data_parallel is not None and plan.dp > 1:
        sync = StageSync.of(
            data_parallel, prog, plan, schedule, costs, order, s, r, t, v, m, fold, partial(_pass_name, m, v)
        )
    version, fwd_version, last, last_it = 0, {}, None, 0
    ends = (schedule.stage_of(0, plan.pp), schedule.stage_of(len(costs) - 1, plan.pp))
    for ph, j, k in order:
        if ph == "O":
            deps = (last.id,) if last is not None else ()
            label = "" if schedule.flush else f" u{j}"
            if sync is not None:
                deps = sync.before_optimizer(j, last_it, last, label)
            elif plan.dp > 1:
                grad = sum(costs[c].gradient_bytes for c in stage_chunks(schedule, s, plan.pp, v))
                twins = tuple(plan.dp_group(s, q) for q in range(1, plan.tp)) if fold else ()
                deps = emit_gradient_allreduce(
                    prog,
                    dev,
                    plan.dp_group(s, t),
                    grad,
                    stage=s,
                    iteration=last_it,
                    label=label,
                    tag=f"dp-allreduce it{last_it} u{j} s{s} t{t}",
                    deps=deps,
                    compression=compression,
                    fold=fold,
                    shadows=twins,
                )
            if schedule.flush:  # flush-free updates have no global step work (.step_work)
                deps = emit_step_work(
                    prog,
                    plan,
                    [costs[c] for c in stage_chunks(schedule, s, plan.pp, v)],
                    ends,
                    s=s,
                    r=r,
                    t=t,
                    it=last_it,
                    label=label,
                    sharded=sharded,
                    fold=fold,
                    deps=deps,
                )
            opt = sum(costs[c].optimizer for c in stage_chunks(schedule, s, plan.pp, v))
            last = prog.add(
                dev,
                "compute",
                COMPUTE,
                "optimizer" if schedule.flush else f"optimizer u{j}",
                stage=s,
                phase="O",
                iteration=last_it,
                duration=opt,
                deps=deps,
                version=version + 1,
            )
            if sync is not None:
                last = sync.after_optimizer(last, j, last_it, label)
            version += 1
            continue
        cost, mb, last_it = costs[k], j % m, j // m
        split = (j, k) in has_w
        if ph == "F":
            fwd_version[(j, k)] = version
        alloc, free, stashed = pass_memory(cost, ph, split, stash)
        name = _pass_name(m, v, ph, j, k)
        transfers = pass_transfers(costs, ph, k)
        coded_in, coded_out = coded_activation_bytes(activations, schedule, plan, s, r, t, transfers)
        labels = {"stage": s, "microbatch": mb, "phase": ph, "iteration": last_it}
        decoded = None
        if coded_in:  # received over a compressed link: decoded before the pass (its recv waits here)
            decoded = last = emit_codec(
                prog,
                dev,
                f"decompress {name}",
                activations.half_seconds(coded_in),
                (last.id,) if last is not None else (),
                **labels,
            )
        run = partial(emit_pass, prog, plan, phase=ph, stage=s, r=r, t=t, mb=mb, it=last_it)
        received = transfers[0] is not None and schedule.stage_of(transfers[0][0], plan.pp) != s
        run = partial(run, version=fwd_version[(j, k)], fold=fold, received=received)
        kw = {"split": split and ph == "B", "name": name, "alloc": alloc, "free": free, "stash": stashed}
        if sync is not None and sync.layered(ph, j, k):
            first, last = sync.emit(run, cost, ph, j, k, last_it, after=last, **kw)
        else:
            first, last = run(cost, after=last, **kw)
        if coded_out:  # coded before its send (which waits on the pass's last op)
            last = emit_codec(
                prog, dev, f"compress {name}", activations.half_seconds(coded_out), (last.id,), **labels
            )
        passes[(s, t, ph, j, k)] = (decoded or first, last)


def _pass_name(m: int, v: int, ph: str, j: int, k: int) -> str:
    """The name of pass (ph, j, k): phase and micro-batch, and the chunk when v > 1."""
    return f"{ph}{j % m}" + (f"c{k}" if v > 1 else "")


def _emit_replica(
    prog: Program,
    plan: Plan,
    schedule: Schedule,
    costs: list[StageCost],
    orders,
    m: int,
    v: int,
    r: int,
    fold: bool = False,
    compression: Compression | None = None,
    activations: Compression | None = None,
    data_parallel: DataParallel | None = None,
    sharded: bool = False,
) -> None:
    p = plan.pp
    tp_ranks = range(1 if fold else plan.tp)
    passes: dict[tuple, tuple[Op, Op]] = {}
    for s, order in enumerate(orders):
        for t in tp_ranks:
            _emit_stage(
                prog,
                plan,
                schedule,
                costs,
                order,
                m,
                v,
                s,
                r,
                t,
                passes,
                fold,
                compression,
                activations,
                data_parallel,
                sharded,
            )
    sends: dict[tuple, Op] = {}
    for s, order in enumerate(orders):
        for t in tp_ranks:
            for ph, j, k in order:
                transfers = pass_transfers(costs, ph, k)
                sent = transfers[1]
                if sent is None:
                    continue
                nxt, size = sent
                to = schedule.stage_of(nxt, p)
                src = passes[(s, t, ph, j, k)][1]
                if to == s:  # both chunks on this stage: a plain dependency, no transfer
                    consumer = passes[(s, t, ph, j, nxt)][0]
                    consumer.deps = consumer.deps + (src.id,)
                    continue
                if coded_activation_bytes(activations, schedule, plan, s, r, t, transfers)[1]:
                    size = activations.shrunk(size)  # the pass compressed what it sends
                label = f"{ph}{j % m}" + (f"c{k}" if v > 1 else "")
                twins = (
                    tuple(
                        (plan.device(s, rr, tt), plan.device(to, rr, tt))
                        for rr in range(plan.dp)
                        for tt in range(plan.tp)
                        if (rr, tt) != (0, 0)
                    )
                    if fold
                    else ()
                )
                sends[(to, t, ph, j, nxt)] = prog.add(
                    src.device,
                    "send",
                    "send",
                    f"send {label} s{s}->s{to}",
                    stage=s,
                    microbatch=j % m,
                    iteration=j // m,
                    nbytes=size,
                    deps=(src.id,),
                    shadows=twins,
                )
    for s, order in enumerate(orders):
        for t in tp_ranks:
            dev = plan.device(s, r, t)
            for ph, j, k in order:
                send = sends.get((s, t, ph, j, k))
                if send is None:
                    continue
                recv = prog.add(
                    dev,
                    "recv",
                    "recv",
                    "recv" + send.name[4:],
                    stage=s,
                    microbatch=j % m,
                    iteration=j // m,
                    nbytes=send.nbytes,
                    peer=send.id,
                )
                send.peer = recv.id
                consumer = passes[(s, t, ph, j, k)][0]
                consumer.deps = consumer.deps + (recv.id,)
