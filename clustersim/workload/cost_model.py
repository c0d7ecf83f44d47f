"""Compute cost model: seconds of one kernel on one GPU, a roofline with shape-aware efficiency.

    time = max(FLOPs / (peak × matmul_eff(M, N, K)), bytes / (HBM × memory_eff)) + launch

``matmul_eff(M, N, K) = matmul_max × Π_d d / (d + dim_half)`` over the three GEMM
dimensions: a large GEMM approaches ``matmul_max``; a thin one (the s×s×d attention
products, small hidden sizes, micro-batch 1 logits) loses efficiency, as cuBLAS tiles
underfill. Kernels without a GEMM shape are memory-bound (FLOPs ignored). A fused
attention kernel takes the efficiency of :meth:`CostModel.attention_efficiency` in place
of ``matmul_eff``; an FP8 GEMM is priced by :mod:`.fp8` (FP8 peak, casts).

ONE set of efficiencies per GPU type. A100's is calibrated on a single measurement —
one 22B-model layer at TP=8 (Korthikanti et al. 2022 Table 4: forward 7.7 ms, backward
11.9 ms, including its TP all-reduces) — and then validated, unchanged, on Megatron's
Table 1 (see docs/validation.md). Hopper, Blackwell and MI300X are calibrated on
published kernel-level measurements (:mod:`.calibration`); another catalog GPU borrows the
efficiencies of the nearest calibrated one (a transfer, said in ``source`` and a warning). A :class:`ProfileTable` of measured op times overrides the model
for the ops it lists.
"""

from __future__ import annotations

import csv
import io
import math
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CalibrationTransfer, ScenarioError, shorten
from ..hardware.gpus import GPUS, GPUSpec, get_gpu
from ..reader import read_text
from .ops import AttentionShape, Work

if TYPE_CHECKING:
    from .calibration import AttentionCurve


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of a GPU's peaks, and the per-kernel launch overhead (s)."""

    matmul_max: float
    dim_half: float
    memory: float
    launch_s: float
    source: str = ""


#: A100: ``matmul_max`` and ``memory`` are the two numbers solved so the 22B layer's
#: forward and backward (with TP all-reduces on the dgx_a100 preset, NCCL protocols
#: included) match Korthikanti 2022 Table 4's baseline row (7.7 / 11.9 ms); the table's
#: other rows (sequence parallel, selective and full recompute) are then checks, not fits.
#: The solve is the best pair on a 0.01 grid (the two equations are nearly collinear, so
#: nearby pairs fit almost as well); re-solved when the TP all-reduce cost became NCCL's
#: size-dependent one (it was 0.82 / 0.63 with Simple-only collectives, which made the
#: 96 MiB all-reduces ~30 % too fast). ``memory`` 0.69 is what Megatron's (partly
#: unfused, 2021) elementwise kernels achieve — below a STREAM triad's ~0.85 of 2.04 TB/s. ``dim_half`` 24: cuBLAS tiles are 64–256 wide, so a GEMM
#: dimension of 128 (a head) runs at ~84 % of a large one — an assumption, not a fit.
#: ``launch_s`` 4 µs: CUDA launch + PyTorch eager dispatch per kernel (~3–5 µs).
A100_EFFICIENCY = Efficiency(
    matmul_max=0.86,
    dim_half=24.0,
    memory=0.69,
    launch_s=4e-6,
    source="calibrated: Korthikanti et al. 2022 Table 4 (one 22B layer on A100, TP=8)",
)

EFFICIENCY: dict[str, Efficiency] = {
    "A100-SXM4-80GB": A100_EFFICIENCY,
    "A100-SXM4-40GB": A100_EFFICIENCY,
}


def efficiency_for(gpu: str) -> Efficiency:
    """The efficiency set of ``gpu``: A100's validated point, the kernel-level calibration
    of :mod:`.calibration` for the GPUs it covers; for another catalog GPU (a row without
    kernel measurements) the set of the nearest calibrated GPU
    (:func:`.calibration.calibrated_as`), said in ``source`` and in a
    :class:`~clustersim.errors.CalibrationTransfer` warning; else (a custom GPU like no
    catalog GPU) A100's, flagged as uncalibrated."""
    if gpu in EFFICIENCY:
        return EFFICIENCY[gpu]
    # calibration imports this module: resolve at call time
    from .calibration import CALIBRATIONS, calibrated_as, calibration

    if gpu in CALIBRATIONS:
        return calibration(gpu).dense16
    if gpu in GPUS:
        donor = calibrated_as(gpu)
        note = (
            f"has no kernel measurements of its own: priced with {donor}'s efficiencies (the nearest "
            "calibrated GPU) as fractions of its own datasheet peaks"
        )
        warnings.warn(CalibrationTransfer("cluster.gpu", gpu, note), stacklevel=3)
        return replace(efficiency_for(donor), source=f"{gpu} (transfer) {note}")
    a = A100_EFFICIENCY
    return Efficiency(
        a.matmul_max,
        a.dim_half,
        a.memory,
        a.launch_s,
        source=f"{gpu}: A100 fractions reused, not calibrated on {gpu} measurements",
    )


def matmul_efficiency(eff: Efficiency, gemm: tuple[int, int, int]) -> float:
    """Fraction of peak a GEMM of shape (M, N, K) reaches."""
    out = eff.matmul_max
    for d in gemm:
        out *= d / (d + eff.dim_half)
    return out


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


def attention_curve_for(gpu: str) -> AttentionCurve | None:
    """The calibrated FlashAttention curve of ``gpu``, or of the GPU it is priced as
    (:func:`.calibration.calibrated_as`), or None where that GPU's data has none (only
    Hopper has FA3 tables: H100, H200, H800) or ``gpu`` is not in the catalog."""
    # calibration imports this module: resolve at call time
    from .calibration import CALIBRATIONS, calibrated_as, calibration

    donor = calibrated_as(gpu) if gpu in GPUS else gpu
    return calibration(donor).attention if donor in CALIBRATIONS else None


@dataclass(frozen=True)
class CostModel:
    """Seconds per kernel on one GPU type, with an optional profile table and the GPU's
    calibrated attention curve (an :class:`~.calibration.AttentionCurve`, or None)."""

    gpu: GPUSpec
    eff: Efficiency
    profile: ProfileTable | None = None
    attention: AttentionCurve | None = None

    @classmethod
    def for_gpu(cls, name: str, profile: ProfileTable | None = None, custom=None) -> CostModel:
        """The cost model of GPU ``name``; ``custom``: the scenario's custom GPU
        (``cluster.custom_gpu``), priced with the efficiencies of the GPU it is ``like``."""
        if custom is not None and custom.name == name:
            like = custom.like or name  # an unknown name: A100's fractions, flagged
            return cls(custom.spec(), efficiency_for(like), profile, attention_curve_for(like))
        return cls(get_gpu(name), efficiency_for(name), profile, attention_curve_for(name))

    def attention_efficiency(self, shape: AttentionShape) -> float:
        """Fraction of peak of a fused attention kernel: the GPU's calibrated curve over
        head dim and sequence length where it has one; elsewhere the GPU's GEMM
        efficiency at the kernel's per-head product shape (s', s', head_dim), s' = s/2
        when causal — the curve's own rule that a causal kernel runs as the unmasked
        one at half the sequence. The fallback gives both directions the same
        efficiency, though FlashAttention-2 (Dao 2023) reaches a lower fraction of peak
        backward than forward, so it is optimistic for the backward."""
        if self.attention is not None:
            return self.attention.efficiency(shape.head_dim, shape.seq_len, shape.backward, shape.causal)
        s = shape.seq_len // 2 if shape.causal else shape.seq_len
        return matmul_efficiency(self.eff, (s, s, shape.head_dim))

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

            return fp8_gemm_time(self.gpu.name, *work.gemm, list(work.fp8_casts)).total_s
        mem = work.bytes / (self.gpu.hbm_bandwidth * self.eff.memory)
        if work.attention is not None:
            comp = work.flops / (self.gpu.peak_flops * self.attention_efficiency(work.attention))
            return max(comp, mem) + self.eff.launch_s
        if work.gemm is None:
            return mem + self.eff.launch_s
        comp = work.flops / (self.gpu.peak_flops * matmul_efficiency(self.eff, work.gemm))
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

    def without_launch(self) -> CostModel:
        """This model with ``launch_s`` 0: kernels whose launch the Program charges as an
        op of its own (:func:`.segments.launch_items`)."""
        return replace(self, eff=replace(self.eff, launch_s=0.0))

    def memory_pass(self, nbytes: float) -> float:
        """One memory-bound multi-tensor kernel over ``nbytes`` of HBM traffic (0 for none)."""
        if nbytes <= 0:
            return 0.0
        return nbytes / (self.gpu.hbm_bandwidth * self.eff.memory) + self.eff.launch_s

    def optimizer_time(self, params: float, bytes_per_param: float = 32.0) -> float:
        """Adam step: memory-bound over the fp32 master weights, m, v (read+write), the
        gradient (read) and the 16-bit weight copy (write): 4·2·3 + 4 + 4 = 32 bytes/param
        (Megatron's fused multi-tensor Adam)."""
        return self.memory_pass(params * bytes_per_param)
