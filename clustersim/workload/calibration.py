"""Per-GPU efficiencies fitted to published kernel-level measurements.

Every number used here is a row of ``clustersim/data/gpu_kernel_measurements.csv`` —
GEMM throughput by shape (XLA's measured cuBLAS tables, Azure's cuBLASLt/hipBLASLt
sweeps, ml-engineering's MAMF finder), FlashAttention-3 tables, STREAM-like HBM
bandwidth — each with its source and verification tag; never end-to-end training
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
* attention (where FlashAttention tables exist): ``eff(hd, s) = a_max · s/(s + s_half) ·
  hd/(hd + hd_half)`` of the dense 16-bit peak, forward fitted on the non-causal rows, the
  backward sharing the forward's ``hd_half``; a causal mask halves the FLOPs and runs as
  the unmasked kernel at half the sequence (``s/2``), an assumption the causal rows check.
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
from .cost_model import CostModel, Efficiency
from .ops import Work

MEASUREMENTS_CSV = Path(__file__).resolve().parent.parent / "data" / "gpu_kernel_measurements.csv"

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
    """All rows of ``gpu_kernel_measurements.csv`` (read once)."""
    return read_measurements(MEASUREMENTS_CSV)


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

    def sources(self) -> set[str]:
        """Every GPU whose rows set a part of this plan."""
        parts = [p for p in (self.dense16, self.fp8) if p is not None]
        named = {p.shape[0] for p in parts} | {p.top[0] for p in parts if p.top is not None}
        return named | {self.memory} | ({self.attention} if self.attention else set())


_A100, _H100, _H200, _B200, _GB200, _MI300X = (
    "A100-SXM4-80GB",
    "H100-SXM5-80GB",
    "H200-SXM-141GB",
    "B200-SXM-180GB",
    "GB200-186GB",
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
        note="A100 rows only: Azure's cuBLASLt FP16 sweep (FP16 and BF16 share the tensor-core rate), "
        "the BF16 MAMF maximum, Azure's BabelStream triad",
    ),
    "A100-SXM4-40GB": Plan(
        Part((_A100, "fp16"), (_A100, "bf16")),
        None,
        "A100-SXM4-40GB",
        note="GEMMs from A100 80GB (same GA100 die and clocks), memory from its own BabelStream row",
    ),
    _H100: Plan(*_H100_PARTS, _H100, _H100, "H100 rows only"),
    _H200: Plan(
        *_H100_PARTS,
        _H200,
        _H100,
        "GEMMs and attention from H100 (same GH100 die and clocks), memory from H200",
    ),
    "H800-SXM5-80GB": Plan(*_H100_PARTS, _H100, _H100, "all from H100 (same silicon; only NVLink differs)"),
    _B200: Plan(
        Part((_B200, "bf16"), (_B200, "bf16")),
        Part((_B200, "fp8"), (_B200, "fp8")),
        _H200,
        note="memory from H200's HBM3e fraction (no B200 STREAM number found)",
    ),
    _GB200: Plan(
        Part((_B200, "bf16"), (_GB200, "bf16")),
        Part((_B200, "fp8"), (_GB200, "fp8")),
        _H200,
        note="GEMM shape constants from B200, maxima from GB200's MAMF rows, memory from H200",
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


def _lm(residuals: Callable[[np.ndarray], np.ndarray], x0: Sequence[float], iters: int = 300) -> np.ndarray:
    """Levenberg–Marquardt on a small parameter vector (central-difference Jacobian);
    deterministic from ``x0``."""
    x = np.asarray(x0, dtype=float)
    r = residuals(x)
    cost, lam = float(r @ r), 1e-3
    for _ in range(iters):
        jac = np.empty((r.size, x.size))
        for j in range(x.size):
            h = np.zeros_like(x)
            h[j] = 1e-6
            jac[:, j] = (residuals(x + h) - residuals(x - h)) / 2e-6
        a, g = jac.T @ jac, jac.T @ r
        while lam < 1e12:
            step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -g)
            r_new = residuals(x + step)
            if float(r_new @ r_new) < cost:
                x, r, cost, lam = x + step, r_new, float(r_new @ r_new), lam / 3
                break
            lam *= 4
        else:
            return x
        if np.max(np.abs(step)) < 1e-12:
            break
    return x


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


@dataclass(frozen=True)
class AttentionCurve:
    """FlashAttention efficiency (fraction of the dense 16-bit peak) over head dim and
    sequence length: ``a_max · s/(s + s_half) · hd/(hd + hd_half)`` per direction."""

    fwd_max: float
    fwd_s_half: float
    bwd_max: float
    bwd_s_half: float
    hd_half: float
    source: str = ""

    def efficiency(self, head_dim: int, seq_len: int, backward: bool = False, causal: bool = False) -> float:
        """Fraction of peak of one attention kernel; causal = the unmasked kernel at s/2."""
        s = seq_len / 2 if causal else seq_len
        a, sh = (self.bwd_max, self.bwd_s_half) if backward else (self.fwd_max, self.fwd_s_half)
        return a * s / (s + sh) * head_dim / (head_dim + self.hd_half)


def fit_attention(gpu: str) -> AttentionCurve:
    """The attention curve of ``gpu`` fitted to its FA3 ``calibrate`` rows."""
    peak = datasheet(gpu).dense16_flops / 1e12
    fwd, bwd = _rows(gpu, "attention_fwd"), _rows(gpu, "attention_bwd")

    def res(rows: list[Measurement], a: float, sh: float, hh: float) -> np.ndarray:
        pred = [a * r.seq_len / (r.seq_len + sh) * r.head_dim / (r.head_dim + hh) * peak for r in rows]
        return np.log(pred) - np.log([r.value for r in rows])

    f = np.exp(_lm(lambda x: res(fwd, *np.exp(x)), [math.log(0.7), math.log(512.0), math.log(32.0)]))
    b = np.exp(_lm(lambda x: res(bwd, *np.exp(x), f[2]), [math.log(0.6), math.log(512.0)]))
    return AttentionCurve(*map(float, (*f[:2], *b, f[2])), source=f"fitted: {gpu} FlashAttention-3 rows")


@dataclass(frozen=True)
class Calibration:
    """One GPU type's calibrated model: 16-bit and FP8 GEMM efficiencies (FP8 None where
    the GPU has no FP8 tensor cores), attention curve."""

    gpu: str
    plan: Plan
    dense16: Efficiency
    fp8: Efficiency | None
    attention: AttentionCurve | None


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
        fit_attention(plan.attention) if plan.attention else None,
    )


def predicted(row: Measurement) -> float | None:
    """The model's value for a measurement row, in the row's unit (None where the model
    has no counterpart: collectives, attention other than the fitted FA3 curve)."""
    if row.gpu not in CALIBRATIONS:
        return None
    cal = calibration(row.gpu)
    if row.kernel == "gemm" and row.dtype in ELEMENT_BYTES:
        eff = cal.fp8 if row.dtype == "fp8" else cal.dense16
        return 2.0 * row.m * row.n * row.k / gemm_seconds(row.gpu, eff, row.m, row.n, row.k, row.dtype) / 1e12
    if row.kernel.startswith("stream_"):
        return cal.dense16.memory * get_gpu(row.gpu).hbm_bandwidth / 1e12
    if row.kernel in ("attention_fwd", "attention_bwd") and row.impl == "fa3" and cal and cal.attention:
        eff = cal.attention.efficiency(row.head_dim, row.seq_len, row.kernel == "attention_bwd", row.causal)
        return eff * datasheet(row.gpu).dense16_flops / 1e12
    return None
