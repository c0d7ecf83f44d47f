"""Scenario rules that need the resolved model (called from :mod:`clustersim.scenario.rules`).

Tensor parallelism splits attention heads, key/value heads and the MLP's hidden width
across the TP group (Megatron-LM), so each must divide by ``tp`` — and so must the MoE
experts' FFN sizes (Megatron-Core's default expert-tensor-parallel size is TP); the
vocabulary's rows (embedding, logits) are split too, so there must be at least ``tp``.
"""

from __future__ import annotations

from ..errors import ScenarioError
from .resolve import resolve_transformer


def model_layers(model) -> int:
    """Partitionable layers of a model section (transformer layers, CNN units, synthetic
    layers; a trace is one unit: it brings its own partition)."""
    if model.kind == "trace":
        return 1
    if model.kind == "transformer":
        return resolve_transformer(model).layers
    if model.kind == "cnn":
        from .cnn import cnn_layers

        return len(cnn_layers(model.preset, 1, 2, model.image_size, model.classes))
    return model.layers


def tp_obstacle(cfg, tp: int, etp: int | None = None) -> str | None:
    """Why tensor parallelism ``tp`` cannot split transformer ``cfg`` (None if it can);
    ``etp``: the experts' own tensor-parallel size when set (checked with ``parallel.etp``)."""
    if cfg.heads % tp:
        return f"model.heads = {cfg.heads} must divide by tp; accepted: a divisor of {cfg.heads}"
    if cfg.n_kv % tp and tp % cfg.n_kv:
        return f"model.kv_heads = {cfg.n_kv} and tp must divide one another"
    if cfg.ffn_hidden % tp:
        return f"model.ffn_hidden = {cfg.ffn_hidden} must divide by tp"
    if cfg.vocab < tp:  # the embedding and the logits GEMM split the vocabulary's rows over TP
        return f"model.vocab = {cfg.vocab} has fewer rows than tp ranks; accepted: tp ≤ {cfg.vocab}"
    if cfg.experts > 1 and etp is None and cfg.expert_ffn % tp:  # experts split by TP (expert-TP = TP)
        return f"model.moe_ffn_hidden = {cfg.expert_ffn} must divide by tp"
    if cfg.experts > 1 and cfg.shared_ffn_hidden % tp:
        return f"model.shared_ffn_hidden = {cfg.shared_ffn_hidden} must divide by tp"
    return None


def check_model_rules(spec) -> None:
    """Raise ScenarioError when the plan cannot split the model (heads, kv heads, MLP by tp)."""
    if spec.model.kind != "transformer":
        return
    why = tp_obstacle(resolve_transformer(spec.model), spec.parallel.tp, spec.parallel.etp)
    if why is not None:
        raise ScenarioError("parallel.tp", spec.parallel.tp, why)
