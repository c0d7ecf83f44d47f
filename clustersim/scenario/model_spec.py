"""The ``model`` section of a scenario: a synthetic model, a transformer (preset, HF
config or explicit sizes), a CNN preset or execution traces — one pydantic union chosen
by ``kind``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Discriminator,
    Tag,
    field_validator,
    model_validator,
)

from ..workload.model_presets import CNN_PRESETS, TRANSFORMER_PRESETS, model_preset_names
from .fields import Bytes, Range, Time, _Spec, known


class _ModelSection(_Spec):
    """Base of the ``model`` branches: an unknown key is named with the accepted ones here,
    since the loader cannot look inside the model union for them."""

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, raw: Any) -> Any:
        if isinstance(raw, dict):
            unknown = [k for k in raw if k not in cls.model_fields]
            if unknown:
                raise ValueError(
                    f"unknown field {unknown[0]!r}; accepted fields for kind "
                    f"{cls.model_fields['kind'].default}: {', '.join(sorted(cls.model_fields))}"
                )
        return raw


class SyntheticModel(_ModelSection):
    """A model described by per-layer, per-micro-batch costs — for exact tests and what-ifs.

    ``forward``/``backward`` are times per layer per micro-batch (``backward`` is the whole
    backward, B + W; ``backward_weight`` is its weight-gradient part W). ``activation`` is
    the bytes sent between consecutive stages per micro-batch and also the activation
    memory a layer keeps per in-flight micro-batch. ``params`` is parameter bytes per
    layer (the static memory of the layer). ``optimizer`` is time per stage per iteration.
    """

    kind: Literal["synthetic"] = "synthetic"
    layers: Annotated[int, Range(1, 100_000)]
    # upper bounds keep sums over layers, micro-batches and iterations finite
    forward: Annotated[Time, Range(0, 10**6)]
    backward: Annotated[Time, Range(0, 10**6)]
    backward_weight: Annotated[Time, Range(0, 10**6)] = 0.0
    activation: Annotated[Bytes, Range(0, 2**50)] = 0.0
    params: Annotated[Bytes, Range(0, 2**50)] = 0.0
    optimizer: Annotated[Time, Range(0, 10**6)] = 0.0


class TransformerModel(_ModelSection):
    """A decoder transformer: ``preset`` or ``hf_config`` (a config.json path), with any
    field below overriding it — or every required field (layers, hidden, heads, vocab,
    seq_len) given alone. Resolved by :mod:`clustersim.workload.resolve`."""

    kind: Literal["transformer"] = "transformer"
    preset: str | None = None
    hf_config: str | None = None
    name: str | None = None
    layers: Annotated[int | None, Range(1, 100_000)] = None
    hidden: Annotated[int | None, Range(1, 1_000_000)] = None
    heads: Annotated[int | None, Range(1, 100_000)] = None
    ffn_hidden: Annotated[int | None, Range(1, 10_000_000)] = None
    vocab: Annotated[int | None, Range(1, 10_000_000)] = None
    seq_len: Annotated[int | None, Range(1, 10_000_000)] = None
    kv_heads: Annotated[int | None, Range(1, 100_000)] = None
    gated_mlp: bool | None = None
    norm: Literal["layernorm", "rmsnorm"] | None = None
    position: Literal["learned", "rope"] | None = None
    max_position: Annotated[int | None, Range(1, 100_000_000)] = None
    tied_embeddings: bool | None = None
    bias: bool | None = None
    dropout: bool | None = None
    experts: Annotated[int | None, Range(1, 100_000)] = None
    experts_per_token: Annotated[int | None, Range(1, 1000)] = None
    #: FFN size of one routed expert (default ffn_hidden)
    moe_ffn_hidden: Annotated[int | None, Range(1, 10_000_000)] = None
    #: FFN size of the shared expert(s), fused into one MLP (0: none)
    shared_ffn_hidden: Annotated[int | None, Range(0, 10_000_000)] = None
    shared_expert_gate: bool | None = None
    #: leading layers that keep a dense MLP (DeepSeek first_k_dense_replace)
    dense_layers: Annotated[int | None, Range(0, 100_000)] = None
    #: every moe_step-th layer (after dense_layers) is MoE (Qwen decoder_sparse_step)
    moe_step: Annotated[int | None, Range(1, 100_000)] = None
    #: tokens over ceil(capacity_factor · T·k/E) per expert are dropped (0: no dropping)
    capacity_factor: Annotated[float | None, Range(0, 1000)] = None
    #: token-to-expert load: uniform, skew (Zipf exponent expert_skew, seed expert_seed),
    #: aux_loss (skew fitted to aux-loss routers' measured MaxVio), auto (aux_loss for a
    #: softmax router, else uniform; megatron_core's default), histogram
    expert_load: Literal["uniform", "skew", "aux_loss", "auto", "histogram"] | None = None
    expert_skew: Annotated[float | None, Range(0, 100)] = None
    expert_seed: Annotated[int | None, Range(0, 2**63 - 1)] = None
    expert_histogram: tuple[float, ...] | None = None
    #: head dim when it is not hidden / heads
    head_size: Annotated[int | None, Range(1, 100_000)] = None
    #: biases on the query, key and value projections only (Qwen2)
    qkv_bias: bool | None = None
    #: multi-head latent attention (DeepSeek-V2/V3): kv_lora_rank > 0 turns it on
    q_lora_rank: Annotated[int | None, Range(0, 1_000_000)] = None
    kv_lora_rank: Annotated[int | None, Range(0, 1_000_000)] = None
    qk_rope_head_dim: Annotated[int | None, Range(0, 100_000)] = None
    qk_nope_head_dim: Annotated[int | None, Range(0, 100_000)] = None
    v_head_dim: Annotated[int | None, Range(0, 100_000)] = None
    #: multi-token-prediction modules (DeepSeek-V3 num_nextn_predict_layers)
    mtp_layers: Annotated[int | None, Range(0, 100)] = None
    #: attention kernel: ``standard`` (Megatron-2021's unfused path, the default) or ``flash``
    attention: Literal["standard", "flash"] | None = None
    #: the fused kernel ``flash`` runs: fa2 (flash_attn, the default), fa3, cudnn (Transformer
    #: Engine's FusedAttention); the megatron_core and fsdp2 profiles fill cudnn
    attention_kernel: Literal["fa2", "fa3", "cudnn"] | None = None
    #: keys each query attends to at most (sliding-window attention, Mistral); 0 or unset: all
    sliding_window: Annotated[int | None, Range(0, 100_000_000)] = None
    #: every n-th layer attends to all keys beside the windowed ones (GPT-OSS: 2); 0: none
    full_attention_every: Annotated[int | None, Range(0, 100_000)] = None
    #: a learned sink logit per query head in the softmax (GPT-OSS)
    attention_sinks: bool | None = None
    #: ReLU² activation in the ungated MLP (Nemotron-4) instead of GeLU
    squared_relu: bool | None = None
    #: causal (decoder) mask; a flash kernel skips the masked half of the scores
    causal: bool | None = None
    #: CSV of measured op times overriding the cost model (op,phase,m,n,k,time_us)
    profile: str | None = None

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, name: str | None) -> str | None:
        return (
            name
            if name is None
            else known(name, TRANSFORMER_PRESETS, "transformer preset", model_preset_names())
        )


class CNNModel(_ModelSection):
    """A CNN preset (``vgg16``, ``resnet50``) at an image size and class count."""

    kind: Literal["cnn"] = "cnn"
    preset: str
    image_size: Annotated[int, Range(32, 8192)] = 224
    classes: Annotated[int, Range(1, 1_000_000)] = 1000
    profile: str | None = None

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, name: str) -> str:
        return known(name, CNN_PRESETS, "CNN preset", list(CNN_PRESETS))


class TraceModel(_ModelSection):
    """A workload read from execution traces: ``chakra`` is a folder of MLCommons Chakra ET
    files, one per rank (``<prefix>.<rank>.et``, as ASTRA-sim reads them), rank r running
    on ``gpu{r}`` of the cluster (docs/interop.md). The ops, their durations and bytes
    come from the trace (a node without a duration priced on ``cluster.gpu``); ``parallel``
    and ``training`` are not consulted. ``replay_dp``: replay a data-parallel trace on this
    many ranks, each keeping its micro-batches (:mod:`clustersim.interop.chakra_rescale`).
    ``replay_pp``: replay a pipeline trace at this many stages, a divisor of the trace's,
    consecutive stages merged (:mod:`clustersim.interop.chakra_restage`; before ``replay_dp``),
    or a multiple of it, stages split by layer where the trace carries layer labels
    (:mod:`clustersim.interop.chakra_split`)."""

    kind: Literal["trace"] = "trace"
    chakra: str
    replay_dp: Annotated[int, Range(1, 1_000_000)] | None = None
    replay_pp: Annotated[int, Range(1, 1_000_000)] | None = None


def _model_kind(raw: Any) -> str:
    """The union branch of a ``model`` section: its ``kind``, else cnn for a CNN preset,
    else transformer. Tags are spelled like pydantic's own branch tags (``literal[...]``)
    so the loader drops them from error paths (``model.layers``, not ``model.<tag>.layers``)."""
    if isinstance(raw, BaseModel):
        kind = raw.kind
    elif isinstance(raw, dict):
        preset = raw.get("preset")
        kind = raw.get("kind") or (
            "cnn" if isinstance(preset, str) and preset in CNN_PRESETS else "transformer"
        )
    else:
        return "literal['transformer']"
    known_kind = kind in ("synthetic", "transformer", "cnn", "trace")
    return f"literal['{kind}']" if known_kind else "literal['transformer']"


ModelSpec = Annotated[
    Annotated[SyntheticModel, Tag("literal['synthetic']")]
    | Annotated[TransformerModel, Tag("literal['transformer']")]
    | Annotated[CNNModel, Tag("literal['cnn']")]
    | Annotated[TraceModel, Tag("literal['trace']")],
    Discriminator(_model_kind),
]
