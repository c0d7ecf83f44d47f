"""Transformer Engine's published GEMM benchmark (``data/te_fp8_recipe_gemms.csv``: TE
docs/examples/gemm_profiling, a 5B layer's 12 GEMMs on B300 SXM6 AC and H200 NVL) against
the calibrated model, in two tables that ``clustersim validate`` prints:

* **GEMMs**: the kernel-only rows — BF16 (autocast and pre-quantized: no quantization either
  way) and FP8 current scaling pre-quantized — per pass (the sum of its 4 GEMMs), against the
  sum of :func:`.calibration.gemm_seconds` on the catalog GPU of that name; bound
  :data:`GEMM_BOUND`.
* **quantize**: autocast − pre-quantized per layer (the quantize kernels TE runs each call)
  against :func:`.fp8.fp8_gemm_time`'s cast time of the same 12 calls; bound 10 % of the
  measured time plus the table's own run-to-run spread (its BF16 autocast vs pre-quantized
  rows, which quantize nothing).

TE's benchmark runs each shape as ``te.Linear(x)`` with ``x`` not requiring grad: X is
quantized for both usages, W rowwise only (``linear.py``: the weight's columnwise usage
follows ``inp.requires_grad``) — every call; CUDA events over 100 iterations.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass

from ..workload.calibration import calibration, gemm_seconds
from ..workload.fp8 import fp8_gemm_time
from ..workload.fp8_recipes import RECIPES_CSV
from .verdict import Verdict

#: TE's device name → the catalog GPU it is priced as
TE_GPUS = {"B300 SXM6 AC": "B300-SXM-288GB", "H200 NVL": "H200-NVL-141GB"}
#: the benchmark's tokens, hidden and FFN sizes (``M = 31 × 512``)
M, HID, FFN = 15872, 4096, 16384
#: each pass's 4 GEMMs as TE writes them, M × K × N (QKV, attention out, MLP up, MLP down)
PASSES = {
    "fprop": ((M, HID, 3 * HID), (M, HID, HID), (M, HID, FFN), (M, FFN, HID)),
    "dgrad": ((M, 3 * HID, HID), (M, HID, HID), (M, FFN, HID), (M, HID, FFN)),
    "wgrad": ((HID, M, 3 * HID), (HID, M, HID), (HID, M, FFN), (FFN, M, HID)),
}
#: a pass's GEMM-time sum against the model: the calibrate role's rms bound (15 %,
#: :data:`.calibration.TOLERANCE`) — four compute-bound GEMMs are one plateau measurement
GEMM_BOUND = 0.15
#: the quantize check: 10 % of the measured quantize time, plus the table's run-to-run spread
QUANTIZE_BOUND = 0.10
#: recipe measured in autocast → the pre-quantized run with the same GEMMs (delayed scaling
#: has no pre-quantized run: TE always quantizes it; its GEMMs are current scaling's)
GEMM_ONLY = {"current": "current", "delayed": "current", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}


@dataclass(frozen=True)
class Row:
    """One compared number: what TE measured and what the model gives, in ms."""

    gpu: str
    what: str
    measured_ms: float
    model_ms: float
    bound_ms: float

    @property
    def error(self) -> float:
        return self.model_ms / self.measured_ms - 1


def _table() -> dict[tuple[str, str, str, str], float]:
    with RECIPES_CSV.open(newline="") as fh:
        return {(r["gpu"], r["recipe"], r["mode"], r["gemms"]): float(r["ms"]) for r in csv.DictReader(fh)}


def pass_model_ms(gpu: str, dtype: str, phase: str) -> float:
    """Model milliseconds of one pass's 4 GEMMs on catalog ``gpu`` (``dtype`` bf16 or fp8:
    the per-tensor FP8 GEMM, which current scaling runs)."""
    cal = calibration(gpu)
    eff = cal.fp8 if dtype == "fp8" else cal.dense16
    return 1e3 * sum(gemm_seconds(gpu, eff, m, n, k, dtype) for m, k, n in PASSES[phase])


def gemm_rows() -> list[Row]:
    """Every kernel-only pass sum of the table against the model."""
    out = []
    for (te_gpu, recipe, mode, phase), ms in _table().items():
        kernel_only = recipe == "bf16" or (recipe == "current" and mode == "prequantized")
        if phase in PASSES and kernel_only:
            gpu, dtype = TE_GPUS[te_gpu], "bf16" if recipe == "bf16" else "fp8"
            out.append(
                Row(gpu, f"{recipe} {mode} {phase}", ms, pass_model_ms(gpu, dtype, phase), GEMM_BOUND * ms)
            )
    return out


def quantize_model_ms(gpu: str, recipe: str) -> float:
    """Model milliseconds of the quantize kernels of TE's 12 ``te.Linear`` calls: X for both
    usages, W rowwise only, every call."""
    t = 0.0
    for shapes in PASSES.values():
        for m, k, n in shapes:
            t += fp8_gemm_time(gpu, m, n, k, [m * k], recipe=recipe).cast_s
            t += fp8_gemm_time(gpu, m, n, k, [k * n], recipe=recipe, both_usages=False).cast_s
    return t * 1e3


def quantize_rows() -> list[Row]:
    """Autocast − pre-quantized per layer against the model's quantize time, per GPU and recipe."""
    ms = _table()
    out = []
    for te_gpu, gpu in TE_GPUS.items():
        spread = abs(ms[te_gpu, "bf16", "autocast", "layer"] - ms[te_gpu, "bf16", "prequantized", "layer"])
        for recipe, gemm_only in GEMM_ONLY.items():
            if (te_gpu, recipe, "autocast", "layer") not in ms:
                continue
            measured = (
                ms[te_gpu, recipe, "autocast", "layer"] - ms[te_gpu, gemm_only, "prequantized", "layer"]
            )
            bound = QUANTIZE_BOUND * measured + spread
            out.append(Row(gpu, f"{recipe} quantize", measured, quantize_model_ms(gpu, recipe), bound))
    return out


def _verdict(name: str, rows: list[Row]) -> Verdict:
    worst = max(rows, key=lambda r: abs(r.model_ms - r.measured_ms) / r.bound_ms)
    ok = all(abs(r.model_ms - r.measured_ms) <= r.bound_ms for r in rows)
    return Verdict(
        name,
        ok,
        f"{len(rows)} rows; worst {worst.gpu} {worst.what}: {worst.error:+.1%} "
        f"({abs(worst.model_ms - worst.measured_ms):.3f} ms against a bound of {worst.bound_ms:.3f} ms)",
    )


def te_gemm_verdicts() -> list[Verdict]:
    """The GEMM and quantize tables' pass/fail."""
    return [
        _verdict(f"TE GEMMs (each pass within {GEMM_BOUND:.0%})", gemm_rows()),
        _verdict(f"TE quantize ({QUANTIZE_BOUND:.0%} + run-to-run spread)", quantize_rows()),
    ]


def te_gemm_tables() -> str:
    """Markdown: both tables, each ending with its verdict line."""
    parts = []
    titles = ("### GEMM passes (kernel only)", "### FP8 quantize (autocast − pre-quantized)")
    for title, rows, verdict in zip(titles, (gemm_rows(), quantize_rows()), te_gemm_verdicts(), strict=True):
        lines = [
            title,
            "",
            "| GPU | rows | TE ms | model ms | error | bound ms |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r.gpu} | {r.what} | {r.measured_ms:.3f} | {r.model_ms:.3f} | {r.error:+.1%} | {r.bound_ms:.3f} |"
            for r in rows
        ]
        parts.append("\n".join([*lines, "", verdict.line()]))
    return "\n\n".join(parts)
