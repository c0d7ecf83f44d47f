"""Ring attention in the Program: a ``ring`` segment (:mod:`clustersim.workload.context_parallel`)
becomes real ops on its GPU's lanes, so the engine produces the overlap.

Step i of a ring on CP rank c is an attention-chunk compute op on the ``compute`` lane and,
when the step sends, a send to CP rank c+1 on the ``cp send`` lane and a recv from rank
c−1 on the ``cp recv`` lane. Both the step's compute and its send start when the step
does — once the previous step's compute ended and its recv arrived (the data step i works
on, and forwards; in the backward also the dK/dV step i−1 accumulated) — so step i lasts
``max(chunk_i, transfer_i)`` and the ring exposes ``Σ_i max(0, transfer_i − chunk_i)``
beyond its compute. Transformer Engine's forward issues step i's send as soon as its recv
arrived, without waiting for chunk i−1; with the equal chunks of causal load balancing the
two orders end at the same time (each is ``c + (cp−1)·max(c, x)``). The op after the ring
waits for the last step's compute and, in the backward, its recv (the dK/dV of the
rank's own block coming home).

Sends and recvs are emitted device by device, so a recv cannot name its send yet: both
carry a tag naming the sending CP rank, and :func:`link_ring_transfers` pairs them once the
whole Program is emitted.

Folded (:mod:`clustersim.resolve.fold`), only CP rank 0 of the stage's first ring is
emitted. Every rank runs the same steps (the chunks of causal load balancing are equal), so
by symmetry each rank's step i starts when the representative's does: its send stands for
the last CP rank's (its bytes leave from there, ``source``) and is paired with its own recv,
which then ends when the unfolded one does; every other hop of every CP ring of the stage
rides along as a shadow (:attr:`clustersim.compilers.pipeline.passes.SegmentEmitter.folded_cp_ring`),
as folded TP overlap's userbuffers ring does.
"""

from __future__ import annotations

from ...errors import ProgramError
from ...program import COMPUTE, RECV, SEND, Op, Program

CP_SEND, CP_RECV = "cp send", "cp recv"


def emit_ring(
    prog: Program,
    dev: int,
    seg,
    ring: tuple[int, ...],
    name: str,
    tag: str,
    deps: tuple[int, ...],
    folded: dict,
    **labels,
) -> tuple[Op, Op, tuple[int, ...]]:
    """Emit ring segment ``seg`` of pass ``name`` on ``dev`` (a member of the CP ``ring``, in
    ring order) after the ops ``deps``; return (first op, last compute op, ops the next op
    must also wait for). ``tag`` names this ring instance (the same on every member);
    ``folded``: empty, or a folded representative's ``source`` and ``shadows`` (module
    docstring); ``labels`` are the ops' stage, microbatch, phase, iteration and version."""
    c, n = ring.index(dev), len(ring)
    prev_rank = (c - 1) % n
    sender = prev_rank if folded else c  # folded: the send stands for the previous rank's
    start = deps  # what step i waits for: its start
    first = last = None
    recv = None
    per_step_flops = seg.flops / len(seg.steps) if seg.steps else 0.0
    for i, (chunk, nbytes) in enumerate(zip(seg.steps, seg.step_bytes)):
        waits = start + ((recv.id,) if recv is not None else ())
        last = prog.add(
            dev, "compute", COMPUTE, name, duration=chunk, flops=per_step_flops, deps=waits, **labels
        )
        first = first or last
        recv = None
        if nbytes:
            step, what = f"{tag} i{i}", f"{name} {seg.name} {i}"
            prog.add(
                dev,
                CP_SEND,
                SEND,
                f"cp send {what}",
                nbytes=nbytes,
                deps=waits,
                tag=f"{step} c{sender}",
                **folded,
                **labels,
            )
            recv = prog.add(
                dev, CP_RECV, RECV, f"cp recv {what}", nbytes=nbytes, tag=f"{step} c{prev_rank}", **labels
            )
        start = (last.id,)
    return first, last, (recv.id,) if recv is not None else ()


def link_ring_transfers(prog: Program, send_lane: str = CP_SEND, recv_lane: str = CP_RECV) -> None:
    """Pair every ring send on ``send_lane`` with the recv on ``recv_lane`` carrying its tag
    (module docstring; TP overlap's userbuffers transfers alike,
    :mod:`clustersim.compilers.pipeline.tp_overlap`)."""
    sends = {op.tag: op for op in prog.ops if op.kind == SEND and op.lane == send_lane}
    for op in prog.ops:
        if op.kind != RECV or op.lane != recv_lane:
            continue
        send = sends.pop(op.tag, None)
        if send is None:
            raise ProgramError(f"{op!r}: no ring send tagged {op.tag!r}")
        op.peer, send.peer = send.id, op.id
    if sends:
        raise ProgramError(f"ring sends without a recv: {', '.join(sorted(sends))}")


def rings_checked(job) -> bool:
    """Whether ``job`` folds a CP ring of mixed hops on trust, to be checked after the run
    (:attr:`~clustersim.resolve.fold.FoldDecision.checked_ring`): its engine then keeps when
    each folded ring send's hops land (:attr:`Engine.ring_landed
    <clustersim.engine.interpreter.Engine.ring_landed>`), which no other run pays for."""
    return job.fold.enabled and job.fold.checked_ring


def unhidden_ring(job, engine, ops: range | None = None) -> str | None:
    """Why ``job``'s folded run on ``engine`` (run) was not exact, where it folded a CP ring
    of mixed hops on trust (:attr:`~clustersim.resolve.fold.FoldDecision.checked_ring`):
    :func:`unhidden_hop` over its ops (``ops``: their ids in a multi-job run's merged
    Program; None: all), or None."""
    if not rings_checked(job):
        return None
    landed = engine.ring_landed if ops is None else {i: t for i, t in engine.ring_landed.items() if i in ops}
    return unhidden_hop(engine.program, landed, engine.end)


def unhidden_hop(prog: Program, landed: dict[int, float], end) -> str | None:
    """Why a folded ring of mixed hops was not exact in a run, or None: a folded CP ring send
    whose last hop (over every ring of the stage, :attr:`Engine.ring_landed
    <clustersim.engine.interpreter.Engine.ring_landed>` — op id → when) landed after an op
    waiting on its recv could otherwise have started (its other dependencies' and its lane
    predecessor's ends, ``end``: when each op ended, by op id). Where none did, every rank's
    receive was in before its step's chunk ended, so every rank ran its steps back to back
    from the representative's start whatever hop it receives over
    (:mod:`clustersim.resolve.hidden_ring`)."""
    ops = prog.ops
    recvs = {ops[i].peer: i for i in landed if ops[i].lane == CP_SEND}
    if not recvs:
        return None
    before = {}  # op id → its lane predecessor's
    for lane in prog.lanes().values():
        for a, b in zip(lane, lane[1:]):
            before[b.id] = a.id
    for op in ops:
        for r in op.deps:
            send = recvs.get(r)
            if send is None:
                continue
            others = [end[d] for d in op.deps if d != r]
            if op.id in before:
                others.append(end[before[op.id]])
            free = max(others, default=-1.0)
            if landed[send] > free:
                return (
                    f"{ops[send].name!r}: a hop of the stage's CP rings landed {landed[send] - free:.3g} s after "
                    f"{op.name!r} could have started (ring attention's ranks would run at different paces)"
                )
    return None
