"""ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24, §6; "Pipeline Parallelism
with Controllable Memory", 2024): two model chunks per stage in a V, backward split.

The model is cut into 2p chunks; stage s holds chunk s and chunk 2p − 1 − s (the
``vee`` placement), so a micro-batch goes down the pipeline and back up, and the last
stage runs chunks p − 1 and p back to back (a local hand-over). Every backward is split
into B (input gradient) and W (weight gradient). Stage s runs, on its chunks 0 (= s) and
1 (= 2p − 1 − s):

* warm-up: 2(p − s) − 1 forwards of chunk 0; then s times F (chunk 1), F (chunk 0);
  then p − s times F, B, W of chunk 1;
* steady state: F, B, W of chunk 0, then F, B, W of chunk 1, while forwards remain;
* cool-down: s times B (chunk 0), B (chunk 1); p − s times B, W of chunk 0; then the
  remaining W of chunk 1 and of chunk 0.

With fewer than 2p − 1 micro-batches the order is that of 2p − 1 with the missing
micro-batches left out (each stage drops the same ones, so it stays deadlock-free). This
is the handcrafted schedule of the paper's Figure 8 as PyTorch builds it
(``torch.distributed.pipelining.ScheduleZBVZeroBubble``): when T_F = T_B = T_W the
steady state has no bubble; at most 2p chunk activations (p stages' worth, 1F1B's peak)
live on stage 0; every micro-batch crosses 2(p − 1) stage boundaries each way, twice
1F1B's pipeline messages.
"""

from __future__ import annotations

from .registry import register_schedule


@register_schedule(
    "zb_v",
    "ZB-V: two chunks per stage in a V, split backward; no steady bubble at T_F = T_B = T_W, 1F1B's memory",
    chunks=2,
    placement="vee",
)
def zb_v(stage: int, p: int, m: int, v: int = 2) -> list[tuple[str, int, int]]:
    n, s = max(2 * p - 1, m), stage
    chunk = (s, 2 * p - 1 - s)
    out: list[tuple[str, int, int]] = []
    count = {(ph, c): 0 for ph in "FBW" for c in (0, 1)}

    def run(*passes: tuple[str, int]) -> None:
        for ph, c in passes:
            out.append((ph, count[(ph, c)], chunk[c]))
            count[(ph, c)] += 1

    for _ in range(2 * (p - s) - 1):
        run(("F", 0))
    for _ in range(s):
        run(("F", 1), ("F", 0))
    for _ in range(p - s):
        run(("F", 1), ("B", 1), ("W", 1))
    while count[("F", 1)] < count[("F", 0)] or count[("F", 0)] < n:
        if count[("F", 0)] < n:
            run(("F", 0))
        run(("B", 0), ("W", 0), ("F", 1), ("B", 1), ("W", 1))
    for _ in range(s):
        run(("B", 0), ("B", 1))
    for _ in range(p - s):
        run(("B", 0), ("W", 0))
    run(*[("W", 1)] * (count[("B", 1)] - count[("W", 1)]))
    run(*[("W", 0)] * (count[("B", 0)] - count[("W", 0)]))
    return [item for item in out if item[1] < m]
