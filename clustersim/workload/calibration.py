"""Per-GPU efficiencies fitted to published kernel-level measurements.

Every number used here is a row of ``clustersim/data/gpu_kernel_measurements.csv`` —
GEMM throughput by shape (XLA's measured cuBLAS tables, Azure's cuBLASLt/hipBLASLt
sweeps, ml-engineering's MAMF finder), STREAM-like HBM bandwidth — and of
``attention_kernel_measurements.csv`` (FlashAttention-2/3 and cuDNN attention figures) — each with its source and verification tag; never end-to-end training
throughput, never a layer time that includes communication. A row's ``role`` says what it
is for: ``calibrate`` rows set the model, ``check`` rows test it, ``context`` rows are kept
for the record (unknown GPU, unknown mask or direction, conflicting editions) and are not
asserted on.

ONE calibration per GPU type and dtype, stated up front in :data:`CALIBRATIONS` (which
GPU's rows set each part; a part taken from a sibling GPU is a transfer, said in the plan's
note); a catalog GPU with no plan borrows the set of the nearest calibrated GPU
(:func:`calibrated_as`), marked as a transfer by ``clustersim list``:

* ``memory`` = measured STREAM triad / datasheet HBM bandwidth;
* ``matmul_max`` = the maximum-achievable-matmul (MAMF) row over the peak: the best mean
  throughput of a brute-force shape search is taken as the model's supremum (fitted
  with the rest where a GPU and dtype have no MAMF row);
* ``dim_half``, ``k_half`` and ``launch_s``: least squares on log kernel time over the
  shape-sweep rows, the model being the cost model's own roofline
  ``max(F / (peak · matmul_eff), bytes / (HBM · memory)) + launch`` (same code path), with
  wave quantization over the GPU's SM count (:func:`.cost_model.matmul_efficiency`);
* FP8 GEMMs get their own set the same way, on the FP8 peak (used by :mod:`.fp8`);
* attention: one curve per fused kernel (FA2, FA3, cuDNN) with rows for the GPU, over
  direction, head dim, sequence length and mask (:mod:`.attention_kernels`).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import numpy as np

from ..hardware.datasheets import datasheet, datasheets
from ..hardware.gpus import get_gpu
from .attention_kernels import KERNELS, ROW_KERNELS, AttentionCurve, fit_curve, gives_shape, pick
from .cost_model import CostModel, Efficiency
from .least_squares import levenberg_marquardt as _lm
from .ops import Work

MEASUREMENTS_CSV = Path(__file__).resolve().parent.parent / "data" / "gpu_kernel_measurements.csv"
#: the fused attention kernels' rows (same columns; :mod:`.attention_kernels`)
ATTENTION_CSV = MEASUREMENTS_CSV.with_name("attention_kernel_measurements.csv")

#: bytes per GEMM input element by the dtype column; outputs are 16-bit in every case
#: (an FP8 GEMM writes BF16, as cuBLASLt/hipBLASLt benchmarks and Transformer Engine do)
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
OUTPUT_BYTES = 2


@dataclass(frozen=True)
class Measurement:
    """One published kernel-level number (a row of the measurements CSV)."""

    gpu: str
    kernel: str
    impl: str
    dtype: str
    m: int
    n: int
    k: int
    head_dim: int
    seq_len: int
    causal: bool
    value: float
    unit: str
    role: str
    source: str
    verification: str
    note: str

    @property
    def shape(self) -> str:
        """The row's shape in words (M×N×K, or head dim and sequence length)."""
        if self.m:
            return f"{self.m}×{self.n}×{self.k}"
        if self.head_dim:
            return f"hd {self.head_dim}, s {self.seq_len}" + (", causal" if self.causal else "")
        return "—"


def _int(text: str) -> int:
    return int(text) if text else 0


@cache
def measurements() -> tuple[Measurement, ...]:
    """All rows of ``gpu_kernel_measurements.csv`` and ``attention_kernel_measurements.csv``
    (read once)."""
    return read_measurements(MEASUREMENTS_CSV) + read_measurements(ATTENTION_CSV)


def read_measurements(path: str | Path) -> tuple[Measurement, ...]:
    """The rows of a CSV in ``gpu_kernel_measurements.csv``'s columns: the committed table,
    or the ``kernels.csv`` that ``benchmarks/gpu_profile.py`` writes on a real GPU."""
    with Path(path).open() as fh:
        return tuple(
            Measurement(
                gpu=r["gpu"],
                kernel=r["kernel"],
                impl=r["impl"],
                dtype=r["dtype"],
                m=_int(r["m"]),
                n=_int(r["n"]),
                k=_int(r["k"]),
                head_dim=_int(r["head_dim"]),
                seq_len=_int(r["seq_len"]),
                causal=r["causal"] == "true",
                value=float(r["value"]),
                unit=r["unit"],
                role=r["role"],
                source=r["source"],
                verification=r["verification"],
                note=r["note"],
            )
            for r in csv.DictReader(fh)
        )


def _rows(gpu: str, kernel: str, dtype: str = "", role: str = "calibrate") -> list[Measurement]:
    return [
        r
        for r in measurements()
        if r.gpu == gpu and r.kernel == kernel and r.role == role and (not dtype or r.dtype == dtype)
    ]


#: a (GPU, dtype) pair naming a set of rows
Source = tuple[str, str]


@dataclass(frozen=True)
class Part:
    """Where one precision's GEMM efficiency comes from: ``shape`` — the (GPU, dtype)
    whose shape sweep fits ``dim_half`` and ``launch_s``; ``top`` — the (GPU, dtype)
    whose maximum-achievable (MAMF) row fixes ``matmul_max`` (None: fitted too)."""

    shape: Source
    top: Source | None


@dataclass(frozen=True)
class Plan:
    """Which rows set each part of one GPU type's model (a part named after another
    GPU is a transfer, said in ``note``)."""

    dense16: Part
    fp8: Part | None
    memory: str
    attention: str = ""
    note: str = ""
    #: the GPU whose attention curves give the shape where ``attention``'s rows give none
    attention_shape: str = ""

    def sources(self) -> set[str]:
        """Every GPU whose rows set a part of this plan."""
        parts = [p for p in (self.dense16, self.fp8) if p is not None]
        named = {p.shape[0] for p in parts} | {p.top[0] for p in parts if p.top is not None}
        attention = {g for g in (self.attention, self.attention_shape) if g}
        return named | {self.memory} | attention


_A100, _H100, _H200, _B200, _GB200, _B300, _MI300X = (
    "A100-SXM4-80GB",
    "H100-SXM5-80GB",
    "H200-SXM-141GB",
    "B200-SXM-180GB",
    "GB200-186GB",
    "B300-SXM-288GB",
    "MI300X-192GB",
)
#: the calibration a custom GPU like no catalog GPU is priced with (flagged as uncalibrated)
FALLBACK_GPU = _A100
_H100_PARTS = (Part((_H100, "bf16"), (_H100, "bf16")), Part((_H100, "fp8"), (_H100, "fp8")))

#: GPU → its one calibration
CALIBRATIONS: dict[str, Plan] = {
    _A100: Plan(
        Part((_A100, "fp16"), (_A100, "bf16")),
        None,
        _A100,
        _A100,
        note="A100 rows only: Azure's cuBLASLt FP16 sweep (FP16 and BF16 share the tensor-core rate), "
        "the BF16 MAMF maximum, Azure's BabelStream triad, FlashAttention-2's figures",
    ),
    "A100-SXM4-40GB": Plan(
        Part((_A100, "fp16"), (_A100, "bf16")),
        None,
        "A100-SXM4-40GB",
        _A100,
        note="GEMMs and attention from A100 80GB (same GA100 die and clocks), memory from its own "
        "BabelStream row",
    ),
    _H100: Plan(*_H100_PARTS, _H100, _H100, "H100 rows only"),
    _H200: Plan(
        *_H100_PARTS,
        _H200,
        _H100,
        "GEMMs and attention from H100 (same GH100 die and clocks), memory from H200",
    ),
    "H800-SXM5-80GB": Plan(*_H100_PARTS, _H100, _H100, "all from H100 (same silicon; only NVLink differs)"),
    # the 600 W PCIe H200: H100's fractions on its own (lower) datasheet peaks; no MAMF or
    # sweep row of its own; Transformer Engine's H200 NVL per-layer GEMM sums check it
    "H200-NVL-141GB": Plan(
        *_H100_PARTS,
        _H200,
        _H100,
        "GEMMs and attention from H100 (same GH100 die) on its own 600 W peaks, memory from H200 "
        "(same HBM3e); checked by Transformer Engine's H200 NVL per-layer GEMM sums",
    ),
    _B200: Plan(
        Part((_B200, "bf16"), (_B200, "bf16")),
        Part((_B200, "fp8"), (_B200, "fp8")),
        _H200,
        _B200,
        note="memory from H200's HBM3e fraction (no B200 STREAM number found); cuDNN attention "
        "maxima from NVIDIA's B200 numbers, its curve's shape from H100's cuDNN rows",
        attention_shape=_H100,
    ),
    _GB200: Plan(
        Part((_B200, "bf16"), (_GB200, "bf16")),
        Part((_B200, "fp8"), (_GB200, "fp8")),
        _H200,
        _B200,
        note="GEMM shape constants from B200, maxima from GB200's MAMF rows, memory from H200, "
        "attention as B200's",
        attention_shape=_H100,
    ),
    # Blackwell Ultra: the B200/GB200 die family with more HBM (same dense BF16/FP8 peaks on
    # HGX B300; GB300 +11 %). B300 has its own MAMF rows (the maxima) but no shape sweep: the
    # shape constants are B200's; TE's per-shape GEMM rows check it.
    "B300-SXM-288GB": Plan(
        Part((_B200, "bf16"), (_B300, "bf16")),
        Part((_B200, "fp8"), (_B300, "fp8")),
        _H200,
        _B200,
        note="GEMM maxima from B300's MAMF rows, shape constants from B200's sweep (no B300 sweep), "
        "memory from H200, attention as B200's; checked by Transformer Engine's B300 GEMM rows",
        attention_shape=_H100,
    ),
    "GB300-288GB": Plan(
        Part((_B200, "bf16"), (_GB200, "bf16")),
        Part((_B200, "fp8"), (_GB200, "fp8")),
        _H200,
        _B200,
        note="all from GB200 (Blackwell Ultra on Grace; no GB300 kernel row yet)",
        attention_shape=_H100,
    ),
    _MI300X: Plan(
        Part((_MI300X, "fp8"), (_MI300X, "bf16")),
        Part((_MI300X, "fp8"), None),
        _MI300X,
        note="BF16 maximum from its MAMF row, shape constants from the FP8 sweep",
    ),
}


def calibrated_gpus() -> list[str]:
    """Catalog GPUs with an efficiency set of their own (a plan of :data:`CALIBRATIONS`), in
    table order."""
    return [g for g in datasheets() if g in CALIBRATIONS]


def calibrated_as(gpu: str) -> str:
    """The calibrated GPU whose efficiencies catalog GPU ``gpu`` is priced with: itself, or
    — for a row without kernel measurements — the nearest calibrated GPU, nearest by
    ``|ln(peak/peak')| + |ln(HBM/HBM')|`` (the two peaks the efficiencies are fractions
    of; a tie goes to the earlier row). The fractions then apply to ``gpu``'s own peaks."""
    if gpu in CALIBRATIONS:
        return gpu
    own = datasheet(gpu)

    def distance(other: str) -> float:
        sheet = datasheet(other)
        return abs(math.log(own.dense16_flops / sheet.dense16_flops)) + abs(
            math.log(own.hbm_bandwidth / sheet.hbm_bandwidth)
        )

    return min(calibrated_gpus(), key=distance)


def calibration_status(gpu: str) -> str:
    """``calibrated`` (on its own kernel-level rows), ``calibrated, in part a transfer: …``
    or ``calibrated, a transfer, on a sibling's rows: …`` (a plan that takes some or all
    parts from a sibling GPU, its note), or ``transfer from <GPU>``
    for a catalog GPU priced with the efficiencies of another (:func:`calibrated_as`)."""
    donor = calibrated_as(gpu)
    if donor != gpu:
        return f"transfer from {donor}"
    sources = CALIBRATIONS[gpu].sources()
    if sources == {gpu}:
        return "calibrated"
    borrowed = "in part a transfer" if gpu in sources else "a transfer, on a sibling's rows"
    return f"calibrated, {borrowed}: {CALIBRATIONS[gpu].note}"


#: (rms of the relative error over a set of rows, largest relative error of any row) by
#: role; a set = one GPU, kernel, dtype. Set from the data's own scatter, one pair per
#: role, never per row: the same GEMM measured twice moves up to 9 % (XLA's two sm_90
#: tables at 256×512×256), a GPU's best GEMM throughput up to 24 % between sources
#: (GB200 FP8: Azure's sweep plateau vs the MAMF row), and the model has one fixed cost
#: per GPU, so launch-bound shapes carry the largest single errors.
TOLERANCE = {"calibrate": (0.15, 0.50), "check": (0.30, 0.60)}


def sm_count(gpu: str) -> int:
    """SMs of ``gpu`` (the catalog's ``sms`` column, ``gpu_datasheets.csv``; 0 if not in the
    catalog: no wave quantization)."""
    sheet = datasheets().get(gpu)
    return 0 if sheet is None else sheet.sms


def _polish(residuals: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """Coordinate search on the sum of squares from ``x`` (steps of e^±0.1 down to
    e^±0.001 on each log constant): the GEMM model is only piecewise smooth — the best tile
    and split-K switch with the constants — so a gradient method can stop on a kink."""
    x = np.asarray(x, dtype=float).copy()
    r = residuals(x)
    best = float(r @ r)
    for step in (0.1, 0.03, 0.01, 0.003, 0.001):
        improved = True
        while improved:
            improved = False
            for j in range(x.size):
                for sign in (1.0, -1.0):
                    trial = x.copy()
                    trial[j] += sign * step
                    rt = residuals(trial)
                    if float(rt @ rt) < best:
                        x, best, improved = trial, float(rt @ rt), True
    return x


def _model(gpu: str, eff: Efficiency, fp8: bool) -> CostModel:
    spec = get_gpu(gpu)
    return CostModel(replace(spec, peak_flops=datasheet(gpu).fp8_flops) if fp8 else spec, eff)


def _gemm_work(m: int, n: int, k: int, dtype: str) -> Work:
    return Work(2.0 * m * n * k, ELEMENT_BYTES[dtype] * (m * k + k * n) + OUTPUT_BYTES * m * n, (m, n, k))


def gemm_seconds(gpu: str, eff: Efficiency, m: int, n: int, k: int, dtype: str) -> float:
    """Seconds of one M×N×K GEMM on ``gpu`` under ``eff`` — the cost model's roofline,
    on the FP8 peak when ``dtype`` is fp8."""
    return _model(gpu, eff, dtype == "fp8").time(_gemm_work(m, n, k, dtype))


def _measured_seconds(r: Measurement) -> float:
    return 2.0 * r.m * r.n * r.k / (r.value * 1e12)


def _is_mamf(r: Measurement) -> bool:
    return r.impl.startswith("torch.matmul (mamf")


def fit_gemm(
    gpu: str, rows: Sequence[Measurement], memory: float, matmul_max: float | None = None
) -> Efficiency:
    """GEMM efficiency fitted to one dtype's shape-sweep ``rows`` of ``gpu`` (wave
    quantization over its SMs) by least squares on log time, ``memory`` fixed:
    ``dim_half``, ``k_half`` and ``launch_s`` always, ``matmul_max`` too unless given."""
    dtype = rows[0].dtype
    measured = np.log([_measured_seconds(r) for r in rows])
    sms = sm_count(gpu)

    def eff_of(x: np.ndarray) -> Efficiency:
        # a term the rows never bend runs its constant off towards 0 (no effect); bounded
        # at e^±50 so that a trial step cannot overflow
        x = np.clip(x, -50.0, 50.0)
        top = matmul_max if matmul_max is not None else math.exp(x[3])
        return Efficiency(top, math.exp(x[0]), memory, math.exp(x[1]), k_half=math.exp(x[2]), sms=sms)

    works = [_gemm_work(r.m, r.n, r.k, dtype) for r in rows]

    def residuals(x: np.ndarray) -> np.ndarray:
        # gemm_seconds of every row, its model made once per step (a fresh process fits on
        # its first run: this is most of that fit)
        model = _model(gpu, eff_of(x), dtype == "fp8")
        return np.log([model.time(w) for w in works]) - measured

    x0 = [math.log(64.0), math.log(4e-6), math.log(64.0)] + (
        [] if matmul_max is not None else [math.log(0.8)]
    )
    return eff_of(_polish(residuals, _lm(residuals, x0)))


def mamf_fraction(source: Source) -> float | None:
    """The (GPU, dtype)'s maximum-achievable matmul throughput over its peak — the best
    mean of a brute-force shape search, taken as the model's supremum ``matmul_max`` —
    or None when the data has no such row."""
    gpu, dtype = source
    tops = [r for r in _rows(gpu, "gemm", dtype) if _is_mamf(r)]
    if not tops:
        return None
    peak = datasheet(gpu).fp8_flops if dtype == "fp8" else datasheet(gpu).dense16_flops
    return tops[0].value * 1e12 / peak


def _peak_kind(dtype: str) -> str:
    """Which datasheet peak a dtype runs on (FP16 and BF16 share the 16-bit one)."""
    return "fp8" if dtype == "fp8" else "16-bit"


@cache
def _fitted(part: Part) -> Efficiency:
    """The shape sweep of ``part.shape`` fitted under the memory fraction of the GPU that
    ran it (its roofline decides which rows are memory-bound), with ``matmul_max`` fixed
    by the MAMF row of the same GPU and peak where there is one (``part.top``, else the
    shape source's own), else fitted too."""
    gpu, dtype = part.shape
    rows = [r for r in _rows(gpu, "gemm", dtype) if not _is_mamf(r)]
    same_peak = part.top is not None and part.top[0] == gpu and _peak_kind(part.top[1]) == _peak_kind(dtype)
    top = mamf_fraction(part.top) if same_peak else mamf_fraction(part.shape)
    return fit_gemm(gpu, rows, _memory(CALIBRATIONS[gpu].memory), top)


def part_efficiency(part: Part) -> Efficiency:
    """The efficiency a :class:`Part` names: ``dim_half``, ``k_half`` and ``launch_s`` of
    the shape source's fit, ``matmul_max`` from the ``top`` source's MAMF row when one is
    named."""
    shape = _fitted(part)
    top = mamf_fraction(part.top) if part.top is not None else None
    return shape if top is None else replace(shape, matmul_max=top)


@cache
def fit_attention(gpu: str, shape_from: str = "") -> tuple[AttentionCurve, ...]:
    """The fused attention curves of ``gpu``, one per kernel with ``calibrate`` rows
    (:mod:`.attention_kernels`); a set too small for a shape takes it from the same
    kernel on ``shape_from``."""
    peak = datasheet(gpu).dense16_flops / 1e12
    curves = []
    for impl in KERNELS:
        rows = [r for r in measurements() if r.gpu == gpu and r.impl == impl and r.role == "calibrate"]
        rows = [r for r in rows if r.kernel in ROW_KERNELS and r.dtype == "bf16"]
        if not rows:
            continue
        if gives_shape(rows):
            curves.append(fit_curve(rows, peak, impl, f"fitted: {gpu} {impl} rows"))
            continue
        donor = pick(fit_attention(shape_from), impl) if shape_from else None
        if donor is None or donor.impl != impl:
            raise ValueError(f"{gpu} {impl}: too few rows for a shape and no {impl} curve to take it from")
        source = f"fitted: {gpu} {impl} maxima, shape from {shape_from}"
        curves.append(fit_curve(rows, peak, impl, source, shape=donor))
    return tuple(curves)


@dataclass(frozen=True)
class Calibration:
    """One GPU type's calibrated model: 16-bit and FP8 GEMM efficiencies (FP8 None where
    the GPU has no FP8 tensor cores), attention curve."""

    gpu: str
    plan: Plan
    dense16: Efficiency
    fp8: Efficiency | None
    attention: tuple[AttentionCurve, ...]


def _memory(gpu: str) -> float:
    (row,) = _rows(gpu, "stream_triad")
    return row.value * 1e12 / datasheet(gpu).hbm_bandwidth


@cache
def calibration(gpu: str) -> Calibration:
    """The calibrated model of ``gpu`` (one of :data:`CALIBRATIONS`), fitted on first use."""
    plan = CALIBRATIONS[gpu]
    own = {"memory": _memory(plan.memory), "sms": sm_count(gpu)}
    src = f"calibrated on kernel-level rows ({plan.note}); gpu_kernel_measurements.csv"
    return Calibration(
        gpu,
        plan,
        replace(part_efficiency(plan.dense16), **own, source=src),
        None if plan.fp8 is None else replace(part_efficiency(plan.fp8), **own, source=src),
        fit_attention(plan.attention, plan.attention_shape) if plan.attention else (),
    )


def predicted(row: Measurement) -> float | None:
    """The model's value for a measurement row, in the row's unit (None where the model
    has no counterpart: collectives, attention rows of a kernel or dtype without a fitted curve)."""
    if row.gpu not in CALIBRATIONS:
        return None
    cal = calibration(row.gpu)
    if row.kernel == "gemm" and row.dtype in ELEMENT_BYTES:
        eff = cal.fp8 if row.dtype == "fp8" else cal.dense16
        return 2.0 * row.m * row.n * row.k / gemm_seconds(row.gpu, eff, row.m, row.n, row.k, row.dtype) / 1e12
    if row.kernel.startswith("stream_"):
        return cal.dense16.memory * get_gpu(row.gpu).hbm_bandwidth / 1e12
    curve = next((c for c in cal.attention if c.impl == row.impl), None)
    if row.kernel in ROW_KERNELS and row.dtype == "bf16" and curve is not None:
        return (
            curve.predict(row.kernel, row.head_dim, row.seq_len, row.causal)
            * datasheet(row.gpu).dense16_flops
            / 1e12
        )
    return None
