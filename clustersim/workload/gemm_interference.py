"""What an overlapped communication kernel costs the GEMM beside it, per overlap kind.

A communication kernel holds SMs while it runs: NCCL one thread block per channel,
Transformer Engine's userbuffers ``num_sm``, DeepEP ``Buffer.num_sms``. How many each kind
takes, and whether the GEMM is told (TE's ``set_sm_margin``: the GEMM is launched for SMs −
``num_sm``, cuBLASLt's SM-count target), is a row of ``data/interference_measurements.csv``
with its source (:func:`clustersim.hardware.interference.sm_budget`); the same table holds
the measured slowdowns the model is checked against (tests/test_gemm_interference.py).

A GEMM launched on SMs − taken is priced by the wave-quantization model of
:func:`~.cost_model.matmul_efficiency` over the SMs it gets — the best tile and split for
that SM count — and runs at that count's share of the peak:

    slowdown = eff(SMs) / (eff(SMs − taken) · (SMs − taken) / SMs)

For a GEMM of many full waves this is SMs / (SMs − taken), the old one-number rule
(:mod:`clustersim.hardware.interference`); a grid that fills SMs exactly once but not
SMs − taken pays up to a second wave.

A GEMM beside a NCCL collective is not told: cuBLAS sizes its grid for every SM while
NCCL's CTAs (one per channel, :func:`~clustersim.hardware.interference.nccl_ctas`) hold
``taken`` of them, so the same grid runs in waves of SMs − taken
(:func:`untold_slowdown`):

    slowdown = ceil(units / (SMs − taken)) / ceil(units / SMs)

— the NVIDIA forum's H100 row (a 132-CTA GEMM beside a 24-CTA all-gather) is that second
wave, measured 1.70× against the bound's 2. Where a GPU has no SM count (a custom GPU
without ``sms``) or no CTA row, the scalar ``cluster.comm_compute_slowdown`` stands in: the
SM rule is the fallback. HBM and L2 contention are not modelled here (docs/overlap.md).
"""

from __future__ import annotations

import math
from dataclasses import replace

from .cost_model import Efficiency, grid_units, matmul_efficiency


def relaunched_slowdown(eff: Efficiency, gemm: tuple[int, int, int], batch: int, taken: int) -> float | None:
    """How many times longer ``batch`` GEMMs of shape ``gemm`` take when launched on
    ``eff.sms`` − ``taken`` SMs (module doc), or None where ``eff`` has no SM count or no
    SMs would be left."""
    if eff.sms <= 0 or taken >= eff.sms:
        return None
    if taken <= 0:
        return 1.0
    fewer = replace(eff, sms=eff.sms - taken)
    slowed = matmul_efficiency(eff, gemm, batch) / (
        matmul_efficiency(fewer, gemm, batch) * fewer.sms / eff.sms
    )
    # ≥ 1 in exact arithmetic (the tiling chosen on fewer SMs runs no fewer waves on more);
    # the floor only drops float noise that would make a margin of −1e-17 s
    return max(slowed, 1.0)


def untold_slowdown(eff: Efficiency, gemm: tuple[int, int, int], batch: int, taken: int) -> float | None:
    """How many times longer ``batch`` GEMMs of shape ``gemm`` take when their grid, sized
    for ``eff.sms`` SMs, runs on the SMs − ``taken`` a collective leaves (module doc), or
    None where ``eff`` has no SM count or no SMs would be left."""
    if eff.sms <= 0 or taken >= eff.sms:
        return None
    units = grid_units(eff, gemm, batch)
    return math.ceil(units / (eff.sms - taken)) / math.ceil(units / eff.sms)
