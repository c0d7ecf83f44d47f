"""Resolve a scenario's ``model`` section into a concrete model description.

``{preset: name}`` → the preset; ``{hf_config: path}`` → the config.json; explicit fields
(``layers``, ``hidden``, …) override either, or describe the model alone. Unknown presets
and impossible shapes are :class:`ScenarioError` s naming the field.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from ..errors import ScenarioError
from .attention import ATTENTION_KINDS
from .attention_kernels import KERNELS
from .hf_config import load_hf_config
from .model_presets import CNN_PRESETS, TRANSFORMER_PRESETS, model_preset_names
from .moe import layer_expert_tokens
from .transformer import TransformerConfig

#: scenario field → TransformerConfig field (same names, listed for the override step)
OVERRIDABLE = (
    "layers",
    "hidden",
    "heads",
    "ffn_hidden",
    "vocab",
    "seq_len",
    "kv_heads",
    "gated_mlp",
    "norm",
    "position",
    "max_position",
    "tied_embeddings",
    "bias",
    "dropout",
    "experts",
    "experts_per_token",
    "moe_ffn_hidden",
    "shared_ffn_hidden",
    "shared_expert_gate",
    "dense_layers",
    "moe_step",
    "capacity_factor",
    "expert_load",
    "expert_skew",
    "expert_seed",
    "expert_histogram",
    "head_size",
    "qkv_bias",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "mtp_layers",
    "attention",
    "causal",
    "attention_kernel",
    "sliding_window",
    "full_attention_every",
    "attention_sinks",
    "squared_relu",
)
REQUIRED = ("layers", "hidden", "heads", "vocab", "seq_len")


def check_preset(name: str) -> str:
    """``name`` if it is a model preset; else a ScenarioError listing the known ones."""
    if name not in TRANSFORMER_PRESETS and name not in CNN_PRESETS:
        raise ScenarioError("model.preset", name, f"known model presets: {', '.join(model_preset_names())}")
    return name


@lru_cache(maxsize=256)
def resolve_transformer(spec) -> TransformerConfig:
    """The TransformerConfig of a transformer ``model`` section (cached per spec)."""
    base = None
    if spec.preset and spec.hf_config:  # one would be ignored without a word
        raise ScenarioError(
            "model.hf_config",
            spec.hf_config,
            f"model.preset ({spec.preset!r}) is given too; accepted: one of preset or hf_config "
            "(override single fields next to either)",
        )
    if spec.preset:
        check_preset(spec.preset)
        if spec.preset in CNN_PRESETS:
            raise ScenarioError("model.preset", spec.preset, "is a CNN preset; use model.kind: cnn")
        base = TRANSFORMER_PRESETS[spec.preset][0]
    elif spec.hf_config:
        base = load_hf_config(spec.hf_config, spec.seq_len)
    given = {k: getattr(spec, k) for k in OVERRIDABLE if getattr(spec, k) is not None}
    if base is None:
        missing = [k for k in REQUIRED if k not in given]
        if missing:
            raise ScenarioError(
                f"model.{missing[0]}",
                None,
                "required when neither model.preset nor "
                f"model.hf_config is given (required: {', '.join(REQUIRED)})",
            )
        given.setdefault("ffn_hidden", 4 * given["hidden"])
        cfg = TransformerConfig(name=spec.name or "custom", **given)
    else:
        if spec.name:
            given["name"] = spec.name
        cfg = dataclasses.replace(base, **given)
    _check_shape(cfg)
    return cfg


def _check_shape(cfg: TransformerConfig) -> None:
    if cfg.hidden % cfg.heads and not cfg.head_size and not cfg.mla:
        raise ScenarioError("model.heads", cfg.heads, f"must divide model.hidden = {cfg.hidden}")
    if cfg.heads % cfg.n_kv:
        raise ScenarioError("model.kv_heads", cfg.kv_heads, f"must divide model.heads = {cfg.heads}")
    if cfg.experts_per_token > cfg.experts:
        raise ScenarioError(
            "model.experts_per_token", cfg.experts_per_token, f"at most model.experts = {cfg.experts}"
        )
    if cfg.bias and (cfg.experts > 1 or cfg.mla):
        raise ScenarioError(
            "model.bias", True, "linear biases are modelled for dense attention and MLPs only"
        )
    if cfg.mla and (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim + cfg.v_head_dim) % 2:
        raise ScenarioError(
            "model.v_head_dim",
            cfg.v_head_dim,
            "qk_nope_head_dim + qk_rope_head_dim + v_head_dim must be even",
        )
    if cfg.mla and not (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim and cfg.v_head_dim):
        raise ScenarioError(
            "model.kv_lora_rank",
            cfg.kv_lora_rank,
            "MLA needs qk_nope_head_dim (or qk_rope_head_dim) and v_head_dim ≥ 1",
        )
    if cfg.expert_skew and cfg.expert_load != "skew":
        raise ScenarioError("model.expert_skew", cfg.expert_skew, "applies with model.expert_load: skew")
    if cfg.expert_histogram and cfg.expert_load != "histogram":
        raise ScenarioError(
            "model.expert_histogram", list(cfg.expert_histogram), "applies with model.expert_load: histogram"
        )
    if cfg.experts > 1:
        layer_expert_tokens(cfg, 1)  # the load model's own checks (histogram length, …)
    if cfg.full_attention_every and not cfg.sliding_window:
        raise ScenarioError(
            "model.full_attention_every", cfg.full_attention_every, "applies with model.sliding_window > 0"
        )
    if cfg.squared_relu and cfg.gated_mlp:
        raise ScenarioError(
            "model.squared_relu", True, "is the activation of an ungated MLP (gated_mlp: false)"
        )
    if cfg.norm not in ("layernorm", "rmsnorm"):
        raise ScenarioError("model.norm", cfg.norm, "accepted: layernorm, rmsnorm")
    if cfg.attention not in ATTENTION_KINDS:
        raise ScenarioError("model.attention", cfg.attention, f"accepted: {', '.join(ATTENTION_KINDS)}")
    if cfg.attention_kernel not in KERNELS:
        raise ScenarioError("model.attention_kernel", cfg.attention_kernel, f"accepted: {', '.join(KERNELS)}")
    if cfg.position not in ("learned", "rope"):
        raise ScenarioError("model.position", cfg.position, "accepted: learned, rope")
