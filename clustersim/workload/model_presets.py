"""Model presets: the names users type in ``model.preset``.

Transformer shapes with their sources; ``published_params`` is the size the source
states (what the parameter-count tests compare against). CNN presets are listed in
:data:`CNN_PRESETS` (their layer tables live in :mod:`.cnn`).
"""

from __future__ import annotations

from .transformer import TransformerConfig

_MEGATRON = "Narayanan et al. 2021 (SC21) Table 1 / megatron_weak_scaling.csv"


def _gpt(
    name: str, params_b: float, layers: int, hidden: int, heads: int, vocab: int = 51200, seq: int = 2048
) -> TransformerConfig:
    # GPT as trained by Megatron-LM: ffn = 4h, learned positions, tied embeddings, biases.
    return TransformerConfig(
        name, layers, hidden, heads, 4 * hidden, vocab, seq, published_params=params_b * 1e9
    )


def _llama(
    name: str, params_b: float, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int, seq: int
) -> TransformerConfig:
    # LLaMA: SwiGLU, RMSNorm, RoPE, untied output matrix, no biases, no dropout.
    return TransformerConfig(
        name,
        layers,
        hidden,
        heads,
        ffn,
        vocab,
        seq,
        kv_heads=kv,
        gated_mlp=True,
        norm="rmsnorm",
        position="rope",
        tied_embeddings=False,
        bias=False,
        dropout=False,
        published_params=params_b * 1e9,
    )


#: preset name → (config, source)
TRANSFORMER_PRESETS: dict[str, tuple[TransformerConfig, str]] = {
    c.name: (c, src)
    for c, src in (
        # Megatron weak-scaling models (Table 1): params_b, layers, hidden, heads
        (_gpt("gpt-1.7b", 1.7, 24, 2304, 24), _MEGATRON),
        (_gpt("gpt-3.6b", 3.6, 30, 3072, 32), _MEGATRON),
        (_gpt("gpt-7.5b", 7.5, 36, 4096, 32), _MEGATRON),
        (_gpt("gpt-18.4b", 18.4, 40, 6144, 48), _MEGATRON),
        (_gpt("gpt-39.1b", 39.1, 48, 8192, 64), _MEGATRON),
        (_gpt("gpt-76.1b", 76.1, 60, 10240, 80), _MEGATRON),
        (_gpt("gpt-145.6b", 145.6, 80, 12288, 96), _MEGATRON),
        (_gpt("gpt-310.1b", 310.1, 96, 16384, 128), _MEGATRON),
        (_gpt("gpt-529.6b", 529.6, 105, 20480, 128), _MEGATRON),
        (_gpt("gpt-1t", 1008.0, 128, 25600, 160), _MEGATRON),
        # Korthikanti et al. 2022 Table 3 (22B; 175B = GPT-3; 530B = MT-NLG)
        (_gpt("gpt-22b", 22.0, 48, 6144, 64), "Korthikanti et al. 2022 Table 3"),
        # GPT-3 (Brown et al. 2020 Table 2.1): 175B and 1.3B ("GPT-3 XL"), vocab 50257
        (_gpt("gpt3-175b", 175.0, 96, 12288, 96, vocab=50257), "Brown et al. 2020 Table 2.1"),
        (_gpt("gpt-1.3b", 1.3, 24, 2048, 16, vocab=50257), "Brown et al. 2020 Table 2.1 (GPT-3 XL)"),
        # LLaMA-2 (Touvron et al. 2023, HF config.json of meta-llama/Llama-2-*-hf)
        (
            _llama("llama2-7b", 6.74, 32, 4096, 32, 32, 11008, 32000, 4096),
            "Touvron et al. 2023; HF Llama-2-7b-hf",
        ),
        (
            _llama("llama2-13b", 13.0, 40, 5120, 40, 40, 13824, 32000, 4096),
            "Touvron et al. 2023; HF Llama-2-13b-hf",
        ),
        (
            _llama("llama2-70b", 69.0, 80, 8192, 64, 8, 28672, 32000, 4096),
            "Touvron et al. 2023; HF Llama-2-70b-hf",
        ),
        # LLaMA-3 (Meta 2024, "The Llama 3 Herd of Models" Table 3; HF config.json)
        (
            _llama("llama3-8b", 8.03, 32, 4096, 32, 8, 14336, 128256, 8192),
            "Llama 3 Herd Table 3; HF Meta-Llama-3-8B",
        ),
        (
            _llama("llama3-70b", 70.6, 80, 8192, 64, 8, 28672, 128256, 8192),
            "Llama 3 Herd Table 3; HF Meta-Llama-3-70B",
        ),
        (
            _llama("llama3-405b", 405.9, 126, 16384, 128, 8, 53248, 128256, 8192),
            "Llama 3 Herd Table 3; HF Meta-Llama-3.1-405B",
        ),
    )
}

#: CNN preset name → source (layer tables in clustersim.workload.cnn)
CNN_PRESETS: dict[str, str] = {
    "vgg16": "Simonyan & Zisserman 2015 (configuration D), 224×224, 1000 classes",
    "resnet50": "He et al. 2016 Table 1 (50-layer, v1.5 stride in 3×3), 224×224, 1000 classes",
}


def model_preset_names() -> list[str]:
    """Every model preset name (transformers, then CNNs)."""
    return [*TRANSFORMER_PRESETS, *CNN_PRESETS]


def model_preset_table() -> list[tuple[str, str]]:
    """(name, one-line description) of every preset, for ``clustersim list``."""
    rows = []
    for name, (c, _src) in TRANSFORMER_PRESETS.items():
        rows.append(
            (name, f"{c.params() / 1e9:.1f}B params, l={c.layers} h={c.hidden} a={c.heads} s={c.seq_len}")
        )
    rows += [(name, src) for name, src in CNN_PRESETS.items()]
    return rows
