"""Per-GPU operations of a transformer layer, embedding and output under TP (+ SP).

Megatron-LM's tensor parallelism (Shoeybi et al. 2019): QKV and MLP-up are column-
parallel, output projection and MLP-down row-parallel, so a layer has two TP regions;
each region is entered by ``f`` (identity forward, all-reduce backward) and left by ``g``
(all-reduce forward, identity backward). With sequence parallelism (Korthikanti et al.
2022) ``f``/``g`` become all-gather/reduce-scatter and the norms and dropouts run on
``s/t`` tokens.

Activation bytes follow Korthikanti et al. 2022 §4.1 term by term (16-bit elements):
attention 11sbh + 5as²b, MLP 19sbh, norms 4sbh — 34sbh + 5as²b per layer, with the
24sbh + 5as²b inside TP regions divided by t (and the other 10sbh too with SP). The
attention core (scores to context) is :mod:`.attention`'s, ``standard`` or ``flash``
(which keeps no s² term, and no attention-dropout mask, but the fp32 log-sum-exp).
The memory-bound kernels outside the attention core (norms, MLP activation, bias-dropout-
residual, RoPE, cross-entropy) are those the framework runs (:mod:`.kernel_impls`: fused
or unfused, one op per kernel with its own reads and writes).
"""

from __future__ import annotations

from dataclasses import replace

from .attention import attention_core_ops
from .context_parallel import context_parallel_ops
from .kernel_impls import DEFAULT_KERNELS, impl_of, memory_ops
from .mla import mla_ops
from .moe import moe_mlp_ops
from .moe_dispatch import ExpertSplit, ep_moe_ops
from .ops import MASK_BYTES, TPComm, elementwise, gemm
from .transformer import TransformerConfig


def _tp_points(sp: bool, nbytes: int) -> tuple[TPComm, TPComm]:
    """(enter, exit) collectives of a TP region for a [b, s, h] activation of ``nbytes``."""
    if sp:
        return (
            TPComm("tp all-gather", "all_gather", "reduce_scatter", nbytes),
            TPComm("tp reduce-scatter", "reduce_scatter", "all_gather", nbytes),
        )
    return TPComm("tp f", "", "all_reduce", nbytes), TPComm("tp g", "all_reduce", "", nbytes)


def layer_ops(
    cfg: TransformerConfig,
    b: int,
    tp: int,
    sp: bool,
    e: int,
    moe: bool | None = None,
    cp: int = 1,
    cp_comm: str = "p2p",
    split: ExpertSplit | None = None,
    kernels: str = DEFAULT_KERNELS,
) -> list:
    """One transformer layer on one GPU: LayerOps and TPComm points in forward order;
    ``moe`` chooses a MoE MLP (:mod:`.moe`; default: when the model has experts), ``split``
    its expert parallelism (:mod:`.moe_dispatch`; None: experts inside the TP region), and
    ``cfg.mla`` multi-head latent attention (:mod:`.mla`). With context parallelism ``cp``
    > 1, ``cfg.seq_len`` is the GPU's ``s/cp`` tokens and the attention core is
    :mod:`.context_parallel`'s ring (``cp_comm`` ``p2p``) or Ulysses (``a2a``) attention.
    ``kernels``: whose memory-bound kernel implementations run (:mod:`.kernel_impls`)."""
    s, h, a, d, f = cfg.seq_len, cfg.hidden, cfg.heads, cfg.head_dim, cfg.ffn_hidden
    at, kvt = a // tp, max(1, cfg.n_kv // tp)
    bsh = b * s * h
    rep = bsh / tp if sp else bsh  # tokens × h held outside TP regions
    drop = cfg.dropout
    enter, leave = _tp_points(sp and tp > 1, int(bsh * e)) if tp > 1 else (None, None)
    ops: list = []

    def norm(name):
        return _norm_ops(cfg, kernels, name, rep, e)

    def residual(name):
        impl = impl_of(kernels, "dropout_residual" if drop else "residual")
        return memory_ops(name, impl, rep, e, activation=rep * MASK_BYTES if drop else 0.0)

    # --- attention ------------------------------------------------------------------
    ops += norm("norm1")
    ops += [enter] if enter else []
    if cfg.mla:
        ops += mla_ops(cfg, b, tp, rep, e)
    else:
        qkv_n = (at + 2 * kvt) * d
        qkv = gemm("qkv", b * s, qkv_n, h, e, activation=rep * e)  # SP keeps the shard
        # Qwen2's q, k, v biases, and GPT-OSS's sink logits (one per query head) beside them
        extra = (qkv_n if cfg.qkv_bias else 0) + (at if cfg.attention_sinks else 0)
        ops.append(replace(qkv, params=qkv.params + extra) if extra else qkv)
        if cfg.position == "rope":  # rotates the query and key heads before the core
            ops += memory_ops("rope", impl_of(kernels, "rope"), b * s * (at + kvt) * d, e)
        if cp > 1:
            ops += context_parallel_ops(cfg, b, at, kvt, e, cp, cp_comm)
        else:
            ops += attention_core_ops(cfg, b, at, kvt, e)
        ops.append(gemm("attn_out", b * s, h, at * d, e, activation=b * s * at * d * e))
    ops += [leave] if leave else []
    ops += residual("residual1")
    # --- MLP ---------------------------------------------------------------------------
    ops += norm("norm2")
    is_moe = cfg.experts > 1 if moe is None else moe
    dispatched = is_moe and split is not None and split.active(tp)
    ops += [enter] if enter and not dispatched else []
    ft = f // tp
    up_n = ft * (2 if cfg.gated_mlp else 1)
    if dispatched:  # the dispatcher's collectives replace the TP region's enter and exit
        ops += ep_moe_ops(cfg, b, tp, e, split)
    elif is_moe:
        fused, impl = (split.permute_fusion, split.expert_mlp) if split is not None else (False, "sequential")
        ops += moe_mlp_ops(cfg, b, tp, e, rep / h, fused, impl)
    else:
        ops.append(gemm("mlp_up", b * s, up_n, h, e, activation=rep * e))
        act_in = b * s * up_n
        kind = "gated_act" if cfg.gated_mlp else "squared_relu" if cfg.squared_relu else "act"
        act = impl_of(kernels, kind)
        ops += memory_ops("mlp_act", act, act_in, e, activation=act_in * e)
        ops.append(gemm("mlp_down", b * s, h, ft, e, activation=b * s * ft * e))
    ops += [leave] if leave and not dispatched else []
    ops += residual("residual2")
    if cfg.bias:  # biases of the four linears (column-parallel split, row-parallel replicated)
        i = next(i for i, op in enumerate(ops) if getattr(op, "name", "") == "qkv")
        q = ops[i]
        ops[i] = replace(q, params=q.params + (at + 2 * kvt) * d + h + up_n + h)
    return ops


def embedding_ops(cfg: TransformerConfig, b: int, tp: int, sp: bool, e: int) -> list:
    """Vocab-parallel input embedding (+ learned positions) and its TP all-reduce."""
    bsh = b * cfg.seq_len * cfg.hidden
    params = cfg.vocab * cfg.hidden / tp + cfg.positions * cfg.hidden
    drop = MASK_BYTES * (bsh / tp if sp else bsh) if cfg.dropout else 0.0
    ops = [elementwise("embedding", bsh, 3 * e, 3 * e, params=params, activation=drop)]
    if tp > 1:
        kind = "reduce_scatter" if sp else "all_reduce"
        ops.append(TPComm("tp embedding", kind, "", int(bsh * e)))
    return ops


def _norm_ops(
    cfg: TransformerConfig, kernels: str, name: str, elements: float, e: int, copies: int = 1
) -> list:
    """The kernels of ``copies`` norms over ``elements`` values (their parameters, the
    normalised input kept for the backward) as ``kernels`` runs ``cfg.norm``."""
    impl = impl_of(kernels, cfg.norm)
    return memory_ops(name, impl, elements, e, params=copies * cfg.norm_params(), activation=elements * e)


def output_ops(
    cfg: TransformerConfig, b: int, tp: int, sp: bool, e: int, kernels: str = DEFAULT_KERNELS
) -> list:
    """Final norm, vocab-parallel logits GEMM and cross-entropy (fp32 logits kept), the
    memory-bound kernels as ``kernels`` runs them (:mod:`.kernel_impls`)."""
    s, h, v = cfg.seq_len, cfg.hidden, cfg.vocab
    bsh = b * s * h
    rep = bsh / tp if sp else bsh
    enter, _ = _tp_points(sp and tp > 1, int(bsh * e)) if tp > 1 else (None, None)
    logits = gemm("logits", b * s, v // tp, h, e, activation=bsh * e)
    if cfg.tied_embeddings:  # the matrix lives in the embedding op; only its gradient work is here
        logits = replace(logits, params=0.0)
    ops = _norm_ops(cfg, kernels, "final_norm", rep, e)
    ops += [enter] if enter else []
    ops.append(logits)
    local = b * s * v / tp
    ops += memory_ops("cross_entropy", impl_of(kernels, "cross_entropy"), local, e, activation=local * 4)
    return ops


def mtp_ops(
    cfg: TransformerConfig,
    b: int,
    tp: int,
    sp: bool,
    e: int,
    split: ExpertSplit | None = None,
    kernels: str = DEFAULT_KERNELS,
) -> list:
    """The multi-token-prediction modules (DeepSeek-V3 §2.2) on the last stage: per module
    the norms of the hidden state and of the next token's embedding, their concatenation
    projected ``2h → h`` (column-parallel), one layer, and the final norm, logits and loss
    through the output head it shares with the main model (no parameters of its own);
    ``split``: its MoE layer's expert parallelism, as in :func:`layer_ops`."""
    bsh = b * cfg.seq_len * cfg.hidden
    rep = bsh / tp if sp else bsh
    ops: list = []
    for _ in range(cfg.mtp_layers):
        ops += _norm_ops(cfg, kernels, "mtp_norms", 2 * rep, e, copies=2)
        ops.append(
            gemm("mtp_proj", b * cfg.seq_len, cfg.hidden // tp, 2 * cfg.hidden, e, activation=2 * rep * e)
        )
        ops += layer_ops(cfg, b, tp, sp, e, split=split, kernels=kernels)
        ops += [
            replace(op, params=0.0) if op.name == "logits" else op
            for op in output_ops(cfg, b, tp, sp, e, kernels)
        ]
    return ops
