"""Emit an ``overlap`` segment (:mod:`clustersim.workload.tp_overlap`) as chunked ops.

GEMM chunks go on the compute lane; the userbuffers communication goes as sends to the next
TP rank on the ``tp send`` lane and receives from the previous one on the ``tp recv`` lane,
with the dependencies Transformer Engine's userbuffers have, so the engine — not a formula —
decides how much is hidden. Userbuffers are not NCCL collectives: a chunk is a copy-engine
put (``ring_exchange``) or a TE kernel reading its peers over NVLink, so it pays the link's
latency and bandwidth, not NCCL's per-call protocol latency (pricing each of the n chunks
as a NCCL collective made GPT 1.3B TP 8 on A100 28 % slower with overlap on than off).
With ``n`` chunks of ``g`` s each and a chunk's transfer taking ``c`` s, the idle-network
times (tests/test_tp_overlap.py checks them) are:

* ``ring_exchange`` (all-gather, n = tp): GEMM chunk 0 runs on the local shard at once;
  ring step k (k = 1..n−1) sends the shard received in step k−1 (step 1: its own) to the
  next rank, GEMM chunk k runs after chunk k−1 and step k's receive:
  ``T = g + (n−1)·max(g, c)`` — exposed ``(n−1)·max(0, c−g)``; one step moves
  ``bytes/n``.
* ``pipeline`` (reduce-scatter, n = num_splits): chunk k's reduce-scatter starts after GEMM
  chunk k and the previous one: ``T = g + (n−1)·max(g, c) + c`` — exposed
  ``c + (n−1)·max(0, c−g)``.
* ``bulk`` (reduce-scatter of dgrad beside the wgrad GEMM): both start together,
  ``T = max(g, c)``.

A reduce-scatter of ``S`` bytes over t ranks has each rank send and receive ``(t−1)/t · S``
(its partial sums of the others' shards out, theirs of its own in); it is timed as one
transfer of that many bytes to the ring neighbour — on an NVSwitch node, whose ports carry
each rank's traffic alike, as the t − 1 direct transfers of ``S/t`` would take.

A ``pipeline`` or ``bulk`` GEMM runs on SMs − ``num_sm`` (TE's ``set_sm_margin``): each
of its chunks is followed by an ``interference`` op holding the compute lane for the
margin's cost (``seg.margin / n``), so the breakdown shows it (docs/metrics.md).
"""

from __future__ import annotations

from ...metrics import INTERFERENCE_SUFFIX
from ...workload.stage_cost import Segment
from ...workload.tp_overlap import PIPELINE, RING

TP_SEND, TP_RECV = "tp send", "tp recv"


def emit_overlap(seg: Segment, deps: tuple[int, ...], compute, transfer, tp: int):
    """Emit ``seg`` after ``deps`` over a TP group of ``tp`` ranks through
    ``compute(seconds, flops, deps, label=…)`` and ``transfer(label, nbytes, deps, step) ->
    (send, recv)`` (the pass's own op makers; ``step`` numbers the transfer within ``seg``);
    return (first op, op the next segment follows, further op ids it must wait for)."""
    n = seg.chunks
    g, f, margin = seg.duration / n, seg.flops / n, seg.margin / n

    def gemm(after: tuple[int, ...]):
        """(the GEMM chunk, the op its result is ready after: the chunk or its margin)."""
        op = compute(g, f, after)
        return op, compute(margin, 0.0, (op.id,), label=op.name + INTERFERENCE_SUFFIX) if margin else op

    if seg.method == RING:
        first, last = gemm(deps)  # chunk 0: the shard this rank holds
        recv = None
        for k in range(1, n):
            after = deps if recv is None else (recv.id,)  # forward what the last step brought
            _, recv = transfer(f"{seg.name} {k}/{n - 1}", seg.nbytes // tp, after, k)
            last = gemm((last.id, recv.id))[1]
        return first, last, ()
    rs = seg.nbytes // n * (tp - 1) // tp  # what a rank sends (and receives) per chunk
    if seg.method == PIPELINE:
        first, last = gemm(deps)
        send, recv = transfer(f"{seg.name} 1/{n}", rs, (last.id,), 0)
        for k in range(1, n):
            last = gemm((last.id,))[1]
            send, recv = transfer(f"{seg.name} {k + 1}/{n}", rs, (last.id,), k)
        return first, recv, (send.id,)
    send, recv = transfer(seg.name, rs, deps, 0)  # bulk
    return send, gemm(deps)[1], (send.id, recv.id)
