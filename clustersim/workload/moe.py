"""Mixture-of-experts MLP of one layer on one GPU: router, token load, experts, shared expert.

A MoE layer (Mixtral, DeepSeekMoE, Qwen-MoE) replaces the dense MLP by a router — the
gate GEMM ``h × E`` and a softmax/top-k over its ``E`` scores per token — ``E`` routed
experts of FFN size ``moe_ffn_hidden``, each running on the tokens routed to it, and
optionally a shared expert (every token; DeepSeek's ``n_shared_experts`` fused into one
MLP of ``n_shared × moe_intermediate_size``, Qwen's ``shared_expert_intermediate_size``).

How many of a micro-batch's ``T`` tokens each expert gets is the load model
(:func:`expert_tokens`): ``uniform`` gives each expert ``T·k/E``; ``skew`` draws the
``T·k`` assignments from a Zipf law of exponent ``expert_skew`` over a seeded random
ranking of the experts (``numpy.random.default_rng(expert_seed)``; exponent 0 is uniform
in expectation); ``aux_loss`` is ``skew`` at the exponent fitted to the measured routing
statistic of auxiliary-loss-balanced routers (:mod:`.moe_routing`); ``auto`` (the
``megatron_core`` profile's default) is ``aux_loss`` for a softmax router (Mixtral, Qwen-MoE,
OLMoE: balanced by the auxiliary loss) and ``uniform`` for a sigmoid one (DeepSeek-V3's
bias-balanced router, for which no training-time statistic is stored); ``histogram`` splits
``T·k`` in proportion to the given weights. A
capacity factor ``c`` caps every expert at ``ceil(c·T·k/E)`` tokens and drops the rest
(GShard, Lepikhin et al. 2021; Megatron-Core's ``moe_expert_capacity_factor``); dropped
tokens skip the expert and pass through the residual.

With expert parallelism 1 every expert runs on this GPU (its FFN dimension split by
tensor parallelism, Megatron-Core's default expert-tensor-parallel size = TP). Each
expert's up and down projections are their own GEMM ops at that expert's token count, so
the cost model prices each at its own shape efficiency — the many-small-M of a grouped
GEMM (one launch overhead per expert GEMM, as a sequential expert loop pays; a fused
grouped GEMM pays one). The layer's expert time is therefore Σ_e cost(tokens_e). Each
expert op carries its own parameters, so a later expert-parallel split can place
experts on ranks by cutting this list.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..errors import ScenarioError
from .moe_experts import grouped_expert_ops
from .moe_kernels import permute_op, scoring_ops, unpermute_op
from .moe_routing import aux_loss_exponent
from .ops import NO_WORK, LayerOp, elementwise, gemm

EXPERT_LOADS = ("uniform", "skew", "aux_loss", "auto", "histogram")


def expert_tokens(
    tokens: int,
    experts: int,
    top_k: int,
    load: str = "uniform",
    *,
    skew: float = 0.0,
    seed: int = 0,
    histogram: tuple[float, ...] = (),
    capacity_factor: float = 0.0,
) -> tuple[float, ...]:
    """Tokens each of ``experts`` experts processes for ``tokens`` tokens routed top-``k``
    (see module doc); ``capacity_factor`` > 0 caps each at ``ceil(c·T·k/E)``."""
    total = tokens * top_k
    if load == "uniform":
        counts = [total / experts] * experts
    elif load in ("skew", "aux_loss"):
        rng = np.random.default_rng(seed)
        rank = rng.permutation(experts) + 1
        p = rank.astype(float) ** -(aux_loss_exponent() if load == "aux_loss" else skew)
        counts = [float(c) for c in rng.multinomial(total, p / p.sum())]
    elif load == "histogram":
        if len(histogram) != experts or min(histogram) < 0 or sum(histogram) <= 0:
            raise ScenarioError(
                "model.expert_histogram",
                list(histogram),
                f"expected {experts} weights ≥ 0 (one per routed expert), not all 0",
            )
        s = sum(histogram)
        counts = [total * w / s for w in histogram]
    else:
        raise ScenarioError("model.expert_load", load, f"accepted: {', '.join(EXPERT_LOADS)}")
    if capacity_factor > 0:
        cap = math.ceil(capacity_factor * total / experts)
        counts = [min(c, cap) for c in counts]
    return tuple(counts)


def load_model(cfg) -> str:
    """The load model ``cfg`` (a TransformerConfig) runs: ``auto`` resolved by its router's
    score function (module doc), any other ``expert_load`` as stated."""
    if cfg.expert_load == "auto":
        return "aux_loss" if cfg.router_score == "softmax" else "uniform"
    return cfg.expert_load


def layer_expert_tokens(cfg, tokens: int) -> tuple[float, ...]:
    """:func:`expert_tokens` with the load model of ``cfg`` (a TransformerConfig)."""
    return expert_tokens(
        tokens,
        cfg.experts,
        cfg.experts_per_token,
        load_model(cfg),
        skew=cfg.expert_skew,
        seed=cfg.expert_seed,
        histogram=cfg.expert_histogram,
        capacity_factor=cfg.capacity_factor,
    )


def _expert(
    name: str, n: float, h: int, up_n: int, ft: int, e: int, gated: bool, probs: bool = True
) -> list[LayerOp]:
    """One expert's up projection, activation and down projection at ``n`` tokens (no
    kernels, only its parameters, when no token reaches it). ``probs``: a routed expert,
    whose activation is weighted by its tokens' routing probabilities and keeps them
    (Megatron-Core's ``WeightedSwiGLUFunction`` saves its input and the weights;
    :func:`.moe_kernels.unpermute_op`); the shared expert has none."""
    if n == 0:
        return [LayerOp(name, NO_WORK, NO_WORK, NO_WORK, params=float(h * up_n + ft * h))]
    act = n * up_n
    kept = (act + (n if probs else 0.0)) * e
    return [
        gemm(f"{name}_up", n, up_n, h, e, activation=n * h * e),
        elementwise(f"{name}_act", act, 1.5 * e if gated else 2 * e, 3 * e, activation=kept),
        gemm(f"{name}_down", n, h, ft, e, activation=n * ft * e),
    ]


def router_ops(cfg, local: float, e: int) -> list[LayerOp]:
    """The router GEMM, scores, top-k and auxiliary loss (:mod:`.moe_kernels`) on the
    ``local`` tokens a rank holds."""
    h = cfg.hidden
    gate_n = cfg.experts + (1 if cfg.shared_expert_gate else 0)  # Qwen2-MoE gates its shared expert
    return [gemm("moe_router", local, gate_n, h, e, activation=local * h * e), *scoring_ops(cfg, local, e)]


def expert_ops(
    cfg, counts, etp: int, e: int, *, shared: float = 0.0, impl: str = "sequential"
) -> list[LayerOp]:
    """Routed experts at ``counts`` tokens each, FFN split over ``etp`` ranks, run by the
    expert MLP module ``impl`` (:mod:`.moe_experts`; ``sequential``: one op chain per
    expert); with ``shared`` > 0, then the shared expert (if the model has one) on that
    many tokens."""
    h = cfg.hidden
    mats = 3 if cfg.gated_mlp else 2
    ft = cfg.expert_ffn // etp
    ops: list[LayerOp] = []
    if impl != "sequential" and counts:
        ops += grouped_expert_ops(cfg, counts, ft, e, impl)
        counts = ()
    for n in counts:
        ops += _expert("expert", n, h, ft * (mats - 1), ft, e, cfg.gated_mlp)
    if shared and cfg.shared_ffn_hidden:
        sft = cfg.shared_ffn_hidden // etp
        up, *rest = _expert("shared_expert", shared, h, sft * (mats - 1), sft, e, cfg.gated_mlp, probs=False)
        # its input is the router's (the normed hidden state, the sequence-parallel shard a
        # linear keeps under SP): one tensor, kept once — by the router GEMM
        ops += [replace(up, activation=0.0), *rest]
    return ops


def moe_mlp_ops(
    cfg, b: int, etp: int, e: int, local: float, fused: bool = False, impl: str = "sequential"
) -> list[LayerOp]:
    """The MoE MLP of one layer on one GPU, between the TP region's enter and exit, each
    expert's FFN split over ``etp`` ranks (expert-tensor parallelism; callers pass TP,
    Megatron-Core's default): router GEMM + softmax/top-k on the ``local`` tokens this rank holds (``b·s/t`` with
    sequence parallelism, as Megatron-Core routes before its all-gather dispatch),
    permute, each routed expert on its share of all ``b·s`` tokens, unpermute (keeping
    the expert outputs for the gradient of the routing weights), shared expert; ``fused``:
    Transformer Engine's permutation kernels (``moe_permute_fusion``, :mod:`.moe_kernels`);
    ``impl``: the expert MLP module (:mod:`.moe_experts`)."""
    tokens = b * cfg.seq_len
    ops = router_ops(cfg, local, e)
    routed = layer_expert_tokens(cfg, tokens)
    copies = sum(routed)  # token copies into and out of expert order
    ops.append(permute_op(cfg, tokens, copies, e, fused))
    ops += expert_ops(cfg, routed, etp, e, impl=impl)
    ops.append(unpermute_op(cfg, tokens, copies, e, fused))
    return ops + expert_ops(cfg, (), etp, e, shared=tokens)
