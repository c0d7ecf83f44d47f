"""The stages of the pipeline compiler: one GPU's whole order of passes and optimizer steps.

:func:`emit_stage` walks a stage's order (:mod:`clustersim.schedules.orders`) on the device
of (stage, replica, TP rank): each pass through :func:`.passes.emit_pass` (emitted once
and stamped for every micro-batch, :mod:`.pass_template`, or layer by layer for the
data-parallel emitter, :mod:`.data_parallel`), an overlapped F&B pair through
:func:`emit_pair`, activation codecs around passes whose tensors cross a compressed link
(:mod:`.codecs`), and at every optimizer step the gradient all-reduces
(:mod:`.gradient_sync`), the step's global work (:mod:`.step_work`) and the optimizer op.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, partial

from ...parallel.plan import Plan
from ...program import Program
from ...schedules.orders import stage_chunks
from ...workload.pass_costs import pass_memory, pass_segments, pass_transfers
from .codecs import coded_activation_bytes, emit_codec
from .context import CompileContext
from .data_parallel import StageSync
from .gradient_sync import GradientEmitter, emit_gradient_allreduce
from .overlap import interleave
from .pass_template import PassTemplate
from .passes import Gpu, PassWork, SegmentEmitter, attach_memory, emit_pass
from .step_work import emit_step_work
from .wiring import emit_optimizer


def emit_stage(ctx: CompileContext, order, s: int, r: int, t: int, passes: dict) -> None:
    """The ops of GPU (stage ``s``, replica ``r``, TP rank ``t``) along its stage's
    ``order``; each pass's (first op its receive gates, last op) goes into ``passes``."""
    prog, plan, schedule, costs, m, v = ctx.prog, ctx.plan, ctx.schedule, ctx.costs, ctx.m, ctx.v
    fold, compression, activations, data_parallel = (
        ctx.fold,
        ctx.compression,
        ctx.activations,
        ctx.data_parallel,
    )
    coarse = ctx.coarse
    dev = plan.device(s, r, t)
    has_w = {(j, k) for ph, j, k in order if ph == "W"}
    stash = schedule.weights == "stash"
    sync = None
    if data_parallel is not None and plan.replicas > 1:
        sync = StageSync.of(ctx, order, s, r, t, partial(pass_name, m, v))
    gpu = Gpu(plan, s, r, t, fold)
    version, fwd_version, last, last_it = 0, {}, None, 0
    # the stages holding the first and last chunk (the tied embedding's two copies)
    edge_stages = (schedule.stage_of(0, plan.pp), schedule.stage_of(len(costs) - 1, plan.pp))
    pairs = getattr(order, "pairs", frozenset())
    templates: dict[tuple, PassTemplate] = {}  # _PassJob.same → its pass's template
    kind = cache(partial(_pass_kind, ctx, s, r, t, stash))
    experts: dict = {}  # the GPU's expert groups (SegmentEmitter.expert), for its overlapped pairs
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
                # folded: both stages' representatives meet
                emit = GradientEmitter(prog, dev, s, last_it, label, fold, twins, 1 if mirror == s else 2)
                tag = f"dp-allreduce it{last_it} u{j} s{min(s, mirror)} t{t}"
                deps = emit_gradient_allreduce(emit, group, grad, tag=tag, deps=deps, compression=compression)
            expert = sum(costs[c].expert_grad_bytes for c in stage_chunks(schedule, s, plan.pp, v))
            # expert gradients: over the expert-DP group, and (bidirectional) the mirrored
            # stage's GPUs holding the same experts of the same chunks
            mirror = plan.pp - 1 - s if schedule.directions > 1 else s
            group = _with_mirror(plan, plan.expert_group(dev, "edp"), s, mirror)
            if expert and len(group) > 1 and sync is None:
                others = (g for g in plan.expert_groups(s, "edp") if dev not in g)
                shadows = tuple(_with_mirror(plan, g, s, mirror) for g in others) if fold else ()
                # folded: both stages' representatives meet
                emit = GradientEmitter(
                    prog, dev, s, last_it, label + " experts", fold, shadows, 1 if mirror == s else 2
                )
                tag = f"edp-allreduce it{last_it} u{j} s{min(s, mirror)} g{group[0]}"
                deps = emit_gradient_allreduce(
                    emit, group, expert, tag=tag, deps=deps, compression=compression
                )
            if schedule.flush:  # flush-free updates have no global step work (.step_work)
                chunks = [costs[c] for c in stage_chunks(schedule, s, plan.pp, v)]
                deps = emit_step_work(ctx, chunks, edge_stages, s, r, t, it=last_it, label=label, deps=deps)
            opt = sum(costs[c].optimizer for c in stage_chunks(schedule, s, plan.pp, v))
            last = emit_optimizer(prog, dev, s, last_it, label, opt, deps, version + 1)
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
            ends = emit_pair(prog, gpu, job, [fwd_version[x.key] for x in job], last, experts)
        else:
            pj = job[0]
            if sync is not None and sync.layered(ph, j, k):
                run = partial(emit_pass, prog, gpu, mb=pj.mb, it=last_it, version=fwd_version[(j, k)])
                ends = [sync.emit(run, pj.work, j, k, last_it, name=pj.name, after=last)]
            else:  # the same pass for every micro-batch: emitted once, stamped (.pass_template)
                template = templates.get(pj.same)
                if template is None:
                    emit = partial(emit_pass, gpu=gpu, work=pj.work, mb=0, version=0)
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
    """What the compiler emits for one pass (ph, j, k) on a device: its work (the same for
    every micro-batch, :func:`_pass_kind`), micro-batch, name and the bytes its activation
    codecs (de)compress."""

    ph: str
    j: int
    k: int
    work: PassWork
    mb: int
    name: str
    coded_in: int
    coded_out: int
    labels: dict

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
        w = self.work
        return (self.ph, self.k, w.received, w.split, w.alloc, w.free, w.stash)

    @classmethod
    def of(cls, kind, ph, j, k, m, v, s, has_w) -> _PassJob:
        """Pass (ph, j, k) on a GPU of stage ``s``; ``kind(ph, k, split)``: what it shares with
        the same pass of every micro-batch (:func:`_pass_kind`)."""
        work, coded_in, coded_out = kind(ph, k, (j, k) in has_w)
        labels = {"stage": s, "microbatch": j % m, "phase": ph, "iteration": j // m}
        return cls(ph, j, k, work, j % m, pass_name(m, v, ph, j, k), coded_in, coded_out, labels)


def _pass_kind(
    ctx: CompileContext, s: int, r: int, t: int, stash: bool, ph: str, k: int, split: bool
) -> tuple[PassWork, int, int]:
    """(work, bytes decoded before, bytes coded after) of a pass (ph, ·, k) on the device of
    (s, r, t): the same for every micro-batch."""
    schedule, plan, costs = ctx.schedule, ctx.plan, ctx.costs
    alloc, free, stashed = pass_memory(costs[k], ph, split, stash)
    transfers = pass_transfers(costs, ph, k, schedule.route(k, len(costs)))
    coded_in, coded_out = coded_activation_bytes(ctx.activations, schedule, plan, s, r, t, transfers)
    received = transfers[0] is not None and schedule.stage_of(transfers[0][0], plan.pp) != s
    work = PassWork(costs[k], ph, split and ph == "B", alloc, free, stashed, received)
    return work, coded_in, coded_out


def emit_pair(prog: Program, gpu: Gpu, job: list[_PassJob], versions, after, experts: dict):
    """Emit an overlapped F&B pair (:mod:`.overlap`) on ``gpu``: the two passes' segments in
    the interleaved issue order, each after the previous segment of its own pass (both after
    ``after``); the pair's last op also waits for the other pass's end. ``experts``: the
    GPU's expert groups, filled as its passes need them (:meth:`SegmentEmitter.expert`). Return
    each pass's (op its receive gates — the pair's first, whichever chunk leads —, last op)."""
    segs = [pass_segments(pj.work.cost, pj.ph, pj.work.split, pj.work.received) for pj in job]
    emit = [
        SegmentEmitter(
            prog, gpu.plan, gpu.stage, gpu.r, gpu.t, pj.labels["iteration"], pj.name, v, gpu.fold, experts
        )
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
        attach_memory(firsts[which], prev[which], pj.work)
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


def pass_name(m: int, v: int, ph: str, j: int, k: int) -> str:
    """The name of pass (ph, j, k): phase and micro-batch, and the chunk when v > 1."""
    return f"{ph}{j % m}" + (f"c{k}" if v > 1 else "")
