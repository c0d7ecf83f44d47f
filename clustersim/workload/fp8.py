"""FP8 GEMMs as Transformer Engine runs them: the FP8 peak, its calibrated efficiency,
and the casting / amax kernels around each GEMM.

A TE FP8 linear layer multiplies FP8 operands into a BF16 output. Each BF16 operand that
is not FP8 yet is first cast by one fused kernel that also records its amax: 2 bytes
read and 1 byte written per element, plus 1 more when it also writes the transposed
copy the backward's weight-gradient GEMM consumes (``cast_transpose``). With delayed
scaling (TE's default recipe) the scale comes from the amax history, so the cast is
the only pass; with current scaling (a just-in-time per-tensor scale, as inference
stacks quantize activations) an amax reduction reads the tensor once more before it::

    t = t_gemm(FP8 peak, FP8 efficiency) + Σ_tensors [launch + bytes(tensor) / (HBM · memory)]

Which tensors are cast per phase (:func:`te_linear_casts`): forward X (and W on the first
micro-batch of a step; the FP8 weight is cached for the rest), backward-input dY, and
nothing for the weight gradient (it reuses the transposed copies).

The FP8 peak comes from ``gpu_datasheets.csv``, the FP8 efficiency from the FP8 rows of
:mod:`.calibration`. What is left for a ``training.precision: fp8`` option: the schema
word, FP8 activation/weight bytes in the memory model, and the stage builder choosing
these times for the linear layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hardware.datasheets import datasheet
from ..hardware.gpus import get_gpu
from .calibration import calibration, gemm_seconds

#: bytes touched per cast element: read BF16 (2) + write FP8 (1) [+ transposed FP8 (1)]
CAST_BYTES = {False: 3.0, True: 4.0}
#: bytes of the separate amax pass of current scaling (one BF16 read)
AMAX_BYTES = 2.0
SCALINGS = ("delayed", "current")


@dataclass(frozen=True)
class FP8Time:
    """Seconds of one FP8 GEMM and of the casts that feed it."""

    gemm_s: float
    cast_s: float

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.cast_s


def te_linear_casts(m: int, n: int, k: int, phase: str, first_microbatch: bool = False) -> list[float]:
    """Elements cast to FP8 before one phase of Y[m×n] = X[m×k]·W[k×n]: ``F`` casts X
    (and W on a step's first micro-batch), ``B`` casts dY, ``W`` casts nothing."""
    if phase == "F":
        return [float(m * k)] + ([float(k * n)] if first_microbatch else [])
    if phase == "B":
        return [float(m * n)]
    if phase == "W":
        return []
    raise ValueError(f"phase {phase!r}: expected F, B or W")


def fp8_gemm_time(
    gpu: str, m: int, n: int, k: int, casts: list[float], *, transpose: bool = True, scaling: str = "delayed"
) -> FP8Time:
    """One M×N×K FP8 GEMM on ``gpu`` and the casts of ``casts`` (element counts)."""
    if scaling not in SCALINGS:
        raise ValueError(f"scaling {scaling!r}: expected one of {', '.join(SCALINGS)}")
    if datasheet(gpu).fp8_flops <= 0:
        raise ValueError(f"{gpu} has no FP8 tensor cores (gpu_datasheets.csv)")
    eff = calibration(gpu).fp8
    bandwidth = get_gpu(gpu).hbm_bandwidth * eff.memory
    per_element = CAST_BYTES[transpose] + (AMAX_BYTES if scaling == "current" else 0.0)
    kernels = 2 if scaling == "current" else 1
    cast_s = sum(kernels * eff.launch_s + e * per_element / bandwidth for e in casts)
    return FP8Time(gemm_seconds(gpu, eff, m, n, k, "fp8"), cast_s)
