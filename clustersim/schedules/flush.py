"""Synchronous pipeline schedules that flush at the end of every iteration.

GPipe (Huang et al. 2019): every forward, then every backward — m micro-batches of
activations live on each stage at the peak. 1F1B (PipeDream-Flush, Narayanan et al.
2021; DAPPLE): stage s runs min(p − s − 1, m) warm-up forwards, then alternates one
forward and one backward, then drains the remaining backwards — at most p − s
micro-batches live on stage s. Both have the bubble (p − 1)/(m + p − 1).
"""

from __future__ import annotations

from .registry import register_schedule


@register_schedule(
    "gpipe",
    "GPipe: all forwards, then all backwards (in reverse), then the optimizer",
    inference=True,
    search_rank=1,
)
def gpipe(stage: int, p: int, m: int) -> list[tuple[str, int]]:
    # Backwards run in reverse micro-batch order, as autograd does in GPipe/torchgpipe.
    return [("F", j) for j in range(m)] + [("B", j) for j in reversed(range(m))]


@register_schedule(
    "1f1b",
    "1F1B (PipeDream-Flush/DAPPLE): warm-up forwards, one-forward-one-backward, cool-down",
    inference=True,
    search_rank=0,
)
def one_f_one_b(stage: int, p: int, m: int) -> list[tuple[str, int]]:
    warmup = min(p - stage - 1, m)
    out = [("F", j) for j in range(warmup)]
    for i in range(m - warmup):
        out += [("F", warmup + i), ("B", i)]
    out += [("B", j) for j in range(m - warmup, m)]
    return out
