"""Multi-head latent attention (DeepSeek-V2/V3) of one layer on one GPU under TP.

MLA (DeepSeek-AI 2024, DeepSeek-V2 §2.1) projects the hidden state down to a query latent
of rank ``q_lora_rank`` (0: no query compression, a plain ``h → H·d_qk`` projection) and
a key/value latent of rank ``kv_lora_rank`` plus one shared RoPE key of
``qk_rope_head_dim``; each latent is RMS-normed and projected up per head: queries to
``d_qk = qk_nope_head_dim + qk_rope_head_dim``, keys (no-RoPE part) and values to
``qk_nope_head_dim + v_head_dim``. The output projection maps ``H·v_head_dim → h``.

Under Megatron-Core's TP the two down projections are replicated (every TP rank holds and
runs them), the up projections are column-parallel over heads and the output projection
row-parallel. The attention core (:mod:`.attention`) runs with ``H/t`` heads of head dim
``(d_qk + v_head_dim)/2``: FLOPs (``2·b·s²·H·(d_qk + d_v)``) and the bytes of Q, K, V and
O are then exact; the Q, K, V kept for backward are counted at that mean head dim
(3·(d_qk+d_v)/2 per head instead of 2·d_qk + d_v).
"""

from __future__ import annotations

from dataclasses import replace

from .attention import attention_core_ops
from .ops import LayerOp, elementwise, gemm


def mla_params(cfg) -> int:
    """Parameters of one MLA block: projections and the two latent norms."""
    h, a, rq, rkv = cfg.hidden, cfg.heads, cfg.q_lora_rank, cfg.kv_lora_rank
    dqk, dr, dn, dv = cfg.qk_head_dim, cfg.qk_rope_head_dim, cfg.qk_nope_head_dim, cfg.v_head_dim
    q = (h * rq + rq + rq * a * dqk) if rq else h * a * dqk
    kv = h * (rkv + dr) + rkv + rkv * a * (dn + dv)
    return q + kv + a * dv * h


def mla_forward_flops(cfg, b: int) -> float:
    """Matmul FLOPs of one MLA block's forward for ``b`` sequences (full s² scores)."""
    t, s, h, a, rq, rkv = (
        b * cfg.seq_len,
        cfg.seq_len,
        cfg.hidden,
        cfg.heads,
        cfg.q_lora_rank,
        cfg.kv_lora_rank,
    )
    dqk, dr, dn, dv = cfg.qk_head_dim, cfg.qk_rope_head_dim, cfg.qk_nope_head_dim, cfg.v_head_dim
    q = 2 * t * (h * rq + rq * a * dqk) if rq else 2 * t * h * a * dqk
    kv = 2 * t * (h * (rkv + dr) + rkv * a * (dn + dv))
    return q + kv + 2 * b * s * s * a * (dqk + dv) + 2 * t * a * dv * h


def mla_ops(cfg, b: int, tp: int, rep: float, e: int) -> list[LayerOp]:
    """MLA between the TP region's enter and exit (``rep``: h-sized elements held outside
    it); Q, K, V heads split by ``tp``."""
    t, h, at, rq, rkv = b * cfg.seq_len, cfg.hidden, cfg.heads // tp, cfg.q_lora_rank, cfg.kv_lora_rank
    dqk, dr, dn, dv = cfg.qk_head_dim, cfg.qk_rope_head_dim, cfg.qk_nope_head_dim, cfg.v_head_dim
    ops: list[LayerOp] = []
    if rq:
        ops.append(gemm("q_down", t, rq, h, e, activation=rep * e))
        ops.append(elementwise("q_norm", t * rq, 2 * e, 3 * e, params=rq, activation=t * rq * e))
        ops.append(gemm("q_up", t, at * dqk, rq, e, activation=t * rq * e))
    else:
        ops.append(gemm("q_proj", t, at * dqk, h, e, activation=rep * e))
    ops.append(gemm("kv_down", t, rkv + dr, h, e))  # reads the same normed input as the query
    ops.append(elementwise("kv_norm", t * rkv, 2 * e, 3 * e, params=rkv, activation=t * rkv * e))
    ops.append(gemm("kv_up", t, at * (dn + dv), rkv, e, activation=t * rkv * e))
    core = replace(cfg, head_size=(dqk + dv) // 2, kv_heads=0)
    ops += attention_core_ops(core, b, at, at, e)
    ops.append(gemm("attn_out", t, h, at * dv, e, activation=t * at * dv * e))
    return ops
