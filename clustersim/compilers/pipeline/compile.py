"""The pipeline compiler: per-stage schedule orders into a Program (the IR the engine interprets).

The schedule's orders (see :mod:`clustersim.schedules.orders`) cover the whole run. For every data-parallel
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
    the consuming one (:mod:`.codecs`);
  * an overlapped F&B pair (DualPipe) as its two passes' segments interleaved
    (:mod:`.overlap`, :func:`.stages.emit_pair`), both receives gating the pair's first op;
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

Folding (``fold=True``, see :mod:`clustersim.resolve.fold`): only replica 0, TP rank 0
is emitted — one representative per stage. Its collectives name the whole group but
expect one arrival (the folded twins arrive with it by symmetry; two for a mirrored
stages' all-reduce, whose two stages each send a representative); its sends and its DP
all-reduces carry the twins' traffic as ``shadows``, so shared links stay loaded. TP
collectives of other replicas are dropped: their groups sit inside other nodes.

The passes are emitted by :mod:`.passes`, each GPU's order by :mod:`.stages`; this module
runs them over the replicas and wires the sends and recvs between stages.

Weight versions: every op of a pass carries ``version`` = the number of optimizer steps
its stage ran before the pass's forward (backward and W use their forward's version —
weight stashing); an optimizer op carries the version it creates.
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import ProgramError
from ...program import Op, Program
from ...schedules.orders import run_orders, stage_chunks
from ...workload.pass_costs import pass_transfers, stage_static_memory
from .codecs import coded_activation_bytes
from .context import CompileContext
from .context_parallel import link_ring_transfers
from .stages import emit_stage
from .tp_overlap import TP_RECV, TP_SEND
from .wiring import Wiring


def compile_pipeline(ctx: CompileContext) -> Program:
    """The Program of ``ctx.iterations`` training iterations of ``ctx.schedule`` under
    ``ctx.plan`` (:class:`.context.CompileContext` says what each field does; ``fold``:
    module docstring)."""
    schedule, plan, costs, m, replicas = ctx.schedule, ctx.plan, ctx.costs, ctx.m, ctx.replicas
    compression, data_parallel, iterations = ctx.compression, ctx.data_parallel, ctx.iterations
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
    ctx = replace(ctx, prog=prog)
    static = [
        stage_static_memory(
            schedule.weights, [costs[k] for k in stage_chunks(schedule, s, p, v)], ctx.reserve
        )
        for s in range(p)
    ]
    prog.static_memory = [static[plan.coords(dev)[0]] for dev in range(plan.num_devices)]
    for r in range(1 if ctx.fold else plan.replicas):
        cr, mr = work[r]
        emit_replica(ctx if not replicas else replace(ctx, costs=cr, m=mr), orders[mr], r)
    if plan.cp > 1:
        link_ring_transfers(prog)
    if _overlaps_tp(costs):  # the userbuffers transfers between TP neighbours
        link_ring_transfers(prog, TP_SEND, TP_RECV)
    return prog


def _overlaps_tp(costs: list) -> bool:
    """Whether a chunk pipelines a TP collective with its GEMM (``parallel.tp_comm_overlap``)."""
    return any(seg.kind == "overlap" for c in costs for segs in c.passes.values() for seg in segs)


def emit_replica(ctx: CompileContext, orders, r: int) -> None:
    """Data-parallel replica ``r`` of ``ctx``'s Program: every stage's GPUs
    (:func:`.stages.emit_stage`; folded, TP rank 0 only), then the sends and recvs between
    stages, sends in producer order and recvs in consumer order."""
    prog, plan, schedule, costs, m, v = ctx.prog, ctx.plan, ctx.schedule, ctx.costs, ctx.m, ctx.v
    fold, activations = ctx.fold, ctx.activations
    p = plan.pp
    tp_ranks = range(1 if fold else plan.tp)
    passes: dict[tuple, tuple[Op, Op]] = {}
    for s, order in enumerate(orders):
        for t in tp_ranks:
            emit_stage(ctx, order, s, r, t, passes)
    wiring = Wiring(prog, m)
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
                sends[(to, t, ph, j, nxt)] = wiring.send(src, label, s, to, j, size, twins[(s, to)])
    for s, order in enumerate(orders):
        for t in tp_ranks:
            dev = plan.device(s, r, t)
            for ph, j, k in order:
                send = sends.get((s, t, ph, j, k))
                if send is None:
                    continue
                wiring.recv(dev, send, s, j, passes[(s, t, ph, j, k)][0])
