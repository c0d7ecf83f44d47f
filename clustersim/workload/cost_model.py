"""Compute cost model: seconds of one kernel on one GPU, a roofline with shape-aware efficiency.

    time = max(FLOPs / (peak × matmul_eff(M, N, K)), bytes / (HBM × memory_eff)) + launch

``matmul_eff`` (:func:`matmul_efficiency`) is what a GEMM's shape lets the tensor cores do:

    matmul_eff = matmul_max · M/(M + dim_half) · N/(N + dim_half) · max over tile, split of
                 [waves(M, N, split) · K'/(K' + k_half)],  K' = K/split

* ``waves``: the M×N output is cut into tiles (:data:`TILES`, the CTA tiles cuBLAS and
  CUTLASS pick from on Ampere, Hopper and Blackwell); the tiles run in waves of one tile per
  SM, and the last, partial wave leaves the rest of the SMs idle — the fraction of the
  launched tile-slots that holds useful output, ``M·N / (⌈tiles/SMs⌉ · SMs · tm·tn)`` (a
  batched product multiplies the tiles by its batch count). A grid too small to fill the
  SMs is split along K (split-K, :data:`SPLITS`): more work units, each a shorter K. The
  best tile and split is taken, with the K term below evaluated at K/split;
* ``dim_half`` on M and N: a small tile grid underfills each SM's pipeline;
* ``k_half`` on K: each tile pays a fixed prologue/epilogue (loading the first stages,
  writing the output), amortised over its K loop, so a short K runs below the large-K rate;
* a skinny M (few tokens) is memory-bound: the roofline's bytes decide it.

Kernels without a GEMM shape are memory-bound (FLOPs ignored), priced at the achieved
bandwidth of :mod:`.memory_bandwidth` for the bytes they move. A fused attention kernel
takes the efficiency of :meth:`CostModel.attention_efficiency` in place of ``matmul_eff``;
an FP8 GEMM is priced by :mod:`.fp8` (FP8 peak, its own calibrated efficiency, casts).

ONE set of efficiencies per GPU type and dtype, fitted to kernel-level measurements only
(:mod:`.calibration`: A100, Hopper, Blackwell, MI300X); another catalog GPU borrows the set of
the nearest calibrated one (a transfer, said in ``source`` and a warning). A :class:`ProfileTable` of measured op times overrides the model for the ops it
lists.
"""

from __future__ import annotations

import csv
import io
import math
import warnings
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CalibrationTransfer, ScenarioError, shorten
from ..hardware.gpus import GPUS, GPUSpec, get_gpu
from ..reader import read_text
from .attention_kernels import AttentionCurve, pick
from .ops import AttentionShape, Work

if TYPE_CHECKING:
    from .memory_bandwidth import MemoryCurves


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of a GPU's peaks, and the per-kernel launch overhead (s):
    ``matmul_max`` the best GEMM fraction, ``dim_half`` and ``k_half`` the shape constants
    and ``sms`` the SM count of :func:`matmul_efficiency` (``k_half`` 0: no K term; ``sms``
    0: no wave quantization), ``memory`` the fraction of HBM bandwidth a memory-bound
    kernel reaches."""

    matmul_max: float
    dim_half: float
    memory: float
    launch_s: float
    source: str = ""
    k_half: float = 0.0
    sms: int = 0


#: (rows, columns) of the output tiles a GEMM library picks from: CUTLASS's and cuBLAS's
#: common CTA tiles on Ampere (sm_80) and Hopper (sm_90, ``128x128``/``128x256``/``256x128``
#: warp-specialized kernels); Blackwell's 2-SM 256-wide tiles split as two of these
TILES = ((128, 128), (128, 256), (256, 128))
#: how many slices a library may cut K into when the tile grid underfills the SMs
#: (cuBLAS split-K; each slice pays its own prologue/epilogue through the K term)
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)


def efficiency_for(gpu: str) -> Efficiency:
    """The efficiency set of ``gpu``: its kernel-level calibration (:mod:`.calibration`);
    for another catalog GPU (a row without kernel measurements) the set of the nearest
    calibrated GPU (:func:`.calibration.calibrated_as`) on its own SM count, said in
    ``source`` and in a :class:`~clustersim.errors.CalibrationTransfer` warning; else (a
    custom GPU like no catalog GPU) A100 80GB's without wave quantization (no SM count),
    flagged as uncalibrated."""
    # calibration imports this module: resolve at call time
    from .calibration import CALIBRATIONS, FALLBACK_GPU, calibrated_as, calibration, sm_count

    if gpu in CALIBRATIONS:
        return calibration(gpu).dense16
    if gpu not in GPUS:
        source = f"{gpu}: A100 fractions reused, not calibrated on {gpu} measurements"
        return replace(calibration(FALLBACK_GPU).dense16, sms=sm_count(gpu), source=source)
    donor = calibrated_as(gpu)
    note = (
        f"has no kernel measurements of its own: priced with {donor}'s efficiencies (the nearest "
        "calibrated GPU) as fractions of its own datasheet peaks"
    )
    warnings.warn(CalibrationTransfer("cluster.gpu", gpu, note), stacklevel=3)
    # the donor's constants; wave quantization runs over this GPU's own SMs
    return replace(calibration(donor).dense16, sms=sm_count(gpu), source=f"{gpu} (transfer) {note}")


@lru_cache(maxsize=65536)
def matmul_efficiency(eff: Efficiency, gemm: tuple[int, int, int], batch: int = 1) -> float:
    """Fraction of peak ``batch`` GEMMs of shape (M, N, K) reach in one kernel (module doc):
    the best tile of :data:`TILES` and split of K into :data:`SPLITS` slices."""
    m, n, k = gemm
    dims = eff.matmul_max * m / (m + eff.dim_half) * n / (n + eff.dim_half)
    if eff.sms <= 0:
        return dims * _k_term(eff, k)
    return dims * _best_grid(eff, gemm, batch)[0]


def grid_units(eff: Efficiency, gemm: tuple[int, int, int], batch: int = 1) -> int:
    """Work units (tiles × K slices: the CTAs) of the grid :func:`matmul_efficiency` picks
    for ``batch`` GEMMs of shape (M, N, K) on ``eff.sms`` SMs (which must be > 0)."""
    return _best_grid(eff, gemm, batch)[1]


def _best_grid(eff: Efficiency, gemm: tuple[int, int, int], batch: int) -> tuple[float, int]:
    """(wave utilization × K term, work units) of the best tile and split on ``eff.sms``."""
    m, n, k = gemm
    best, units = 0.0, 0
    for tm, tn in TILES:
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
        for split in SPLITS:
            # split slices of every tile run as tiles·split work units in waves of sms
            waves = math.ceil(tiles * split / eff.sms)
            util = m * n * batch * split / (waves * eff.sms * tm * tn)
            value = util * _k_term(eff, k / split)
            if value > best:
                best, units = value, tiles * split
            if tiles * split >= eff.sms:
                break  # more slices only add prologues: the grid already fills the SMs
    return best, units


def _k_term(eff: Efficiency, k: float) -> float:
    return k / (k + eff.k_half) if eff.k_half > 0 else 1.0


def shape_efficiency(eff: Efficiency, gemm: tuple[int, int, int]) -> float:
    """Fraction of peak of a GEMM of shape (M, N, K) without wave quantization:
    ``matmul_max`` times the M, N and K terms of the module doc."""
    return matmul_efficiency(replace(eff, sms=0), gemm)


def gemm_batch(work: Work) -> int:
    """How many M×N×K products one kernel of ``work`` runs (a batched product's FLOPs are
    its batch count times 2·M·N·K; at least 1; 1 where its products run as kernels of
    their own, :attr:`~.ops.Work.shared_waves`)."""
    m, n, k = work.gemm
    if not work.shared_waves:
        return 1
    return max(1, round(work.flops / (2.0 * m * n * k))) if m * n * k > 0 else 1


@dataclass
class ProfileTable:
    """Measured kernel times that override the model: (op, phase, shape) → seconds.

    CSV columns: ``op`` (an op name such as ``qkv``, ``softmax``), ``phase`` (F, B or W),
    optional ``m,n,k`` (a GEMM shape; blank matches any shape) and ``time_us``.
    """

    times: dict[tuple[str, str, tuple | None], float] = field(default_factory=dict)

    @classmethod
    def read(cls, path: str | Path) -> ProfileTable:
        """The table of CSV file ``path``, read through the input boundary (size cap,
        UTF-8); a bad row names its line and shows its cells bounded."""
        reader = csv.DictReader(io.StringIO(read_text(path, "model.profile")))
        table = cls()
        try:
            for row in reader:
                shape = tuple(int(row[c]) for c in "mnk") if row.get("m") else None
                time_us = float(row["time_us"])
                if not 0 <= time_us < math.inf:
                    raise ValueError(f"time_us {time_us} is not a finite time ≥ 0")
                table.times[(row["op"], row["phase"], shape)] = time_us * 1e-6
        except (KeyError, ValueError, TypeError, csv.Error) as exc:
            raise ScenarioError(
                "model.profile",
                str(path),
                f"row {reader.line_num}: expected op,phase,m,n,k,time_us ({shorten(str(exc), 160)})",
            ) from None
        return table

    def lookup(self, op: str, phase: str, gemm: tuple | None) -> float | None:
        t = self.times.get((op, phase, tuple(gemm) if gemm else None))
        return t if t is not None else self.times.get((op, phase, None))


def attention_curves_for(gpu: str) -> tuple[AttentionCurve, ...]:
    """The calibrated fused attention curves of ``gpu`` (one per kernel with rows,
    :mod:`.attention_kernels`), or of the GPU it is priced as
    (:func:`.calibration.calibrated_as`); none where that GPU has no attention rows or
    ``gpu`` is not in the catalog."""
    # calibration imports this module: resolve at call time
    from .calibration import CALIBRATIONS, calibrated_as, calibration

    donor = calibrated_as(gpu) if gpu in GPUS else gpu
    return calibration(donor).attention if donor in CALIBRATIONS else ()


@dataclass(frozen=True)
class CostModel:
    """Seconds per kernel on one GPU type, with an optional profile table, the GPU's
    calibrated fused attention curves (:class:`~.attention_kernels.AttentionCurve`, one per
    kernel) and its memory-bound kernels' achieved bandwidth by kind
    (:class:`~.memory_bandwidth.MemoryCurves`; None: the STREAM-triad fraction ``eff.memory``)
    and the scenario's host (:mod:`.host_kernels`); ``nccl_ctas``: the SMs a NCCL collective beside
    the kernels holds, where they are priced per kernel beside it (:mod:`.comm_interference`; 0: not);
    ``deepep_sms``: the same for a DeepEP dispatch or combine."""

    gpu: GPUSpec
    eff: Efficiency
    profile: ProfileTable | None = None
    attention: tuple[AttentionCurve, ...] = ()
    bandwidth: MemoryCurves | None = None
    #: what the host spends issuing each op and the framework's extra small kernels
    #: (:class:`~.host_kernels.HostModel`; None: the pass's per-kernel dispatch, no extras)
    host: object = None
    nccl_ctas: int = 0
    deepep_sms: int = 0

    @classmethod
    def for_gpu(cls, name: str, profile: ProfileTable | None = None, custom=None) -> CostModel:
        """The cost model of GPU ``name``; ``custom``: the scenario's custom GPU
        (``cluster.custom_gpu``), priced with the efficiencies of the GPU it is ``like``."""
        from .memory_bandwidth import memory_curves_for  # imports calibration: resolve at call time

        if custom is not None and custom.name == name:
            like = custom.like or name  # an unknown name: A100's fractions, flagged
            eff = efficiency_for(like)
            eff = replace(eff, sms=custom.sms) if custom.sms else eff
            return cls(custom.spec(), eff, profile, attention_curves_for(like), memory_curves_for(like))
        return cls(
            get_gpu(name), efficiency_for(name), profile, attention_curves_for(name), memory_curves_for(name)
        )

    def attention_efficiency(self, shape: AttentionShape) -> float:
        """Fraction of peak of a fused attention kernel: the calibrated curve of the kernel
        ``shape.impl`` names (or the one it falls back to, :func:`.attention_kernels.pick`)
        over direction, head dim, sequence length and mask; elsewhere the GPU's GEMM
        efficiency at the kernel's per-head product shape (s', s', head_dim), s' = s/2
        when causal, without wave quantization (the kernel's grid spans batch × heads ×
        query tiles, many waves) — the curve's own rule that a causal kernel runs as the unmasked
        one at half the sequence. The fallback gives both directions the same
        efficiency, though FlashAttention-2 (Dao 2023) reaches a lower fraction of peak
        backward than forward, so it is optimistic for the backward."""
        curve = pick(self.attention, shape.impl)
        if curve is not None:
            return curve.efficiency(shape.head_dim, shape.seq_len, shape.backward, shape.causal)
        s = shape.seq_len // 2 if shape.causal else shape.seq_len
        return shape_efficiency(self.eff, (s, s, shape.head_dim))

    def time(self, work: Work, op: str = "", phase: str = "") -> float:
        """Seconds of ``work`` (0 for no work); a profiled (op, phase) wins."""
        if work.flops == 0 and work.bytes == 0:
            return 0.0
        if self.profile is not None:
            t = self.profile.lookup(op, phase, work.gemm)
            if t is not None:
                return t
        if work.fp8_casts is not None:
            from .fp8 import fp8_gemm_time  # imports this module: resolve at call time

            return fp8_gemm_time(
                self.gpu.name,
                *work.gemm,
                list(work.fp8_casts),
                recipe=work.fp8_recipe,
                norm_casts=list(work.fp8_norm_casts),
            ).total_s
        if work.gemm is None and work.attention is None:
            return self.memory_seconds(work.bytes, work.memory_kind) + self.eff.launch_s
        mem = work.bytes / (self.gpu.hbm_bandwidth * self.eff.memory)
        if work.attention is not None:
            comp = work.flops / (self.gpu.peak_flops * self.attention_efficiency(work.attention))
            return max(comp, mem) + self.eff.launch_s
        comp = work.flops / (self.gpu.peak_flops * matmul_efficiency(self.eff, work.gemm, gemm_batch(work)))
        return max(comp, mem) + self.eff.launch_s

    def launched(self, work: Work, op: str = "", phase: str = "") -> int:
        """1 if :meth:`time` charges ``work`` the per-kernel launch ``eff.launch_s`` — a
        roofline kernel — else 0: no work, a profiled time (measured whole) or an FP8 GEMM
        (:mod:`.fp8` prices its casts and launches itself)."""
        if (work.flops == 0 and work.bytes == 0) or work.fp8_casts is not None:
            return 0
        if self.profile is not None and self.profile.lookup(op, phase, work.gemm) is not None:
            return 0
        return 1

    def issued(self, work: Work) -> int:
        """Kernels the host issues for ``work`` (:mod:`.host`): none for no work; an FP8
        GEMM's own and one per cast it feeds (:func:`.fp8.fp8_gemm_time`'s delayed
        scaling: one cast kernel per tensor); else one — a profiled op too."""
        if work.flops == 0 and work.bytes == 0:
            return 0
        return 1 + len(work.fp8_casts) + len(work.fp8_norm_casts) if work.fp8_casts is not None else 1

    def without_launch(self) -> CostModel:
        """This model with ``launch_s`` 0: kernels whose launch the Program charges as an
        op of its own (:func:`.segments.launch_op`)."""
        return replace(self, eff=replace(self.eff, launch_s=0.0))

    def memory_seconds(self, nbytes: float, kind: str = "tuned") -> float:
        """HBM time of one memory-bound kernel of ``kind`` moving ``nbytes`` (no launch): at
        the achieved bandwidth of :attr:`bandwidth` (:mod:`.memory_bandwidth`), else the
        triad fraction."""
        if self.bandwidth is None:
            return nbytes / (self.gpu.hbm_bandwidth * self.eff.memory)
        return self.bandwidth.of(kind).seconds(nbytes, self.gpu.hbm_bandwidth)

    def memory_pass(self, nbytes: float) -> float:
        """One memory-bound multi-tensor kernel over ``nbytes`` of HBM traffic (0 for none)."""
        if nbytes <= 0:
            return 0.0
        return self.memory_seconds(nbytes) + self.eff.launch_s

    def optimizer_time(self, params: float, bytes_per_param: float = 32.0) -> float:
        """Adam step: memory-bound over the fp32 master weights, m, v (read+write), the
        gradient (read) and the 16-bit weight copy (write): 4·2·3 + 4 + 4 = 32 bytes/param
        (Megatron's fused multi-tensor Adam)."""
        return self.memory_pass(params * bytes_per_param)
