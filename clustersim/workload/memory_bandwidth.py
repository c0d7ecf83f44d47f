"""Achieved HBM bandwidth of memory-bound kernels against the bytes they move, per GPU.

A memory-bound kernel that moves ``x`` bytes takes

    launch + (x + x_half) / (HBM · frac_max)

— it reaches the fraction ``frac_max · x / (x + x_half)`` of the datasheet HBM bandwidth:
the plateau ``frac_max`` when large, less when small, where the fixed ramp-up and tail of
the kernel (the first loads in flight, the last partial wave of blocks; ``x_half /
(HBM · frac_max)`` seconds) is not amortised. A GPU priced with another's curve runs it on
its own HBM bandwidth, the ramp's seconds kept. STREAM's triad (the cost model's ``memory``
fraction, still used for GEMMs' and attention's bytes) is one point near the plateau.

Two curves per GPU (:class:`MemoryCurves`), one per kind of kernel (the kind of each kernel
of an implementation, :data:`.kernel_impls.IMPLS`), fitted to the ``calibrate`` rows of
``data/memory_kernel_measurements.csv`` — kernel-level forward times from Liger-Kernel's
benchmark table (A100, H100), bytes from the row's implementation in :mod:`.kernel_impls` —
by least squares on log time through the cost model's own path, ``launch`` fixed at the
GPU's calibrated ``launch_s``:

* ``tuned``, fitted to the rows whose kernels are all tuned: hand-written Triton kernels
  (Liger: RMSNorm, LayerNorm, SwiGLU, RoPE, relu²). Fitted apart, their reductions (norms)
  and elementwise kernels differ by at most 1.3 points of plateau and 1 µs of ramp on both
  GPUs, within the rows' scatter: they share the curve. PyTorch's own elementwise kernels
  over contiguous tensors reach it at large sizes (the relu² ``context`` rows, two eager
  kernels; below ~30 MB they run 30–60 % faster than the curve's ramp, fitted on Triton's
  slower launches, says);
* ``generic``, fitted to the other rows, their tuned kernels at the tuned curve: PyTorch's
  row reductions and elementwise kernels with a strided or broadcast operand —
  ``nn.LayerNorm``, ``nn.RMSNorm``, ``LlamaRMSNorm``'s fp32 chain, ``rotate_half`` RoPE,
  SwiGLU over ``torch.chunk`` halves (eager, and Megatron-Core's ``torch.compile``-fused
  ``bias_swiglu_impl``), Megatron's unfused vocab-parallel cross-entropy.

Rows are bf16 or fp32; bandwidth is per byte, so a curve serves every dtype.

A GPU without rows takes the curves of the nearest GPU with rows (the distance of
:func:`.calibration.calibrated_as`), their plateaus scaled by the ratio of the two GPUs'
STREAM-triad fractions (each its own measured row) and their ``x_half`` scaled by the two
GPUs' HBM bandwidths, so the ramp's seconds are kept (the first loads' latency; the bytes in
flight it stands for scale with the bandwidth, Little's law) — a transfer, said in ``source``. The ``check`` rows test the byte counts and kernel counts of other
implementations with the fitted curves (tests/test_memory_bandwidth.py).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import numpy as np

from ..hardware.datasheets import datasheet
from ..hardware.gpus import GPUS, get_gpu
from .kernel_impls import GENERIC, IMPLS, TUNED, Impl
from .memory_model import DTYPE_BYTES

MEMORY_CSV = Path(__file__).resolve().parent.parent / "data" / "memory_kernel_measurements.csv"
#: backward kernel times of the same benchmark (checks of the backward kernels' bytes)
BACKWARD_CSV = MEMORY_CSV.with_name("memory_kernel_backward_measurements.csv")
#: measured kernel → the op of :data:`.kernel_impls.IMPLS` whose implementations it runs
KERNEL_OPS = {
    "rmsnorm": "norm",
    "layernorm": "norm",
    "swiglu": "gated_act",
    "relu_squared": "act",
    "rope": "rope",
    "cross_entropy": "cross_entropy",
}

#: (rms of the relative time error over a set of rows, largest error of any row): a
#: ``calibrate`` set is one GPU's rows of one kind, a ``check`` set one GPU's check rows.
#: Tuned (Triton) kernels follow one curve within the benchmark's own scatter; the generic
#: kind gathers different PyTorch kernels (native norms, fp32 chains, strided and broadcast
#: elementwise ops) around one curve, each ±25 %; checks as the GEMM checks
#: (:data:`.calibration.TOLERANCE`)
TOLERANCE = {"tuned": (0.08, 0.15), "generic": (0.25, 0.50), "check": (0.30, 0.60)}


@dataclass(frozen=True)
class BandwidthCurve:
    """Achieved HBM bandwidth of a memory-bound kernel (module doc): the plateau fraction
    ``frac_max`` of the datasheet bandwidth, reached half-way by a kernel of ``bytes_half``."""

    frac_max: float
    bytes_half: float
    source: str = ""

    def seconds(self, nbytes: float, hbm: float) -> float:
        """Seconds one kernel moving ``nbytes`` spends on HBM traffic (launch not included)."""
        return (nbytes + self.bytes_half) / (hbm * self.frac_max)

    def fraction(self, nbytes: float, hbm: float) -> float:
        """The fraction of ``hbm`` a kernel moving ``nbytes`` achieves (launch not included)."""
        return nbytes / (hbm * self.seconds(nbytes, hbm))


@dataclass(frozen=True)
class MemoryCurves:
    """A GPU's two curves, by kernel kind (module doc)."""

    tuned: BandwidthCurve
    generic: BandwidthCurve

    def of(self, kind: str) -> BandwidthCurve:
        """The curve of kernels of ``kind`` (``tuned`` or ``generic``)."""
        return self.generic if kind == GENERIC else self.tuned


@dataclass(frozen=True)
class MemoryRow:
    """One kernel-level measurement: ``rows`` × ``cols`` elements of ``dtype`` through one
    implementation (``impl`` of :data:`.kernel_impls.IMPLS`) of ``kernel``, forward (``bwd``:
    its backward kernels, the rows of :data:`BACKWARD_CSV`)."""

    gpu: str
    kernel: str
    impl: str
    dtype: str
    rows: int
    cols: int
    time_us: float
    role: str
    source: str
    note: str
    bwd: bool = False

    @property
    def implementation(self) -> Impl:
        return IMPLS[KERNEL_OPS[self.kernel]][self.impl]

    def kernels(self) -> list[tuple[float, str]]:
        """(HBM bytes, kind) of each kernel of the row's implementation, in its direction."""
        fwd, bwd = self.implementation.bytes(DTYPE_BYTES[self.dtype])
        return [(b * self.rows * self.cols, kind) for b, kind in (bwd if self.bwd else fwd)]

    @property
    def kind(self) -> str:
        """``generic`` when any of its kernels is, else ``tuned``: the curve it calibrates."""
        return GENERIC if any(kind == GENERIC for _, kind in self.kernels()) else TUNED


@cache
def memory_rows() -> tuple[MemoryRow, ...]:
    """The rows of ``memory_kernel_measurements.csv`` (read once)."""
    return _read(MEMORY_CSV, bwd=False)


@cache
def backward_rows() -> tuple[MemoryRow, ...]:
    """The backward rows of :data:`BACKWARD_CSV` (read once): ``check`` rows, never fitted."""
    return _read(BACKWARD_CSV, bwd=True)


def _read(path: Path, bwd: bool) -> tuple[MemoryRow, ...]:
    with path.open() as fh:
        return tuple(
            MemoryRow(
                r["gpu"],
                r["kernel"],
                r["impl"],
                r["dtype"],
                int(r["rows"]),
                int(r["cols"]),
                float(r["time_us"]),
                r["role"],
                r["source"],
                r["note"],
                bwd,
            )
            for r in csv.DictReader(fh)
        )


def measured_gpus() -> list[str]:
    """GPUs with ``calibrate`` rows, in table order."""
    return list(dict.fromkeys(r.gpu for r in memory_rows() if r.role == "calibrate"))


def _launch(gpu: str) -> float:
    from .calibration import calibration  # calibration imports the cost model, which imports this

    return calibration(gpu).dense16.launch_s


def predicted_us(row: MemoryRow, curves: MemoryCurves, launch_s: float | None = None) -> float:
    """The model's time of ``row`` (µs): each kernel of its implementation launched and
    priced by the curve of its kind on the row's GPU (``launch_s`` None: the GPU's
    calibrated launch)."""
    launch = _launch(row.gpu) if launch_s is None else launch_s
    hbm = get_gpu(row.gpu).hbm_bandwidth
    return 1e6 * sum(launch + curves.of(kind).seconds(b, hbm) for b, kind in row.kernels())


def _fit(rows: list[MemoryRow], launch: float, curves) -> BandwidthCurve:
    """One curve fitted to ``rows`` (``curves(curve)``: the MemoryCurves a trial curve makes)."""
    from .calibration import _lm  # the same Levenberg–Marquardt as the GEMM fit

    measured = np.log([r.time_us for r in rows])

    def residuals(x: np.ndarray) -> np.ndarray:
        both = curves(BandwidthCurve(math.exp(x[0]), math.exp(x[1])))
        return np.log([predicted_us(r, both, launch) for r in rows]) - measured

    x = _lm(residuals, [math.log(0.8), math.log(1e7)])
    return BandwidthCurve(math.exp(x[0]), math.exp(x[1]))


def fit_curves(gpu: str) -> MemoryCurves:
    """``gpu``'s curves fitted to its ``calibrate`` rows (module doc): the tuned curve to the
    rows whose kernels are all tuned, then the generic curve to the others, their tuned
    kernels priced at the tuned curve."""
    rows = [r for r in memory_rows() if r.gpu == gpu and r.role == "calibrate"]
    launch = _launch(gpu)
    source = f"fitted: {gpu} %s memory-bound kernel rows (memory_kernel_measurements.csv)"
    tuned = _fit([r for r in rows if r.kind == TUNED], launch, lambda c: MemoryCurves(c, c))
    tuned = replace(tuned, source=source % TUNED)
    generic = _fit([r for r in rows if r.kind == GENERIC], launch, lambda c: MemoryCurves(tuned, c))
    return MemoryCurves(tuned, replace(generic, source=source % GENERIC))


def _triad(gpu: str) -> float:
    from .calibration import calibration

    return calibration(gpu).dense16.memory


@cache
def memory_curves(gpu: str) -> MemoryCurves:
    """The curves of calibrated GPU ``gpu`` (a plan of :data:`.calibration.CALIBRATIONS`):
    its own fits, or the nearest measured GPU's, transferred (module doc)."""
    if gpu in measured_gpus():
        return fit_curves(gpu)
    own = datasheet(gpu)

    def distance(other: str) -> float:
        sheet = datasheet(other)
        return abs(math.log(own.dense16_flops / sheet.dense16_flops)) + abs(
            math.log(own.hbm_bandwidth / sheet.hbm_bandwidth)
        )

    donor = min(measured_gpus(), key=distance)
    scale = _triad(gpu) / _triad(donor)
    source = f"{gpu} (transfer) {donor}'s curve, plateau scaled by the two GPUs' STREAM-triad fractions"

    ratio = datasheet(gpu).hbm_bandwidth / datasheet(donor).hbm_bandwidth

    def moved(base: BandwidthCurve) -> BandwidthCurve:  # the ramp's seconds kept (memory_curves_for)
        return BandwidthCurve(base.frac_max * scale, base.bytes_half * ratio, source)

    own = memory_curves(donor)
    return MemoryCurves(moved(own.tuned), moved(own.generic))


def memory_curves_for(gpu: str) -> MemoryCurves | None:
    """The curves a cost model of ``gpu`` prices memory-bound kernels with: those of the
    calibrated GPU it is priced as (:func:`.calibration.calibrated_as`), their ramp
    ``bytes_half`` scaled by the two GPUs' HBM bandwidths — the ramp is the time the first
    loads take to arrive, so the bytes in flight it stands for scale with the bandwidth
    (Little's law) and its seconds stay the donor's; None for a GPU not in the catalog (the
    STREAM-triad fraction of its efficiencies alone)."""
    from .calibration import calibrated_as

    if gpu not in GPUS:
        return None
    donor = calibrated_as(gpu)
    curves = memory_curves(donor)
    if donor == gpu:
        return curves
    ratio = get_gpu(gpu).hbm_bandwidth / get_gpu(donor).hbm_bandwidth

    def moved(base: BandwidthCurve) -> BandwidthCurve:
        return replace(base, bytes_half=base.bytes_half * ratio)

    return MemoryCurves(moved(curves.tuned), moved(curves.generic))
