"""Compile per-stage schedule orders into a Program (the IR the engine interprets).

The schedule's orders (see :mod:`.orders`) cover the whole run. For every data-parallel
replica r and tensor-parallel rank t, on the device of (stage s, r, t), the compiler emits:

  * each pass (F, B, W of a micro-batch on a model chunk) as its segments: compute
    segments on the ``compute`` lane, tensor-parallel collectives on the ``tp`` lane over
    the stage's TP group, chained so each waits for the previous (kernels on one stream);
    with context parallelism, Ulysses' all-to-alls on the ``cp`` lane over the CP group and
    ring attention as per-step compute ops with their K/V sends and recvs around the CP
    ring (:mod:`.context_parallel`; each (stage, tp) rank has cp × dp replicas, and the
    gradient all-reduce spans them all).
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
  * an overlapped F&B pair (DualPipe) as its two passes' segments interleaved
    (:mod:`.overlap`, :func:`emit_pair`), both receives gating the pair's first op;
  * at every optimizer step ``("O", i)``: with dp > 1, a gradient all-reduce over the
    stage's data-parallel group (with a bidirectional schedule, also over the mirrored
    stage p − 1 − s, which holds the same chunks — at any dp) on the ``comm`` lane after
    the stage's last pass (with gradient compression, the ops of :mod:`.gradient_sync`);
    with expert parallelism, the experts' gradients over the expert-data-parallel group
    (with a bidirectional schedule, also over its GPUs' twins in stage p − 1 − s — what
    DualPipe's example sums for every parameter); then the optimizer op
    (after the all-reduce), which creates the next weight version. With
    ``parallel.data_parallel``, :mod:`.data_parallel` emits the data-parallel traffic
    instead (buckets, overlap, sharding, FSDP units) and splits passes into layers.

Folding (``fold=True``, see :mod:`clustersim.parallel.fold`): only replica 0, TP rank 0
is emitted — one representative per stage. Its collectives name the whole group but
expect one arrival (the folded twins arrive with it by symmetry; two for a mirrored
stages' all-reduce, whose two stages each send a representative); its sends and its DP
all-reduces carry the twins' traffic as ``shadows``, so shared links stay loaded. TP
collectives of other replicas are dropped: their groups sit inside other nodes.

Weight versions: every op of a pass carries ``version`` = the number of optimizer steps
its stage ran before the pass's forward (backward and W use their forward's version —
weight stashing); an optimizer op carries the version it creates.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache, cached_property, partial

from ..errors import ProgramError
from ..memory_kinds import StaticMemory
from ..parallel.plan import Plan
from ..program import COLLECTIVE, COMPUTE, EP_LANE, Op, Program
from ..workload.stage_cost import Segment, StageCost
from .compression import Compression, coded_activation_bytes, emit_codec
from .context_parallel import emit_ring, link_ring_transfers
from .data_parallel import DataParallel, StageSync
from .gradient_sync import emit_gradient_allreduce
from .orders import run_orders, stage_chunks
from .overlap import interleave
from .pass_template import PassTemplate
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
    coarse: bool = False,
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
    all-reduces span every GPU (:mod:`.step_work`). ``coarse``: each pass emitted once and
    stamped (:mod:`.pass_template`) is coarsened once, before stamping, as
    :func:`~clustersim.coarsen.coarsen` would coarsen its every copy (for a Program that
    will be coarsened: fewer ops to stamp, check and merge)."""
    p = plan.pp
    if data_parallel is not None and (compression is not None or replicas or schedule.directions > 1):
        raise ProgramError(
            "parallel.data_parallel runs neither with gradient compression, uneven replicas nor a "
            "bidirectional schedule"
        )
    if len(costs) % p:
        raise ProgramError(
            f"schedule {schedule.name!r}: {len(costs)} model chunks do not divide over {p} stages"
        )
    v = len(costs) // p
    work = [(w.costs, w.microbatches) for w in replicas] if replicas else [(costs, m)] * plan.replicas
    orders = {}  # micro-batch count → the run's orders
    for _, mr in work:
        if mr not in orders:
            schedule.validate(p, mr, v)  # chunks per stage and the schedule's own constraints
            orders[mr] = run_orders(schedule, p, mr, v, iterations)
    prog = Program(plan.num_devices)
    static = [
        stage_static_memory(schedule, [costs[k] for k in stage_chunks(schedule, s, p, v)]) for s in range(p)
    ]
    prog.static_memory = [static[plan.coords(dev)[0]] for dev in range(plan.num_devices)]
    for r in range(1 if fold else plan.replicas):
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
            coarse,
        )
    if plan.cp > 1:
        link_ring_transfers(prog)
    return prog


def stage_static_memory(schedule: Schedule, costs: list[StageCost]) -> StaticMemory:
    """What a GPU holding the model chunks of ``costs`` keeps for the whole run: their
    static bytes, plus one more copy of their weights when ``schedule`` keeps two weight
    versions (PipeDream-2BW's double buffer — nothing else doubles)."""
    static = StaticMemory.sum(c.static for c in costs)
    if schedule.weights == "double":
        return replace(static, stashed=static.weights)
    return static


def pass_transfers(
    costs: list[StageCost], phase: str, k: int, route: range | None = None
) -> tuple[tuple[int, int] | None, ...]:
    """(received, sent) by pass ``phase`` of model chunk ``k``, each (the neighbour chunk, its
    bytes before compression) or None where the phase moves nothing that way (W, O) or that
    chunk does not exist. A forward receives chunk k−1's activations and sends its own to
    chunk k+1; a backward receives the gradient of its output from chunk k+1 and sends that of
    its input to chunk k−1: between chunks c and c+1, ``costs[c].activation_bytes`` move either
    way. ``route``: the chunks a micro-batch through ``k`` visits (default all; a bidirectional
    schedule's copy of the model). Whether the two chunks share a stage (no transfer) is the
    caller's; activation compression shrinks what crosses a compressed link (:mod:`.compression`)."""
    if phase not in ("F", "B"):
        return None, None
    route = route or range(len(costs))
    src, dst = (k - 1, k + 1) if phase == "F" else (k + 1, k - 1)
    return tuple((c, costs[min(k, c)].activation_bytes) if c in route else None for c in (src, dst))


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
    emit = _Segments(prog, plan, stage, r, t, it, name or f"{phase}{mb}", version, fold)
    first, last = None, after  # a pass starts after the previous pass on this GPU, its collectives included
    deps = (last.id,) if last is not None else ()
    segs = pass_segments(cost, phase, split, received)
    k = 0
    while k < len(segs):
        # a compute segment marked ``overlap`` runs beside its neighbouring collective (the
        # shared expert beside the token all-to-alls): both wait for what came before, and
        # what follows waits for both (never at a pass's end)
        n = 2 if k + 2 < len(segs) and _overlapping(segs[k], segs[k + 1]) else 1
        ends: tuple[int, ...] = ()
        for i in range(k, k + n):
            # ``more``: further ops the next segment waits for (a bulk overlap's collective, a ring's last recv)
            head, op, more = emit.segment(segs[i], i, deps, phase, mb)
            first = first or head
            ends += (op.id,) + more
            if n == 1 or op.kind == COMPUTE:
                last = op
        deps = ends
        k += n
    if len(deps) > 1:  # the pass ends once the overlapped collective (or a ring's last recv) has too
        last = emit.join(last, deps[1:], phase, mb)
    attach_memory(first, last, cost, phase, alloc, free, stash)
    return first, last


def pass_segments(cost: StageCost, phase: str, split: bool, received: bool) -> tuple[Segment, ...]:
    """The segments a pass runs: its cost's, after the fixed costs before it
    (training.fixed_costs) — the framework's work, then Megatron-LM 2021's all-gather of a
    tensor received from another stage (``received``) when ``cost.recv_gather`` says so."""
    segments = cost.segments(phase, split_backward=split)
    if received and cost.recv_gather:  # Megatron's scatter/gather: the pieces the TP ranks sent
        gather = Segment("collective", nbytes=cost.recv_gather, collective="all_gather", name="pp all-gather")
        segments = (gather,) + segments
    if cost.pass_overhead:  # the framework's work before the pass
        segments = (Segment("compute", cost.pass_overhead, name="framework"),) + segments
    return segments


@dataclass(frozen=True)
class _Segments:
    """Emits the ops of a pass's segments on the device of (stage, r, t), labelled ``name``."""

    prog: Program
    plan: Plan
    stage: int
    r: int
    t: int
    it: int
    name: str
    version: int
    fold: bool
    #: (expert group kind) → (this GPU's group, the stage's other groups when folded), shared
    #: by the passes of a GPU that pass it in
    experts: dict = field(default_factory=dict)

    @cached_property
    def dev(self) -> int:
        return self.plan.device(self.stage, self.r, self.t)

    @cached_property
    def group(self) -> tuple[int, ...]:
        """The GPU's TP group."""
        return tuple(self.plan.device(self.stage, self.r, q) for q in range(self.plan.tp))

    def expert(self, kind: str) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        """This GPU's expert group of ``kind`` and, folded, the stage's other groups of that
        kind (which run the same collective alongside)."""
        if kind not in self.experts:
            group = self.plan.expert_group(self.dev, kind)
            others = self.plan.expert_groups(self.stage, kind) if self.fold else ()
            self.experts[kind] = (group, tuple(g for g in others if g != group))
        return self.experts[kind]

    def _labels(self, phase: str, mb: int) -> dict:
        return {
            "stage": self.stage,
            "microbatch": mb,
            "phase": phase,
            "iteration": self.it,
            "version": self.version,
        }

    def segment(
        self, seg, k: int, deps: tuple[int, ...], phase: str, mb: int
    ) -> tuple[Op, Op, tuple[int, ...]]:
        """(first op, last op, ops the next segment must also wait for) of segment ``k``: a
        compute kernel (an expert-parallel rank's own experts' work where the ranks differ),
        a TP or CP collective, an expert group's collective on the ``ep`` lane (the MoE
        dispatch/combine), ring attention, or a TP collective pipelined with its GEMM in
        chunks on both lanes (:mod:`.tp_overlap`)."""
        dev, group = self.dev, self.group
        labels = self._labels(phase, mb)

        def compute(duration: float, flops: float, deps: tuple[int, ...], label: str = self.name) -> Op:
            return self.prog.add(
                dev, "compute", COMPUTE, label, duration=duration, flops=flops, deps=deps, **labels
            )

        def collective(
            label: str,
            kind: str,
            nbytes: int,
            deps,
            tag: str,
            algorithm: str = "auto",
            lane: str = "tp",
            members=group,
        ) -> Op:
            return self.prog.add(
                dev,
                lane,
                COLLECTIVE,
                label,
                nbytes=nbytes,
                deps=deps,
                group=members,
                collective=kind,
                algorithm=algorithm,
                tag=tag,
                arrivals=1 if self.fold else 0,
                **labels,
            )

        tag = f"tp it{self.it} s{self.stage} r{self.r} {self.name} #{k}"
        plan, st, r, t = self.plan, self.stage, self.r, self.t
        if seg.kind == "compute":  # an expert-parallel rank runs its own experts' work
            work = seg.ranks[plan.expert_rank(dev)] if seg.ranks else (seg.duration, seg.flops)
            op = compute(*work, deps, f"{seg.name} {self.name}" if seg.name else self.name)
            return op, op, ()
        if seg.kind == "collective" and seg.group == "cp":  # Ulysses: over this rank's CP group
            cp_tag = f"cp it{self.it} s{st} r{r // plan.cp} t{t} {self.name} #{k}"
            members = plan.cp_ring(st, r, t)
            op = collective(seg.name, seg.collective, seg.nbytes, deps, cp_tag, lane="cp", members=members)
            return op, op, ()
        if seg.kind == "collective" and seg.group == "tp":
            op = collective(seg.name or f"tp {seg.collective}", seg.collective, seg.nbytes, deps, tag)
            return op, op, ()
        if seg.kind == "collective":  # over an expert group (ep, etp, tp_ep)
            op = _expert_collective(
                self.prog, seg, k, dev, self.expert(seg.group), self.name, self.fold, deps, labels
            )
            return op, op, ()
        if seg.kind == "ring":  # ring attention: per-step chunks and K/V transfers around the CP ring
            ring_tag = f"ring it{self.it} s{st} r{r // plan.cp} t{t} {self.name} #{k}"
            return emit_ring(self.prog, dev, seg, plan.cp_ring(st, r, t), self.name, ring_tag, deps, **labels)
        return emit_overlap(seg, deps, compute, collective, tag)

    def join(self, last: Op, extra: tuple[int, ...], phase: str, mb: int) -> Op:
        """A zero-time op after ``last`` and ``extra``: where a pass ends when an overlapped
        collective outlasts its last kernel."""
        return self.prog.add(
            self.dev,
            "compute",
            COMPUTE,
            f"{self.name} join",
            duration=0.0,
            flops=0.0,
            deps=(last.id,) + extra,
            **self._labels(phase, mb),
        )


def attach_memory(first: Op, last: Op, cost: StageCost, phase: str, alloc, free, stash: int) -> None:
    """``alloc`` bytes taken when a pass's ``first`` op starts, ``free`` released when its
    ``last`` ends (None: a forward allocates, a backward frees the activation memory);
    ``stash`` of them a stashed weight version (a pass allocates or frees, not both)."""
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


def _overlapping(a, b) -> bool:
    """Whether segments ``a`` and ``b`` run side by side (one collective, one overlapped compute)."""
    return (a.overlap and b.kind == "collective") or (a.kind == "collective" and b.overlap)


def _expert_collective(prog, seg, k, dev, groups, name, fold, deps, labels) -> Op:
    """Segment k of a pass on ``dev``, a collective over an expert group (``groups``: the
    group and, folded, the stage's other groups of its kind — :meth:`_Segments.expert`), on
    the :data:`~clustersim.program.EP_LANE`; its members sit in other replicas, so the tag
    names the group by its first device."""
    group, shadows = groups
    nbytes = sum(seg.matrix[group.index(dev)]) if seg.matrix else seg.nbytes  # an all-to-all-v: its row
    return prog.add(
        dev,
        EP_LANE,
        COLLECTIVE,
        seg.name,
        nbytes=nbytes,
        deps=deps,
        group=group,
        split=seg.matrix,
        shadows=shadows,
        collective=seg.collective,
        tag=f"{seg.group} it{labels['iteration']} s{labels['stage']} g{group[0]} {name} #{k}",
        arrivals=1 if fold else 0,
        **labels,
    )


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
    coarse,
) -> None:
    dev = plan.device(s, r, t)
    has_w = {(j, k) for ph, j, k in order if ph == "W"}
    stash = schedule.weights == "stash"
    sync = None
    if data_parallel is not None and plan.replicas > 1:
        sync = StageSync.of(
            data_parallel, prog, plan, schedule, costs, order, s, r, t, v, m, fold, partial(_pass_name, m, v)
        )
    version, fwd_version, last, last_it = 0, {}, None, 0
    # the stages holding the first and last chunk (the tied embedding's two copies)
    edge_stages = (schedule.stage_of(0, plan.pp), schedule.stage_of(len(costs) - 1, plan.pp))
    pairs = getattr(order, "pairs", frozenset())
    templates: dict[tuple, PassTemplate] = {}  # _PassJob.same → its pass's template
    kind = cache(partial(_pass_kind, schedule, plan, costs, activations, s, r, t, stash))
    experts: dict = {}  # the GPU's expert groups (_Segments.expert), for its overlapped pairs
    for i, (ph, j, k) in enumerate(order):
        if ph == "O":
            deps = (last.id,) if last is not None else ()
            label = "" if schedule.flush else f" u{j}"
            if sync is not None:
                deps = sync.before_optimizer(j, last_it, last, label)
            elif plan.replicas > 1 or schedule.directions > 1:
                grad = sum(costs[c].gradient_bytes for c in stage_chunks(schedule, s, plan.pp, v))
                # a bidirectional schedule's stage s holds the chunks stage p − 1 − s holds too:
                # their gradients are summed with the data-parallel ones (DualPipe's example does it)
                mirror = plan.pp - 1 - s if schedule.directions > 1 else s
                group = _sum_group(plan, s, mirror, t)
                twins = tuple(_sum_group(plan, s, mirror, q) for q in range(1, plan.tp)) if fold else ()
                deps = emit_gradient_allreduce(
                    prog,
                    dev,
                    group,
                    grad,
                    stage=s,
                    iteration=last_it,
                    label=label,
                    tag=f"dp-allreduce it{last_it} u{j} s{min(s, mirror)} t{t}",
                    deps=deps,
                    compression=compression,
                    fold=fold,
                    shadows=twins,
                    arrivals=1 if mirror == s else 2,  # folded: both stages' representatives meet
                )
            expert = sum(costs[c].expert_grad_bytes for c in stage_chunks(schedule, s, plan.pp, v))
            # expert gradients: over the expert-DP group, and (bidirectional) the mirrored
            # stage's GPUs holding the same experts of the same chunks
            mirror = plan.pp - 1 - s if schedule.directions > 1 else s
            group = _with_mirror(plan, plan.expert_group(dev, "edp"), s, mirror)
            if expert and len(group) > 1 and sync is None:
                others = (g for g in plan.expert_groups(s, "edp") if dev not in g)
                deps = emit_gradient_allreduce(
                    prog,
                    dev,
                    group,
                    expert,
                    stage=s,
                    iteration=last_it,
                    label=label + " experts",
                    tag=f"edp-allreduce it{last_it} u{j} s{min(s, mirror)} g{group[0]}",
                    deps=deps,
                    compression=compression,
                    fold=fold,
                    shadows=tuple(_with_mirror(plan, g, s, mirror) for g in others) if fold else (),
                    arrivals=1 if mirror == s else 2,  # folded: both stages' representatives meet
                )
            if schedule.flush:  # flush-free updates have no global step work (.step_work)
                deps = emit_step_work(
                    prog,
                    plan,
                    [costs[c] for c in stage_chunks(schedule, s, plan.pp, v)],
                    edge_stages,
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
        if i - 1 in pairs:
            continue  # the backward of a pair: emitted with its forward
        job = [_PassJob.of(kind, ph, j, k, m, v, s, has_w)]
        if i in pairs:
            job.append(_PassJob.of(kind, *order[i + 1], m, v, s, has_w))
        last_it = j // m
        if ph == "F":
            fwd_version[(j, k)] = version
        decoded = []
        for pj in job:  # received over a compressed link: decoded before the pass (its recv waits here)
            if pj.coded_in:
                deps = (last.id,) if last is not None else ()
                last = emit_codec(
                    prog,
                    dev,
                    f"decompress {pj.name}",
                    activations.half_seconds(pj.coded_in),
                    deps,
                    **pj.labels,
                )
            decoded.append(last if pj.coded_in else None)
        ends, done = [], []
        if len(job) == 2:
            ends = emit_pair(prog, plan, job, [fwd_version[x.key] for x in job], r, t, fold, last, experts)
        else:
            pj = job[0]
            if sync is not None and sync.layered(ph, j, k):
                run = partial(emit_pass, prog, plan, phase=ph, stage=s, r=r, t=t, mb=pj.mb, it=last_it)
                run = partial(run, version=fwd_version[(j, k)], fold=fold, received=pj.received)
                ends = [sync.emit(run, pj.cost, ph, j, k, last_it, after=last, **pj.kw)]
            else:  # the same pass for every micro-batch: emitted once, stamped (.pass_template)
                template = templates.get(pj.same)
                if template is None:
                    kw = {**pj.kw, "version": 0, "fold": fold, "received": pj.received}
                    emit = partial(
                        emit_pass, plan=plan, cost=pj.cost, phase=ph, stage=s, r=r, t=t, mb=0, **kw
                    )
                    template = templates[pj.same] = PassTemplate.record(emit, coarse)
                ends = [template.stamp(prog, pj.name, pj.mb, last_it, fwd_version[(j, k)], last)]
        for pj, (first, end), dec in zip(job, ends, decoded):
            if pj.coded_out:  # coded before its send (which waits on the pass's last op)
                end = emit_codec(
                    prog,
                    dev,
                    f"compress {pj.name}",
                    activations.half_seconds(pj.coded_out),
                    (end.id,),
                    **pj.labels,
                )
            passes[(s, t, *pj.key_phase)] = (dec or first, end)
            done.append(end)
        last = max(done, key=lambda op: op.id)  # a pair: the op issued last (it waits for the other)


@dataclass(frozen=True)
class _PassJob:
    """What the compiler emits for one pass (ph, j, k) on a device: its cost, micro-batch,
    name, memory and the bytes its activation codecs (de)compress."""

    ph: str
    j: int
    k: int
    cost: StageCost
    mb: int
    name: str
    kw: dict
    coded_in: int
    coded_out: int
    labels: dict
    #: the pass consumes another stage's tensor (its Megatron-2021 all-gather, .fixed costs)
    received: bool

    @property
    def key(self) -> tuple[int, int]:
        return (self.j, self.k)

    @property
    def key_phase(self) -> tuple[str, int, int]:
        return (self.ph, self.j, self.k)

    @property
    def same(self) -> tuple:
        """What a pass on this GPU must share with this one to emit the same ops, up to its
        micro-batch, iteration, weight version and the op it starts after (.pass_template)."""
        kw = self.kw
        return (self.ph, self.k, self.received, kw["split"], kw["alloc"], kw["free"], kw["stash"])

    @classmethod
    def of(cls, kind, ph, j, k, m, v, s, has_w) -> _PassJob:
        """Pass (ph, j, k) on a GPU of stage ``s``; ``kind(ph, k, split)``: what it shares with
        the same pass of every micro-batch (:func:`_pass_kind`)."""
        split = (j, k) in has_w
        cost, memory, coded_in, coded_out, received = kind(ph, k, split)
        name = _pass_name(m, v, ph, j, k)
        kw = {"split": split and ph == "B", "name": name, **memory}
        labels = {"stage": s, "microbatch": j % m, "phase": ph, "iteration": j // m}
        return cls(ph, j, k, cost, j % m, name, kw, coded_in, coded_out, labels, received)


def _pass_kind(schedule, plan, costs, activations, s, r, t, stash, ph, k, split) -> tuple:
    """(cost, memory keywords, bytes decoded before, bytes coded after, whether it receives from
    another stage) of a pass (ph, ·, k) on the device of (s, r, t): the same for every micro-batch."""
    alloc, free, stashed = pass_memory(costs[k], ph, split, stash)
    transfers = pass_transfers(costs, ph, k, schedule.route(k, len(costs)))
    coded_in, coded_out = coded_activation_bytes(activations, schedule, plan, s, r, t, transfers)
    received = transfers[0] is not None and schedule.stage_of(transfers[0][0], plan.pp) != s
    return costs[k], {"alloc": alloc, "free": free, "stash": stashed}, coded_in, coded_out, received


def emit_pair(
    prog: Program, plan: Plan, job: list[_PassJob], versions, r: int, t: int, fold: bool, after, experts: dict
):
    """Emit an overlapped F&B pair (:mod:`.overlap`): the two passes' segments in the
    interleaved issue order, each after the previous segment of its own pass (both after
    ``after``); the pair's last op also waits for the other pass's end. ``experts``: the
    GPU's expert groups, filled as its passes need them (:meth:`_Segments.expert`). Return
    each pass's (op its receive gates — the pair's first, whichever chunk leads —, last op)."""
    s = job[0].labels["stage"]
    segs = [pass_segments(pj.cost, pj.ph, pj.kw["split"], pj.received) for pj in job]
    emit = [
        _Segments(prog, plan, s, r, t, pj.labels["iteration"], pj.name, v, fold, experts)
        for pj, v in zip(job, versions)
    ]
    prev, firsts, extra = [after, after], [None, None], [(), ()]
    order = interleave(*segs)
    for which, i in order:
        pj = job[which]
        deps = ((prev[which].id,) if prev[which] is not None else ()) + extra[which]
        head, prev[which], extra[which] = emit[which].segment(segs[which][i], i, deps, pj.ph, pj.mb)
        firsts[which] = firsts[which] or head
    for which, pj in enumerate(job):
        if extra[which]:
            prev[which] = emit[which].join(prev[which], extra[which], pj.ph, pj.mb)
    final = prog.ops[-1]
    other = prev[1] if final is prev[0] else prev[0]
    final.deps = final.deps + (other.id,)
    for which, pj in enumerate(job):
        attach_memory(
            firsts[which], prev[which], pj.cost, pj.ph, pj.kw["alloc"], pj.kw["free"], pj.kw["stash"]
        )
    # both passes' receives gate the pair's first op: DualPipe waits for the pair's inputs
    # together (``_forward_backward_chunk``: recv F, recv B, then ``_commit_and_wait_comm``)
    head = firsts[order[0][0]]
    return [(head, prev[0]), (head, prev[1])]


def _sum_group(plan: Plan, s: int, mirror: int, t: int) -> tuple[int, ...]:
    """The GPUs whose gradients TP rank ``t`` of stage ``s`` sums: its data-parallel replicas,
    and those of stage ``mirror`` when that stage holds the same chunks (``s`` otherwise)."""
    return _with_mirror(plan, plan.dp_group(s, t), s, mirror)


def _with_mirror(plan: Plan, group: tuple[int, ...], s: int, mirror: int) -> tuple[int, ...]:
    """``group`` (GPUs of stage ``s``) with the GPUs at the same places of stage ``mirror``
    (the stage holding the same chunks under a bidirectional schedule; ``s``: none), sorted:
    stage ``mirror``'s GPU at the same index in its stage has the same TP, data-parallel and
    expert coordinates."""
    shift = (mirror - s) * plan.tp * plan.replicas
    return tuple(sorted({*group, *(d + shift for d in group)}))


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
    coarse: bool = False,
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
                coarse,
            )
    sends: dict[tuple, Op] = {}
    twins: dict[tuple[int, int], tuple] = {}  # (stage, stage it sends to) → the folded sends' shadows
    moves = {
        (ph, k): pass_transfers(costs, ph, k, schedule.route(k, len(costs)))
        for ph in "FB"
        for k in range(len(costs))
    }
    for s, order in enumerate(orders):
        for t in tp_ranks:
            for ph, j, k in order:
                transfers = moves.get((ph, k), (None, None))  # W and O move nothing
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
                if (s, to) not in twins:  # the same pairs for every send from s to to
                    twins[(s, to)] = plan.twin_pairs(s, to) if fold else ()
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
                    shadows=twins[(s, to)],
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
