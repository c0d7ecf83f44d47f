"""Emit an ``overlap`` segment (:mod:`clustersim.workload.tp_overlap`) as chunked ops.

GEMM chunks go on the compute lane and communication chunks on the ``tp`` lane, with the
dependencies Transformer Engine's userbuffers have, so the engine — not a formula —
decides how much is hidden. With ``n`` chunks of ``g`` s each and a chunk's collective
taking ``c`` s, the idle-network times (tests/test_tp_overlap.py checks them) are:

* ``ring_exchange`` (all-gather, n = tp): GEMM chunk 0 runs on the local shard at once;
  ring step k (k = 1..n−1) starts after step k−1, GEMM chunk k after chunk k−1 and step k:
  ``T = max_k (k·c + (n−k)·g) = g + (n−1)·max(g, c)`` — exposed ``(n−1)·max(0, c−g)``,
  i.e. each step hides ``min(c, g)``. One step (every rank passes one s/t shard to its
  neighbour) is timed as a ``direct`` all-gather of ``bytes/(n−1)``: each rank sends and
  receives ``bytes/n`` under one latency, what one ring step moves.
* ``pipeline`` (reduce-scatter, n = num_splits): chunk k's reduce-scatter (``bytes/n``)
  starts after GEMM chunk k and the previous reduce-scatter:
  ``T = g + (n−1)·max(g, c) + c`` — exposed ``c + (n−1)·max(0, c−g)`` (the first chunk's
  GEMM and the last chunk's collective are never hidden).
* ``bulk`` (reduce-scatter of dgrad beside the wgrad GEMM): both start together,
  ``T = max(g, c)``.
"""

from __future__ import annotations

from ...workload.stage_cost import Segment
from ...workload.tp_overlap import PIPELINE, RING


def emit_overlap(seg: Segment, deps: tuple[int, ...], compute, collective, tag: str):
    """Emit ``seg`` after ``deps`` through ``compute(seconds, flops, deps)`` and
    ``collective(name, kind, nbytes, deps, tag, algorithm)`` (the pass's own op makers);
    return (first op, op the next segment follows, further op ids it must wait for)."""
    n = seg.chunks
    g, f = seg.duration / n, seg.flops / n
    if seg.method == RING:
        first = gemm = compute(g, f, deps)  # chunk 0: the shard this rank holds
        step = seg.nbytes // (n - 1)
        for k in range(1, n):
            comm = collective(f"{seg.name} {k}/{n - 1}", seg.collective, step, deps, f"{tag}.{k}", "direct")
            gemm = compute(g, f, (gemm.id, comm.id))
        return first, gemm, ()
    if seg.method == PIPELINE:
        first = gemm = comm = None
        for k in range(n):
            gemm = compute(g, f, deps if gemm is None else (gemm.id,))
            comm = collective(
                f"{seg.name} {k + 1}/{n}", seg.collective, seg.nbytes // n, (gemm.id,), f"{tag}.{k}"
            )
            first = first or gemm
        return first, comm, ()
    comm = collective(seg.name, seg.collective, seg.nbytes, deps, tag, "auto")  # bulk
    gemm = compute(seg.duration, seg.flops, deps)
    return comm, gemm, (comm.id,)
