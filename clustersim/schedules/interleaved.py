"""Megatron-LM's interleaved 1F1B schedule (Narayanan et al., SC'21).

Each of the p stages holds v model chunks: chunk k of the p·v chunks lives on stage
k % p, so a micro-batch loops through the pipeline v times. Stage s runs its forwards
in groups of p micro-batches per chunk (chunk 0 of micro-batches 0..p−1, chunk 1 of the
same, …), warms up with (p − s − 1)·2 + (v − 1)·p forwards, then alternates one forward
and one backward (backwards walk the chunks in reverse), then drains. The bubble shrinks
by v: (p − 1)/(v·m + p − 1) of the iteration, at v times the point-to-point traffic.
Megatron requires m to be a multiple of p (for v > 1).
"""

from __future__ import annotations

from ..errors import ScenarioError
from .registry import register_schedule


def _check(p: int, m: int, v: int) -> None:
    if v < 2:  # one chunk per stage is plain 1F1B: running it under this name would mislead
        raise ScenarioError(
            "parallel.virtual_stages",
            v,
            "the interleaved schedule needs 2 or more model chunks per stage (Megatron's "
            "--num-layers-per-virtual-pipeline-stage); with 1 it is plain 1F1B — use schedule: 1f1b",
        )
    if m % p:
        raise ScenarioError(
            "parallel.schedule",
            "interleaved",
            f"Megatron's interleaved schedule needs the micro-batches per iteration (m = {m}) to be a multiple of "
            f"pp = {p}; change training.global_batch or training.micro_batch (or use virtual_stages: 1)",
        )


def _item(phase: str, i: int, stage: int, p: int, v: int) -> tuple[str, int, int]:
    group, pos = divmod(i, p * v)
    local = pos // p if phase == "F" else v - 1 - pos // p
    return (phase, group * p + pos % p, local * p + stage)


@register_schedule(
    "interleaved",
    "interleaved 1F1B (Megatron-LM): v model chunks per stage, bubble / v",
    chunks=None,
    check=_check,
)
def interleaved(stage: int, p: int, m: int, v: int = 1) -> list[tuple[str, int, int]]:
    total = m * v
    if v == 1:
        warmup = min(p - stage - 1, total)
    else:
        warmup = min((p - stage - 1) * 2 + (v - 1) * p, total)
    out = [_item("F", i, stage, p, v) for i in range(warmup)]
    for i in range(total - warmup):
        out += [_item("F", warmup + i, stage, p, v), _item("B", i, stage, p, v)]
    out += [_item("B", i, stage, p, v) for i in range(total - warmup, total)]
    return out
