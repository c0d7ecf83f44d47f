"""The attention core of a transformer layer on one GPU: ``standard`` or ``flash``.

``model.attention`` chooses between the two (docs/models.md):

* ``standard`` — Megatron-LM 2021's unfused path: the scores GEMM Q·Kᵀ, a fused
  scale-mask-softmax, attention dropout and the context GEMM P·V, each a kernel over the
  full b·a·s² scores (a causal mask is applied to them, so it changes nothing), keeping
  Korthikanti et al. 2022's 5as²b activation bytes (softmax output 2as²b, dropout mask
  as²b, dropout output 2as²b; 2as²b without dropout).
* ``flash`` — one fused FlashAttention kernel per layer and direction (Dao et al. 2022,
  2023; Shah et al. 2024). The s² scores never reach HBM: forward reads Q, K, V and writes
  O and the fp32 log-sum-exp of each score row; backward reads Q, K, V, O, dO and the
  log-sum-exp, recomputes the scores tile by tile and writes dQ, dK, dV. Dropout, if any,
  runs inside the kernel from a saved RNG state (no mask is stored). FLOPs follow
  FlashAttention's own benchmark convention (``benchmarks/benchmark_flash_attention.py``,
  Dao-AILab/flash-attention): forward ``4·b·s²·a·d``, halved with a causal mask (the
  kernel skips the masked tiles), backward 2.5× the forward (five s²·d products — the
  recomputed scores, dV, dP, dQ, dK — against the forward's two). Kept for backward:
  Q, K, V and the log-sum-exp (``b·a·s·4`` bytes); O is the output projection's input
  and is kept there, as in the standard path. Selective recompute has nothing to re-run:
  the kernel already recomputes its scores, so no flash op is an ``attention_core`` op.
  Grouped-query attention (fewer K/V heads) leaves the FLOPs and cuts the K/V bytes; a
  sliding window counts only the pairs inside it (:func:`attended_pairs`).

The flash kernel (``model.attention_kernel``: FA2, FA3 or cuDNN) and its efficiency come
from :mod:`.attention_kernels` through the cost model
(:meth:`~.cost_model.CostModel.attention_efficiency`).
"""

from __future__ import annotations

from .ops import MASK_BYTES, AttentionShape, LayerOp, Work, elementwise, gemm
from .transformer import TransformerConfig

#: FlashAttention's backward / forward FLOPs (five s²·d matmuls against two)
FLASH_BACKWARD_FACTOR = 2.5
#: bytes per log-sum-exp element (fp32, one per query row and head)
LSE_BYTES = 4
ATTENTION_KINDS = ("standard", "flash")


def attended_pairs(s: int, causal: bool, window: int = 0) -> float:
    """(query, key) pairs one head computes over ``s`` tokens: ``s²``, halved when causal
    (FlashAttention's convention, the masked half of the scores skipped); a sliding
    ``window`` w < s (each query sees at most w keys) leaves ``s·w − w²/2`` causal and
    ``2·s·w − w²`` without the mask (a band of half-width w) — both ``s²`` (or ``s²/2``)
    at w = s."""
    w = window if 0 < window < s else s
    return (s * w - w * w / 2) if causal else (2.0 * s * w - w * w)


def flash_forward_flops(b: int, s: int, heads: int, head_dim: int, causal: bool, window: int = 0) -> float:
    """FLOPs of one FlashAttention forward: ``4·b·heads·head_dim`` per attended pair
    (:func:`attended_pairs`): ``4·b·s²·heads·head_dim``, halved when causal. Grouped-query
    attention changes no FLOP (every query head still scores every key), only the bytes
    of K and V."""
    return 4.0 * b * heads * head_dim * attended_pairs(s, causal, window)


def flash_attention(cfg: TransformerConfig, b: int, at: int, kvt: int, e: int) -> LayerOp:
    """The fused attention kernel of one layer on one GPU (``at`` query heads, ``kvt``
    key/value heads after TP; elements of ``e`` bytes)."""
    s, d = cfg.seq_len, cfg.head_dim
    q = o = b * s * at * d * e  # query- and output-shaped tensors
    kv = b * s * 2 * kvt * d * e  # K and V
    lse = b * at * s * LSE_BYTES
    flops = flash_forward_flops(b, s, at, d, cfg.causal, cfg.sliding_window)
    # a window w < s runs like the kernel over w keys: the band's edge tiles are masked as a
    # causal kernel's diagonal ones are, 2·tile/w of the work either way
    keys = min(cfg.sliding_window, s) if cfg.sliding_window else s
    impl = cfg.attention_kernel
    fwd = Work(flops, q + kv + o + lse, attention=AttentionShape(d, keys, cfg.causal, False, impl))
    # backward reads Q, K, V, O, dO and the log-sum-exp; writes dQ, dK, dV
    bwd = Work(
        FLASH_BACKWARD_FACTOR * flops,
        3 * q + o + 2 * kv + lse,
        attention=AttentionShape(d, keys, cfg.causal, True, impl),
    )
    return LayerOp("flash_attention", fwd, bwd, activation=q + kv + lse)


def standard_attention(cfg: TransformerConfig, b: int, at: int, kvt: int, e: int) -> list[LayerOp]:
    """Megatron-2021's unfused attention core: scores GEMM, softmax, dropout, context GEMM."""
    s, d = cfg.seq_len, cfg.head_dim
    ops = [
        gemm("attn_scores", s, s, d, e, weight=False, batch=b * at, activation=b * s * (at + 2 * kvt) * d * e)
    ]  # Q, K (and V, for the context) kept
    ops.append(
        elementwise(
            "softmax", b * at * s * s, 2 * e, 3 * e, activation=b * at * s * s * e, attention_core=True
        )
    )
    if cfg.dropout:
        ops.append(
            elementwise(
                "attn_dropout",
                b * at * s * s,
                2 * e + MASK_BYTES,
                2 * e + MASK_BYTES,
                activation=b * at * s * s * MASK_BYTES,
                attention_core=True,
            )
        )
    ops.append(
        gemm(
            "attn_context",
            s,
            d,
            s,
            e,
            weight=False,
            batch=b * at,
            activation=b * at * s * s * e * (1 if cfg.dropout else 0),
            attention_core=True,
        )
    )
    return ops


def attention_core_ops(cfg: TransformerConfig, b: int, at: int, kvt: int, e: int) -> list[LayerOp]:
    """The attention core of ``cfg.attention`` (between the QKV and output projections)."""
    if cfg.attention == "flash":
        return [flash_attention(cfg, b, at, kvt, e)]
    return standard_attention(cfg, b, at, kvt, e)
