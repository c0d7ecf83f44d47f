"""What an overlapped communication kernel costs the GEMM beside it, per overlap kind.

A communication kernel holds SMs while it runs: NCCL one thread block per channel,
Transformer Engine's userbuffers ``num_sm``, DeepEP ``Buffer.num_sms``. How many each kind
takes, and whether the GEMM is told (TE's ``set_sm_margin``: the GEMM is launched for SMs −
``num_sm``, cuBLASLt's SM-count target), is a row of ``data/interference_measurements.csv``
with its source; the same table holds the measured slowdowns the model is checked against
(tests/test_gemm_interference.py).

A GEMM launched on SMs − taken is priced by the wave-quantization model of
:func:`~.cost_model.matmul_efficiency` over the SMs it gets — the best tile and split for
that SM count — and runs at that count's share of the peak:

    slowdown = eff(SMs) / (eff(SMs − taken) · (SMs − taken) / SMs)

For a GEMM of many full waves this is SMs / (SMs − taken), the old one-number rule
(:mod:`clustersim.hardware.interference`); a grid that fills SMs exactly once but not
SMs − taken pays up to a second wave. Where a GPU has no SM count (a custom GPU without
``sms``) the scalar ``cluster.comm_compute_slowdown`` stands in: the SM rule is the fallback.
HBM and L2 contention are not modelled: no kernel-level measurement per GPU and kind of
them was found (docs/overlap.md).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from .cost_model import Efficiency, matmul_efficiency

MEASUREMENTS_CSV = Path(__file__).resolve().parent.parent / "data" / "interference_measurements.csv"


@dataclass(frozen=True)
class InterferenceRow:
    """One row of the table: the GPU (``any``: every GPU), the overlap kind, the SMs its
    communication holds and whether the GEMM is launched on the rest (``sm_margin``), a
    measured compute slowdown and the GEMM's grid where the source gives them, the source."""

    gpu: str
    overlap: str
    comm_sms: int | None
    sm_margin: bool | None
    compute_slowdown: float | None
    gemm_ctas: int | None
    source: str


def _number(text: str, kind):
    return kind(float(text)) if text.strip() else None


@lru_cache(maxsize=1)
def interference_rows() -> tuple[InterferenceRow, ...]:
    """Every row of ``data/interference_measurements.csv``."""
    with MEASUREMENTS_CSV.open(newline="", encoding="utf-8") as f:
        return tuple(
            InterferenceRow(
                r["gpu"],
                r["overlap"],
                _number(r["comm_sms"], int),
                None if not r["sm_margin"].strip() else r["sm_margin"].strip() == "1",
                _number(r["compute_slowdown"], float),
                _number(r["gemm_ctas"], int),
                r["source"],
            )
            for r in csv.DictReader(f)
        )


@lru_cache(maxsize=1)
def _budgets() -> dict[str, InterferenceRow]:
    return {r.overlap: r for r in interference_rows() if r.gpu == "any" and r.comm_sms is not None}


def sm_budget(overlap: str) -> InterferenceRow:
    """The row saying how many SMs ``overlap``'s communication holds on every GPU, and
    whether the GEMM beside it is launched on the rest; KeyError for a kind the table lacks."""
    return _budgets()[overlap]


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
