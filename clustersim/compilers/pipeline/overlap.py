"""DualPipe's overlapped forward-and-backward pair: the order its two chunks' ops are issued.

DeepSeek-V3 (tech report §3.2.1, Figure 4) runs the forward chunk of one micro-batch and
the backward chunk of another as one unit on a GPU: each chunk is cut into components
(attention, MoE dispatch all-to-all, MLP, MoE combine all-to-all; the backward's
attention and MLP further into input- and weight-gradient parts), and the components are
rearranged so that one chunk's communication runs while the other chunk computes —
"both all-to-all and PP communication can be fully hidden". The GPU still computes one
kernel at a time (DeepSeek gives a share of the SMs to communication; the compute of the
two chunks is not overlapped with itself).

In clustersim a pass is a sequence of segments (``StageCost.segments``): compute kernels
and collectives. The pair is issued as alternating *stretches*, one from each chunk in
turn: a stretch is a run of computing segments (kernels, or GEMMs pipelined with their TP
collective) with the communication segments that follow it — DeepSeek's components are
the stretches between the all-to-alls (attention, MLP) with their dispatch or combine.
Each segment waits for the previous segment of its own pass only; the compute lane runs
the computing segments of both in issue order, and a communication segment runs on its
own lane (``tp``; ``ep`` for the MoE dispatch/combine, one FIFO stream for both chunks, as
DeepSeek's communication SMs run one kernel after the other) while the next stretch — the
other chunk's compute — runs. So one chunk's all-to-all is hidden behind the other
chunk's next stretch: exposed max(0, X − C) each time, and a pair whose stretches each end
in one all-to-all takes U + Σ max(X, C) + P (U, P: its first and last stretch) — each
all-to-all and the stretch beside it start together, the lane and the compute both free
(tests/test_ep_dualpipe.py).

Which chunk leads: the one with less compute before its first communication (the
backward, whose first component is the combine's gradient after a small unpermute), so
that communication runs under the other's first stretch — DeepSeek's Figure 4 order,
ATTN(F) beside COMBINE(B), then MLP(B) beside DISPATCH(F), MLP(F) beside DISPATCH(B),
ATTN(B) beside COMBINE(F); ties and compute-only chunks lead with the forward (the
DualPipe example's ``overlapped_forward_backward`` runs the forward module first, so the
pair holds both chunks' activations: PP + 1 in flight). The pipeline sends and receives
of both chunks sit on the ``send`` / ``recv`` lanes as for any pass, so they overlap the
pair too.

So T_F&B, the pair's time alone on a GPU, is T_F + T_B (the full backward, W included)
when the chunks only compute, and between max(compute, communication) and that plus the
communication when they also communicate.
"""

from __future__ import annotations

from collections.abc import Sequence


def _computes(seg) -> bool:
    """Whether ``seg`` occupies the compute lane (a kernel, a GEMM overlapped with its TP
    collective, ring attention) rather than only a communication lane."""
    return seg.kind != "collective"


def _stretches(segments: Sequence) -> list[list[int]]:
    """Segment indices cut into stretches: a run of computing segments with the plain
    collectives after it (those before the first computing segment join the first)."""
    out: list[list[int]] = []
    for i, seg in enumerate(segments):
        ended = out and not _computes(segments[out[-1][-1]])  # the stretch has reached its collectives
        if not out or (_computes(seg) and ended and any(_computes(segments[x]) for x in out[-1])):
            out.append([i])
        else:
            out[-1].append(i)
    return out


def _lead_seconds(segments: Sequence) -> float:
    """Compute seconds of a pass before its first communication (inf when the pass does not
    communicate): how long the other chunk's first stretch has to hide it under."""
    seconds = 0.0
    for seg in segments:
        if not _computes(seg):
            return seconds
        seconds += seg.duration
    return float("inf")


def interleave(forward: Sequence, backward: Sequence) -> list[tuple[int, int]]:
    """The issue order of an overlapped pair: ``(0, i)`` for the forward's segment i,
    ``(1, i)`` for the backward's — their stretches alternating, the chunk with less
    compute before its first communication first (the forward on a tie)."""
    fg, bg = _stretches(forward), _stretches(backward)
    lead_b = _lead_seconds(backward) < _lead_seconds(forward)
    passes = ((1, bg), (0, fg)) if lead_b else ((0, fg), (1, bg))
    order: list[tuple[int, int]] = []
    for n in range(max(len(fg), len(bg))):
        for which, groups in passes:
            if n < len(groups):
                order += [(which, i) for i in groups[n]]
    return order
