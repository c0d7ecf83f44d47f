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
and collectives. The pair is issued as alternating *groups*, one from each chunk in turn
(the forward's first): a group is one compute segment with the communication segments
that follow it in its pass (communication before its first compute joins the first). Each
segment waits for the previous segment of its own pass only; the compute lane runs the
compute segments of both in issue order, and a communication segment runs on its own
lane (today ``tp``; an expert-parallel dispatch/combine segment would sit on an ``ep``
lane the same way) while the next group — the other chunk's compute — runs. The pipeline
sends and receives of both chunks sit on the ``send`` / ``recv`` lanes as for any pass,
so they overlap the pair too.

So T_F&B, the pair's time alone on a GPU, is T_F + T_B (the full backward, W included)
when the chunks only compute, and between max(compute, communication) and that plus the
communication when they also communicate: a chunk's collective is hidden as far as the
other chunk has compute to run beside it.
"""

from __future__ import annotations

from collections.abc import Sequence


def _groups(segments: Sequence) -> list[list[int]]:
    """Segment indices cut into groups of one computing segment each (a kernel, or a GEMM
    pipelined with its TP collective), with the plain collectives after it (those before
    the first computing segment join the first group)."""
    out: list[list[int]] = []
    computes = [seg.kind != "collective" for seg in segments]  # a GEMM overlapped with its TP collective too
    for i in range(len(segments)):
        if not out or (computes[i] and any(computes[x] for x in out[-1])):
            out.append([i])
        else:
            out[-1].append(i)
    return out


def interleave(forward: Sequence, backward: Sequence) -> list[tuple[int, int]]:
    """The issue order of an overlapped pair: ``(0, i)`` for the forward's segment i,
    ``(1, i)`` for the backward's — their groups alternating, the forward's first."""
    fg, bg = _groups(forward), _groups(backward)
    order: list[tuple[int, int]] = []
    for n in range(max(len(fg), len(bg))):
        for which, groups in ((0, fg), (1, bg)):
            if n < len(groups):
                order += [(which, i) for i in groups[n]]
    return order
