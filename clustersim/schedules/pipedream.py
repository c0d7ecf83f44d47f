"""Asynchronous, flush-free PipeDream schedules (Narayanan et al., SOSP'19 and ICML'21).

* ``pipedream``: 1F1B across iteration boundaries (no flush); every stage updates its
  weights after every micro-batch's backward (a micro-batch is PipeDream's minibatch).
  Weight stashing: a forward keeps the weight version it used (one stashed copy per
  in-flight micro-batch, p − s on stage s) and its backward uses it. The update applied
  after micro-batch j's backward on stage s was computed on weights p − s − 1 updates old
  (its staleness).
* ``pipedream_2bw``: the same flush-free 1F1B, but gradients accumulate over the m
  micro-batches of a batch and each stage updates once per batch (after the batch's last
  backward); two weight buffers suffice when m ≥ p (double buffering). Staleness 1.

The optimizer step (and, with dp > 1, the gradient all-reduce) follows each update.
"""

from __future__ import annotations

from ..errors import ScenarioError
from .registry import register_schedule


def _one_f_one_b(stage: int, p: int, total: int, update_after) -> list[tuple]:
    warmup = min(p - stage - 1, total)
    out: list[tuple] = [("F", j) for j in range(warmup)]

    def backward(j):
        out.append(("B", j))
        u = update_after(j)
        if u is not None:
            out.append(("O", u))

    for i in range(total - warmup):
        out.append(("F", warmup + i))
        backward(i)
    for j in range(total - warmup, total):
        backward(j)
    return out


@register_schedule(
    "pipedream",
    "PipeDream: flush-free 1F1B, update per micro-batch, weight stashing",
    flush=False,
    weights="stash",
)
def pipedream(stage: int, p: int, m: int, iterations: int = 1) -> list[tuple]:
    return _one_f_one_b(stage, p, m * iterations, lambda j: j)


def _check_2bw(p: int, m: int, v: int) -> None:
    if m < p:
        raise ScenarioError(
            "parallel.schedule",
            "pipedream_2bw",
            f"PipeDream-2BW keeps two weight versions only when the micro-batches per batch (m = {m}) are at "
            f"least the pipeline depth pp = {p}; raise training.global_batch or lower pp",
        )


@register_schedule(
    "pipedream_2bw",
    "PipeDream-2BW: flush-free 1F1B, one update per batch, two weight buffers",
    flush=False,
    weights="double",
    check=_check_2bw,
)
def pipedream_2bw(stage: int, p: int, m: int, iterations: int = 1) -> list[tuple]:
    return _one_f_one_b(stage, p, m * iterations, lambda j: j // m if (j + 1) % m == 0 else None)
