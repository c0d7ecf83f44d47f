"""DeepSeek's DualPipe and DualPipe-V (DeepSeek-V3 technical report §3.2.1; the orders of
deepseek-ai/DualPipe ``dualpipe.py`` and ``dualpipev.py``, ``step()``).

Both give each stage two model chunks and overlap the forward of one micro-batch on one
chunk with the backward of another on the other chunk (an ``("F&B", …)`` pair, emitted
by :mod:`.overlap`), and split some backwards into B and W to fill the rest.

* ``dualpipe``: bidirectional. The model is cut into p chunks; stage s holds chunk s of
  the first copy and chunk p − 1 − s of a second copy (2× parameters). The first m/2
  micro-batches enter at stage 0 and run down the first copy, the other m/2 enter at
  stage p − 1 and run up the second; the stages holding the two copies of a chunk sum
  their gradients before the optimizer step. Needs an even pp and an even m ≥ 2·pp.
* ``dualpipe_v``: DualPipe "cut in half" (Sea AI Lab): the model is cut into 2p chunks
  in a V (stage s holds chunks s and 2p − 1 − s, one copy), all m micro-batches enter
  at stage 0. Needs m ≥ 2·pp.

The per-stage step sequence is the same for both — DualPipe's on a half pipeline of n
ranks with the stage's half rank h, DualPipe-V's with n = p and h = s. With phase 0 the
chunk nearer the pipeline's entry and phase 1 the other:

1. 2(n − h − 1) forwards of phase 0;  2. h + 1 times F0, F1;
3. n − h − 1 times B1 (split), W, F1;
4. M − 2n + h + 1 times (F0 & B1), (F1 & B0) — the steady state of overlapped pairs (the
   middle stage runs its first F0 and B1 one after the other: DeepSeek's "we don't overlap
   these two chunks to further reduce bubble size");
5. n − h − 1 times B1, (F1 & B0);  6. h + 1 times B1, B0 (split from the middle on);
7. n − h − 1 times W, B0 (split);  8. h + 1 times W.

M is the micro-batches per direction (m/2 for DualPipe, m for DualPipe-V); a W runs the
oldest pending weight gradient. DeepSeek's Table 2 (DualPipe; the repo's README for
DualPipe-V, with its p = 2·pp stages): bubble (PP/2 − 1)(T_F&B + T_B − 3T_W) with T_B
the full backward, parameters 2× a stage's, PP + 1 stages' activations in flight.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from ..errors import ScenarioError
from .registry import register_schedule

Step = tuple  # ("F", phase) | ("B", phase, split) | ("W",) | ("F&B", phase, phase)


def _steps(n: int, h: int, per_direction: int) -> Iterator[Step]:
    """DualPipe's step sequence for half rank ``h`` of ``n`` (module docstring)."""
    yield from [("F", 0)] * (2 * (n - h - 1))
    for _ in range(h + 1):
        yield from (("F", 0), ("F", 1))
    for _ in range(n - h - 1):
        yield from (("B", 1, True), ("W",), ("F", 1))
    for i in range(per_direction - 2 * n + h + 1):
        if i == 0 and h == n - 1:
            yield from (("F", 0), ("B", 1, False))
        else:
            yield ("F&B", 0, 1)
        yield ("F&B", 1, 0)
    for _ in range(n - h - 1):
        yield from (("B", 1, False), ("F&B", 1, 0))
    split = False
    for i in range(h + 1):  # the second half of these backwards is split
        split = split or (i == (h + 1) // 2 and h % 2 == 1)
        yield ("B", 1, split)
        split = split or (i == (h + 1) // 2 and h % 2 == 0)
        yield ("B", 0, split)
    for _ in range(n - h - 1):
        yield from (("W",), ("B", 0, True))
    yield from [("W",)] * (h + 1)


def _order(steps: Iterator[Step], chunk: Callable[[int], int], first_mb: Callable[[int], int]) -> list[tuple]:
    """Order items from steps: phase ``ph`` is model chunk ``chunk(ph)``, its micro-batches
    counted from ``first_mb(ph)``; a W runs the oldest split backward's weight gradient."""
    nxt = {(ph, c): first_mb(c) for ph in "FB" for c in (0, 1)}
    pending: deque[tuple[int, int]] = deque()
    out: list[tuple] = []

    def take(ph: str, c: int) -> tuple[int, int]:
        nxt[(ph, c)] += 1
        return nxt[(ph, c)] - 1, chunk(c)

    for step in steps:
        if step[0] == "F":
            out.append(("F", *take("F", step[1])))
        elif step[0] == "B":
            j, k = take("B", step[1])
            out.append(("B", j, k))
            if step[2]:
                pending.append((j, k))
        elif step[0] == "W":
            out.append(("W", *pending.popleft()))
        else:
            out.append(("F&B", *take("F", step[1]), *take("B", step[2])))
    return out


def _check_m(name: str, p: int, m: int, even: bool) -> None:
    if m < 2 * p or (even and m % 2):
        raise ScenarioError(
            "parallel.schedule",
            name,
            f"{name} needs the micro-batches per iteration (m = {m}) to be at least 2·pp = {2 * p}"
            f"{' and even (half enter from each end)' if even else ''}; raise training.global_batch "
            f"or lower training.micro_batch",
        )


def _check_dualpipe(p: int, m: int, v: int) -> None:
    if p % 2:
        raise ScenarioError(
            "parallel.pp",
            p,
            "dualpipe pairs stage s with stage pp − 1 − s (micro-batches enter from both ends); "
            "accepted: an even pp (or schedule dualpipe_v)",
        )
    _check_m("dualpipe", p, m, even=True)


@register_schedule(
    "dualpipe",
    "DualPipe (DeepSeek-V3): bidirectional, two model copies, overlapped F&B pairs",
    chunks=2,
    placement="vee",
    directions=2,
    check=_check_dualpipe,
)
def dualpipe(stage: int, p: int, m: int, v: int = 2) -> list[tuple]:
    # phase 0 is the copy in which this stage sits in the first half of the pipeline
    second = stage >= p // 2
    copies = (stage, 2 * p - 1 - stage)  # chunk of the first copy, of the second copy
    return _order(
        _steps(p // 2, min(stage, p - 1 - stage), m // 2),
        lambda ph: copies[ph ^ second],
        lambda ph: (ph ^ second) * (m // 2),
    )


@register_schedule(
    "dualpipe_v",
    "DualPipe-V (DualPipe cut in half): two chunks per stage in a V, overlapped F&B pairs",
    chunks=2,
    placement="vee",
    check=lambda p, m, v: _check_m("dualpipe_v", p, m, even=False),
)
def dualpipe_v(stage: int, p: int, m: int, v: int = 2) -> list[tuple]:
    return _order(_steps(p, stage, m), lambda ph: (stage, 2 * p - 1 - stage)[ph], lambda ph: 0)
