"""Turn op sequences into pass segments: compute kernels merged, TP collectives between.

A pass is built from a list of *items*: ``("c", seconds, flops, launches)`` for a kernel
(``launches``: 1 when its launch is priced apart, see :func:`launch_items`),
``("x", kind, nbytes, name)`` for a tensor-parallel collective (``("x", kind, nbytes, name,
"cp")`` for one over the context-parallel group), ``("r", seconds, flops, nbytes, name)``
for ring attention (per step, :mod:`.context_parallel`) and ``("f", seconds, name)`` for a
fixed cost of its own (the pass's kernel launches). Consecutive kernels merge into one
compute :class:`Segment` (they run back to back on one stream); each collective becomes a
collective Segment the compiler places on the ``tp`` (``cp``) lane over the stage's TP (CP)
group, a ring a ``ring`` Segment it expands into steps; a fixed cost is a named compute
Segment, first in its pass. With
``granularity="stage"`` a pass is one collective per kind carrying the summed bytes
between the two halves of its compute — far fewer simulated events for huge validation
runs, at the price of the per-collective latency terms (negligible for these sizes).

With ``parallel.tp_comm_overlap`` a collective and the GEMM it pipelines with become one
``("o", kind, nbytes, name, seconds, flops, method, chunks)`` item and an ``overlap``
Segment, which the compiler emits in chunks (:mod:`.tp_overlap`; per-layer only).
"""

from __future__ import annotations

from .context_parallel import CPComm, CPRing
from .cost_model import CostModel
from .ops import LayerOp, TPComm
from .stage_cost import Segment
from .tp_overlap import AG_GEMMS, RS_GEMMS, TPOverlap, merge_backward, merge_forward


def _cp_item(op: CPComm | CPRing, cm: CostModel, backward: bool) -> tuple:
    """The item of a CP collective (``kind`` of its direction) or of a ring's steps."""
    if isinstance(op, CPComm):
        return ("x", op.bwd if backward else op.fwd, op.nbytes, op.name, "cp")
    works, sent = (op.bwd, op.bwd_bytes) if backward else (op.fwd, op.fwd_bytes)
    phase = "B" if backward else "F"
    times = tuple(cm.time(w, op.name, phase) for w in works)
    return ("r", times, tuple(w.flops for w in works), sent, op.name)


def forward_items(
    ops: list, cm: CostModel, *, core_only: bool = False, overlap: TPOverlap | None = None
) -> list[tuple]:
    """Items of running ``ops`` forward (``core_only``: just the attention-core kernels,
    as selective recompute re-runs them; no collectives then). ``overlap``: TP collectives
    merged with the GEMMs they pipeline with (:mod:`.tp_overlap`)."""
    out = []
    for op in ops:
        if isinstance(op, TPComm):
            if op.fwd and not core_only:
                out.append((("x", op.fwd, op.nbytes, op.name), ""))
        elif isinstance(op, (CPComm, CPRing)):
            if not core_only:
                out.append((_cp_item(op, cm, backward=False), ""))
        elif not core_only or op.attention_core:
            out.append(
                (
                    ("c", cm.time(op.fwd, op.name, "F"), op.fwd.flops, cm.launched(op.fwd, op.name, "F")),
                    op.name,
                )
            )
    if overlap is not None:
        return merge_forward(out, overlap)
    return [item for item, _ in out]


def backward_items(
    ops: list, cm: CostModel, *, weight: bool = True, inputs: bool = True, overlap: TPOverlap | None = None
) -> list[tuple]:
    """Items of the backward of ``ops`` (in reverse): input- and/or weight-gradient work.
    ``overlap``: as :func:`forward_items` (a GEMM's dgrad and wgrad are then separate items)."""
    out = []
    for op in reversed(ops):
        if isinstance(op, TPComm):
            if op.bwd and inputs:
                out.append((("x", op.bwd, op.nbytes, op.name), "", ""))
            continue
        if isinstance(op, (CPComm, CPRing)):  # attention: input gradients only
            if inputs:
                out.append((_cp_item(op, cm, backward=True), "", ""))
            continue
        assert isinstance(op, LayerOp)
        if overlap is not None and op.name in AG_GEMMS + RS_GEMMS:
            parts = [("dgrad", op.bwd_input, "B")] * inputs + [("wgrad", op.bwd_weight, "W")] * weight
            out += [
                (("c", cm.time(w, op.name, ph), w.flops, cm.launched(w, op.name, ph)), op.name, part)
                for part, w, ph in parts
            ]
            continue
        t = flops = 0.0
        n = 0
        if inputs:
            t += cm.time(op.bwd_input, op.name, "B")
            flops += op.bwd_input.flops
            n += cm.launched(op.bwd_input, op.name, "B")
        if weight:
            t += cm.time(op.bwd_weight, op.name, "W")
            flops += op.bwd_weight.flops
            n += cm.launched(op.bwd_weight, op.name, "W")
        if t or flops:
            out.append((("c", t, flops, n), op.name, ""))
    if overlap is not None:
        return merge_backward(out, overlap)
    return [item for item, _, _ in out]


def launch_items(items: list[tuple], launch_s: float) -> list[tuple]:
    """``items`` preceded by their kernels' launches as one fixed cost, ``("f", n ·
    launch_s, "launch")`` for the n kernels whose launch the cost model left out (none
    when n or ``launch_s`` is 0) — a GEMM overlapped with a TP collective counts as one:
    the CPU issues each kernel of an eager-mode pass in turn (Megatron-LM without CUDA
    graphs), so a pass pays n launches."""
    n = sum(i[3] if i[0] == "c" else 1 for i in items if i[0] in ("c", "o"))
    return [("f", n * launch_s, "launch")] + items if n and launch_s else items


def to_segments(items: list[tuple], granularity: str = "layer") -> tuple[Segment, ...]:
    """Segments of a pass from its items (see module doc)."""
    fixed = tuple(Segment("compute", i[1], name=i[2]) for i in items if i[0] == "f")
    if fixed:  # the fixed costs run first, then the pass's kernels and collectives
        return fixed + to_segments([i for i in items if i[0] != "f"], granularity)
    if granularity == "stage":
        if any(i[0] == "o" for i in items):  # the scenario rules refuse this; a caller may not
            raise ValueError("overlapped TP items need granularity 'layer'")
        t = sum(i[1] for i in items if i[0] == "c")
        f = sum(i[2] for i in items if i[0] == "c")
        sums: dict[str, int] = {}
        for i in items:
            if i[0] == "x":
                sums[i[1]] = sums.get(i[1], 0) + i[2]
        if not sums:
            return (Segment("compute", t, f),)
        # compute halves around the collectives: the pass still ends on the compute lane,
        # so the next pass cannot overlap its collectives (one CUDA stream in Megatron)
        half = (Segment("compute", t / 2, f / 2),)
        colls = tuple(Segment("collective", nbytes=n, collective=k, name=f"tp {k}") for k, n in sums.items())
        return half + colls + half
    segs: list[Segment] = []
    t = f = 0.0
    for i in items:
        if i[0] == "c":
            t += i[1]
            f += i[2]
            continue
        if t or f:
            segs.append(Segment("compute", t, f))
            t = f = 0.0
        if i[0] == "o":  # a collective pipelined with a GEMM (tp_overlap): the GEMM's time rides along
            _, kind, nbytes, name, seconds, flops, method, chunks = i
            segs.append(Segment("overlap", seconds, flops, nbytes, kind, name, method, chunks))
            continue
        if i[0] == "r":
            _, times, flops, sent, name = i
            segs.append(Segment("ring", sum(times), sum(flops), name=name, steps=times, step_bytes=sent))
            continue
        group = i[4] if len(i) > 4 else "tp"
        segs.append(Segment("collective", nbytes=i[2], collective=i[1], name=i[3], group=group))
    if t or f or not segs:
        segs.append(Segment("compute", t, f))
    return tuple(segs)


def compute_time(segments: tuple[Segment, ...]) -> tuple[float, float]:
    """(seconds, FLOPs) of the compute segments of a pass (an overlap segment's GEMM and a
    ring's steps included)."""
    return (
        sum(s.duration for s in segments if s.kind != "collective"),
        sum(s.flops for s in segments if s.kind != "collective"),
    )
