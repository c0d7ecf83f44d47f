"""What one pass of a model chunk costs a GPU: its segments, its memory, its transfers.

The pipeline compilers (:mod:`clustersim.compilers`), the pre-run estimate
(:mod:`clustersim.resolve.estimate`) and the plan estimate
(:mod:`clustersim.experiments.plan_estimate`) share these rules, so an estimate prices a
pass exactly as the compiler emits it.
"""

from __future__ import annotations

from dataclasses import replace

from ..memory_kinds import StaticMemory
from .stage_cost import Segment, StageCost


def stage_static_memory(weights: str, costs: list[StageCost], reserve: int = 0) -> StaticMemory:
    """What a GPU holding the model chunks of ``costs`` keeps for the whole run: their
    static bytes, plus one more copy of their weights when the schedule's ``weights`` keep
    two versions (``"double"``: PipeDream-2BW's double buffer — nothing else doubles), plus
    ``reserve`` buffer bytes held once per GPU whatever its chunks (the CUDA context and
    NCCL's communicators, :func:`.runtime_memory.runtime_reserve`)."""
    static = StaticMemory.sum(c.static for c in costs) + StaticMemory(buffers=reserve)
    if weights == "double":
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
    caller's; activation compression shrinks what crosses a compressed link (:mod:`clustersim.compilers.pipeline.codecs`)."""
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
