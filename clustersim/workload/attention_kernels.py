"""Fused attention kernels: which one runs, and the fraction of peak it reaches.

Three kernel families are priced, each calibrated per GPU on its own published rows
(``clustersim/data/attention_kernel_measurements.csv``):

* ``fa2`` — FlashAttention-2 (Dao 2023), the ``flash_attn`` package's kernels and PyTorch
  SDPA's FLASH backend; on Hopper it runs without TMA/WGMMA (about 0.6× FA3);
* ``fa3`` — FlashAttention-3 (Shah et al. 2024), Hopper only;
* ``cudnn`` — cuDNN's fused attention, what Transformer Engine's ``DotProductAttention``
  runs on Hopper and Blackwell.

The efficiency of one kernel (fraction of the dense 16-bit peak) is, per direction,

    eff = a_max · g(hd) · s'/(s' + s_half),   s' = s / c with a causal mask, else s

with the forward and backward each their own ``a_max`` (the rate at head dim 128),
``s_half`` and ``g``, the head dim's factor: 1 at 128, fitted at 64 per direction and at
256 (shared: no backward row has hd 256), linear in log₂ hd between and held at the ends
outside (the rows are not monotonic in hd: cuDNN
and FA2 run hd 256 no faster than 128 on H100, FA3 does); and ``c`` the causal mask's
sequence factor: the kernel skips the masked tiles (its FLOPs
are counted once, halved), and what is left runs at the rate the causal rows show — about
the unmasked kernel's at ``s/c``, fitted (``c`` = 2 would be "the unmasked kernel at half
the sequence"). A row of the fused forward+backward (FlashAttention-2's Fig. 4) is
predicted as ``3.5 / (1/eff_fwd + 2.5/eff_bwd)`` (backward FLOPs = 2.5 × forward).

Fitting: least squares on log throughput over one (GPU, kernel) set's rows (forward,
backward, forward+backward, both masks, head dims 64–256, 512–16k tokens), with weak
priors — backward ``s_half`` and ``g`` = the forward's, ``c`` = 2, ``g`` = 1 — at a tenth of
one row's weight, which decide only what the rows leave open (A100 has forward+backward
sweeps and one forward and one backward point, no hd 256). The causal factor is shared by
both directions: the FA3 paper has no causal backward, A100's causal forward+backward
rows set it there. A set too small to give a shape (fewer than three sequence lengths:
B200's two "up to" numbers) takes ``s_half``, ``g`` and ``c`` from the same kernel on the
plan's shape donor and fits only the two maxima.

Which kernel a framework runs (:data:`FRAMEWORK_KERNEL`): Transformer Engine gives cuDNN
(``FusedAttention``) preference on Hopper and later ("Disabling FlashAttention to give
FusedAttention preference on Hopper+ for performance reasons",
transformer_engine/pytorch/attention/dot_product_attention/utils.py,
``get_attention_backend``) and runs FlashAttention below; torchtitan calls SDPA with the
priority ``CUDNN_ATTENTION, FLASH_ATTENTION, EFFICIENT_ATTENTION, MATH``
(torchtitan/models/attention.py, ``ScaledDotProductAttentionWrapper``); Megatron-LM's
``--use-flash-attn`` imports the ``flash_attn`` package (FA2). A kernel the GPU has no rows
for falls back along :data:`FALLBACK` — cuDNN and FA3 to FA2 (A100: TE and SDPA run FA2
below sm90; FA3 is Hopper-only) — and past its end to the GEMM-shaped estimate of
:meth:`.cost_model.CostModel.attention_efficiency`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .least_squares import levenberg_marquardt

#: the fused kernels priced (the values of ``model.attention_kernel``)
KERNELS = ("fa2", "fa3", "cudnn")
#: the kernel the profiles that run flash attention fill in, where the GPU has it (else
#: :data:`FALLBACK`); the others leave ``model.attention`` and the kernel (``fa2``) as stated
FRAMEWORK_KERNEL = {"megatron_core": "cudnn", "fsdp2": "cudnn"}
#: kernel → the kernels tried in order on a GPU (the first with a curve runs)
FALLBACK = {"fa2": ("fa2",), "fa3": ("fa3", "fa2"), "cudnn": ("cudnn", "fa2")}
#: backward FLOPs over forward FLOPs (five s²·d products against two)
BACKWARD_FACTOR = 2.5
#: weight of each prior residual against one row's (log-throughput) residual
PRIOR_WEIGHT = 0.1
#: the sequence factor of a causal mask where the rows say nothing else
CAUSAL_PRIOR = 2.0


@dataclass(frozen=True)
class AttentionCurve:
    """One fused attention kernel's efficiency on one GPU (module doc)."""

    impl: str
    fwd_max: float
    fwd_s_half: float
    bwd_max: float
    bwd_s_half: float
    hd64: float
    bwd_hd64: float
    hd256: float
    causal_factor: float
    source: str = ""

    def head_dim_factor(self, head_dim: float, backward: bool = False) -> float:
        """``g(hd)``: 1 at 128, ``hd64`` (``bwd_hd64`` backward) at 64, ``hd256`` at 256,
        linear in log₂ hd between, held at the ends outside."""
        x = min(max(math.log2(head_dim), 6.0), 8.0) - 7.0
        end = (self.bwd_hd64 if backward else self.hd64) if x < 0 else self.hd256
        return math.exp(abs(x) * math.log(end))

    def efficiency(self, head_dim: int, seq_len: int, backward: bool = False, causal: bool = False) -> float:
        """Fraction of the dense 16-bit peak of one kernel of ``head_dim`` over ``seq_len``
        keys (FLOPs counted once: halved with a causal mask)."""
        s = seq_len / self.causal_factor if causal else seq_len
        a, sh = (self.bwd_max, self.bwd_s_half) if backward else (self.fwd_max, self.fwd_s_half)
        return a * self.head_dim_factor(head_dim, backward) * s / (s + sh)

    def fwd_bwd_efficiency(self, head_dim: int, seq_len: int, causal: bool = False) -> float:
        """Fraction of peak of a forward and its backward together (FLOP-weighted harmonic mean)."""
        f = self.efficiency(head_dim, seq_len, False, causal)
        b = self.efficiency(head_dim, seq_len, True, causal)
        return (1 + BACKWARD_FACTOR) / (1 / f + BACKWARD_FACTOR / b)

    def predict(self, kernel: str, head_dim: int, seq_len: int, causal: bool) -> float:
        """Fraction of peak for a measurement row's ``kernel`` (``attention_fwd``,
        ``attention_bwd`` or ``attention_fwdbwd``)."""
        if kernel == "attention_fwdbwd":
            return self.fwd_bwd_efficiency(head_dim, seq_len, causal)
        return self.efficiency(head_dim, seq_len, kernel == "attention_bwd", causal)


#: the row kinds an attention curve predicts
ROW_KERNELS = ("attention_fwd", "attention_bwd", "attention_fwdbwd")


def fit_curve(
    rows: Sequence, peak_tflops: float, impl: str, source: str, shape: AttentionCurve | None = None
):
    """The :class:`AttentionCurve` of one (GPU, kernel) set of measurement ``rows``
    (TFLOP/s on a GPU of dense 16-bit peak ``peak_tflops``); with ``shape``, its
    ``s_half``, head dim factors and causal factor are kept and only the maxima fitted."""
    rows = [r for r in rows if r.kernel in ROW_KERNELS]
    has_fwd = any(r.kernel != "attention_bwd" for r in rows)
    has_bwd = any(r.kernel != "attention_fwd" for r in rows)
    if not (has_fwd and has_bwd):
        raise ValueError(f"{impl}: an attention set needs forward and backward rows")
    measured = np.log([r.value / peak_tflops for r in rows])

    def curve(x: np.ndarray) -> AttentionCurve:
        x = np.exp(np.clip(x, -50.0, 50.0))
        if shape is not None:
            return AttentionCurve(
                impl,
                float(x[0]),
                shape.fwd_s_half,
                float(x[1]),
                shape.bwd_s_half,
                shape.hd64,
                shape.bwd_hd64,
                shape.hd256,
                shape.causal_factor,
                source,
            )
        return AttentionCurve(impl, *map(float, x), source=source)

    def residuals(x: np.ndarray) -> np.ndarray:
        c = curve(x)
        pred = np.log([c.predict(r.kernel, r.head_dim, r.seq_len, r.causal) for r in rows]) - measured
        if shape is not None:
            return pred
        priors = [
            math.log(c.bwd_s_half / c.fwd_s_half),
            math.log(c.causal_factor / CAUSAL_PRIOR),
            math.log(c.bwd_hd64 / c.hd64),
            math.log(c.hd64),
            math.log(c.hd256),
        ]
        return np.concatenate([pred, PRIOR_WEIGHT * np.array(priors)])

    x0 = [0.7, 0.6] if shape is not None else [0.7, 512.0, 0.6, 512.0, 0.8, 0.8, 1.0, CAUSAL_PRIOR]
    return curve(levenberg_marquardt(residuals, np.log(x0)))


def gives_shape(rows: Sequence) -> bool:
    """Whether a set's rows span enough to fit a curve's shape: three sequence lengths."""
    return len({r.seq_len for r in rows if r.kernel in ROW_KERNELS}) >= 3


def pick(curves: Sequence[AttentionCurve], kernel: str) -> AttentionCurve | None:
    """The curve that prices ``kernel`` among a GPU's ``curves``: the first of its
    :data:`FALLBACK` the GPU has (None: none of them)."""
    have = {c.impl: c for c in curves}
    return next((have[k] for k in FALLBACK[kernel] if k in have), None)
