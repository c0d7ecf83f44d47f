"""Read a Hugging Face ``config.json`` into a :class:`TransformerConfig` (no hub access).

GPT-2 names (``n_layer``, ``n_embd``, ``n_head``, ``n_inner``, ``n_positions``) and
LLaMA/Mistral/Qwen names (``num_hidden_layers``, ``hidden_size``,
``num_attention_heads``, ``num_key_value_heads``, ``head_dim``, ``intermediate_size``,
``max_position_embeddings``). Mixture of experts: Mixtral's ``num_local_experts``,
DeepSeek's ``n_routed_experts``, ``n_shared_experts``, ``first_k_dense_replace``,
``moe_layer_freq``, Qwen-MoE's ``num_experts``, ``shared_expert_intermediate_size``
(with its shared-expert gate), ``decoder_sparse_step``, and ``moe_intermediate_size``,
``num_experts_per_tok``. DeepSeek's multi-head latent attention (``q_lora_rank``,
``kv_lora_rank``, ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``) and
multi-token prediction (``num_nextn_predict_layers``). Mistral's ``sliding_window`` (unless
``use_sliding_window`` is false, as Qwen2 writes it), and GPT-OSS's ``layer_types`` (windowed
layers with every n-th on full attention), its attention sinks and q/k/v biases. Nemotron's
``relu2`` (squared ReLU, ungated MLP) and LayerNorm. A relative path is looked up from the
working directory, then in the package's ``data/hf/``.

Not modelled, and small: GPT-OSS's output-projection and expert biases (under 0.05 % of its
parameters), Qwen3's per-head q/k norms, Nemotron's partial rotary embedding (RoPE over half
the head dim is priced over all of it).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ScenarioError, short_repr
from ..reader import read_json_file
from .moe_kernels import ROUTER_SCORES
from .transformer import TransformerConfig

DATA_HF = Path(__file__).resolve().parent.parent / "data" / "hf"
_GPT2_TYPES = ("gpt2", "gpt_neo", "gptj", "gpt_bigcode")
#: model types whose q, k, v projections have biases though their config.json does not say
#: so (transformers' Qwen2Attention / Qwen2MoeAttention: ``bias=True``)
_QKV_BIAS_TYPES = ("qwen2", "qwen2_moe", "gpt_oss")
#: ``layer_types`` values (transformers' GptOssConfig): a windowed or a full-attention layer
_LAYER_TYPES = ("sliding_attention", "full_attention")


#: config.json key → the ``model`` field it sets (its range, docs/limits.md, applies to it)
HF_FIELDS = {
    "n_layer": "layers",
    "num_hidden_layers": "layers",
    "n_embd": "hidden",
    "hidden_size": "hidden",
    "n_head": "heads",
    "num_attention_heads": "heads",
    "n_inner": "ffn_hidden",
    "intermediate_size": "ffn_hidden",
    "vocab_size": "vocab",
    "n_positions": "max_position",
    "max_position_embeddings": "max_position",
    "num_key_value_heads": "kv_heads",
    "head_dim": "head_size",
    "num_local_experts": "experts",
    "n_routed_experts": "experts",
    "num_experts": "experts",
    "num_experts_per_tok": "experts_per_token",
    "moe_intermediate_size": "moe_ffn_hidden",
    "shared_expert_intermediate_size": "shared_ffn_hidden",
    "first_k_dense_replace": "dense_layers",
    "decoder_sparse_step": "moe_step",
    "moe_layer_freq": "moe_step",
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "qk_nope_head_dim": "qk_nope_head_dim",
    "v_head_dim": "v_head_dim",
    "num_nextn_predict_layers": "mtp_layers",
}


def read_hf_config(path: str) -> dict:
    """The JSON object of config ``path`` (:func:`find_config`), read through the input boundary."""
    cfg = read_json_file(find_config(path), "model.hf_config")
    if not isinstance(cfg, dict):
        raise ScenarioError("model.hf_config", path, "expected a JSON object (a config.json)")
    return cfg


def find_config(path: str) -> Path:
    """The config file ``path`` names; ScenarioError on ``model.hf_config`` if missing."""
    for cand in (Path(path), DATA_HF / path, DATA_HF / f"{path}.json"):
        if cand.is_file():
            return cand
    shipped = ", ".join(sorted(p.stem for p in DATA_HF.glob("*.json")))
    raise ScenarioError("model.hf_config", path, f"expected a config.json path; shipped examples: {shipped}")


def load_hf_config(path: str, seq_len: int | None = None) -> TransformerConfig:
    """The transformer a config.json describes; ``seq_len`` defaults to its max positions."""
    file, cfg = find_config(path), read_hf_config(path)
    kind = cfg.get("model_type", "")

    def count(name: str, default=None):
        value = cfg.get(name)
        if value is None or value == 0 and default is not None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ScenarioError(
                "model.hf_config", path, f"{name} is {short_repr(value)}; expected a whole number ≥ 1"
            )
        return value

    def need(*names):
        for n in names:
            if cfg.get(n) is not None:
                return count(n)
        raise ScenarioError("model.hf_config", path, f"config.json lacks {' or '.join(names)}")

    if kind in _GPT2_TYPES or "n_embd" in cfg:
        h = need("n_embd", "hidden_size")
        max_pos = need("n_positions", "max_position_embeddings")
        return TransformerConfig(
            name=file.stem,
            layers=need("n_layer", "num_hidden_layers"),
            hidden=h,
            heads=need("n_head", "num_attention_heads"),
            ffn_hidden=count("n_inner", 4 * h),
            vocab=need("vocab_size"),
            seq_len=seq_len or max_pos,
            max_position=max_pos,
            tied_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        )
    heads = need("num_attention_heads")
    moe = _moe_fields(cfg, kind, count, path)
    # Mistral's window; Qwen2 writes one beside use_sliding_window: false (then unused)
    window = count("sliding_window", 0) if cfg.get("use_sliding_window", True) else 0
    window, every = _windowed_layers(cfg, window, path)
    act = cfg.get("hidden_act", "silu")
    return TransformerConfig(
        name=file.stem,
        layers=need("num_hidden_layers"),
        hidden=need("hidden_size"),
        heads=heads,
        ffn_hidden=need("intermediate_size"),
        vocab=need("vocab_size"),
        seq_len=seq_len or need("max_position_embeddings"),
        kv_heads=count("num_key_value_heads", heads),
        gated_mlp=act in ("silu", "swiglu", "gelu_pytorch_tanh") or kind in ("llama", "mistral", "mixtral"),
        squared_relu=act == "relu2",
        # Nemotron's LayerNorm1P: a weight and a bias
        norm="layernorm" if kind == "nemotron" else "rmsnorm",
        position="rope",
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        # GPT-OSS's attention_bias gives its q, k, v (qkv_bias) and output projections biases
        bias=bool(cfg.get("attention_bias", False)) and kind != "gpt_oss",
        qkv_bias=kind in _QKV_BIAS_TYPES,
        attention_sinks=kind == "gpt_oss",
        dropout=False,
        head_size=count("head_dim", 0),
        sliding_window=window,
        full_attention_every=every,
        q_lora_rank=count("q_lora_rank", 0),
        kv_lora_rank=count("kv_lora_rank", 0),
        qk_rope_head_dim=count("qk_rope_head_dim", 0),
        qk_nope_head_dim=count("qk_nope_head_dim", 0),
        v_head_dim=count("v_head_dim", 0),
        mtp_layers=count("num_nextn_predict_layers", 0),
        **moe,
    )


def _windowed_layers(cfg: dict, window: int, path: str) -> tuple[int, int]:
    """(sliding window, full_attention_every) of a config.json's ``layer_types``: a window
    on every ``sliding_attention`` layer, the ``full_attention`` ones every n-th (layers
    n−1, 2n−1, …); the window alone when the list is absent."""
    types = cfg.get("layer_types")
    if types is None:
        return window, 0
    if (
        not isinstance(types, list)
        or len(types) != cfg.get("num_hidden_layers")
        or any(t not in _LAYER_TYPES for t in types)
    ):
        raise ScenarioError(
            "model.hf_config",
            path,
            f"layer_types: expected one of {', '.join(_LAYER_TYPES)} per layer (num_hidden_layers)",
        )
    full = [t == "full_attention" for t in types]
    if all(full) or not window:
        return 0, 0
    every = full.index(True) + 1 if any(full) else 0
    if any(f != (every > 0 and (i + 1) % every == 0) for i, f in enumerate(full)):
        raise ScenarioError(
            "model.hf_config",
            path,
            "layer_types: expected every n-th layer on full_attention and the others sliding_attention",
        )
    return window, every


def _moe_fields(cfg: dict, kind: str, count, path: str) -> dict:
    """The TransformerConfig MoE fields of a config.json (empty for a dense model)."""
    experts = count("num_local_experts", 0) or count("n_routed_experts", 0) or count("num_experts", 0)
    if experts <= 1:
        return {}
    if cfg.get("mlp_only_layers"):
        raise ScenarioError(
            "model.hf_config", path, "mlp_only_layers is not supported; expected it empty or absent"
        )
    score = str(cfg.get("scoring_func", "softmax"))
    if score not in ROUTER_SCORES:
        raise ScenarioError(
            "model.hf_config", path, f"scoring_func {score!r}; accepted: {', '.join(ROUTER_SCORES)}"
        )
    expert_ffn = count("moe_intermediate_size", 0)
    shared = count("n_shared_experts", 0) * expert_ffn or count("shared_expert_intermediate_size", 0)
    return {
        "experts": experts,
        "experts_per_token": count("num_experts_per_tok", 1),
        "moe_ffn_hidden": expert_ffn,
        "shared_ffn_hidden": shared,
        # Qwen2-MoE scales its shared expert by a sigmoid gate (a linear h → 1)
        "shared_expert_gate": kind == "qwen2_moe" and shared > 0,
        "dense_layers": count("first_k_dense_replace", 0),
        "moe_step": count("decoder_sparse_step", 0) or count("moe_layer_freq", 1),
        # DeepSeek's key: sigmoid scores (V3) or softmax (V2, and every model without it)
        "router_score": score,
    }


def hf_config_table() -> list[tuple[str, str]]:
    """(name, one-line description) of every shipped ``config.json`` (``model.hf_config:
    NAME``), for ``clustersim list``: parameters (active ones for MoE), layers, experts."""
    rows = []
    for file in sorted(DATA_HF.glob("*.json")):
        c = load_hf_config(file.stem)
        moe = (
            f", {c.experts} experts top-{c.experts_per_token} ({c.active_params() / 1e9:.1f}B active)"
            if c.experts > 1
            else ""
        )
        rows.append(
            (file.stem, f"{c.params() / 1e9:.1f}B params, l={c.layers} h={c.hidden} a={c.heads}{moe}")
        )
    return rows
