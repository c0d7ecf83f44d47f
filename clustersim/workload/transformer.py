"""Decoder-only transformers (GPT, LLaMA, Mixtral): shape, parameter count, model FLOPs.

A :class:`TransformerConfig` is the resolved shape of a model — from a preset
(:mod:`.model_presets`), a Hugging Face ``config.json`` (:mod:`.hf_config`) or the
scenario's own fields. Its per-layer operations, with FLOPs, bytes and activation
memory per GPU, are built by :mod:`.transformer_ops`; this module holds the closed forms
the tests check them against (Narayanan et al. 2021, Korthikanti et al. 2022).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TransformerConfig:
    """Shape of a decoder-only transformer.

    ``kv_heads`` < ``heads`` is grouped-query attention; ``gated_mlp`` is SwiGLU (three
    MLP matrices); ``norm`` is ``layernorm`` (weight + bias) or ``rmsnorm`` (weight);
    ``position`` ``learned`` adds ``max_position × hidden`` parameters (GPT), ``rope`` none;
    ``bias`` adds linear biases (GPT); ``dropout`` adds Megatron's dropout kernels and
    masks (GPT training; LLaMA trains without); ``head_size`` sets the head dim when it
    is not ``hidden / heads`` (Qwen3); ``qkv_bias`` gives only the query, key and value
    projections biases (Qwen2).

    Mixture of experts (:mod:`.moe`): ``experts`` routed experts of FFN size
    ``moe_ffn_hidden`` (0: ``ffn_hidden``), ``experts_per_token`` chosen per token, a
    shared expert of FFN size ``shared_ffn_hidden`` (0: none) with an optional sigmoid
    gate (Qwen2-MoE); the first ``dense_layers`` layers keep a dense MLP of
    ``ffn_hidden`` (DeepSeek's ``first_k_dense_replace``) and after them every
    ``moe_step``-th layer is MoE (Qwen's ``decoder_sparse_step``); ``capacity_factor``
    (0: none) drops tokens over an expert's capacity; ``expert_load`` (``uniform``,
    ``skew`` with ``expert_skew``/``expert_seed``, ``histogram`` with
    ``expert_histogram``) spreads the tokens over the experts; ``router_score`` is the
    router's score function (``softmax``, or ``sigmoid`` as DeepSeek-V3's
    ``scoring_func``). All experts count as parameters; only the tokens each expert gets
    as FLOPs.

    Multi-head latent attention (:mod:`.mla`) when ``kv_lora_rank`` > 0, with
    ``q_lora_rank`` (0: no query compression), ``qk_rope_head_dim``,
    ``qk_nope_head_dim`` and ``v_head_dim``. ``mtp_layers`` multi-token-prediction
    modules (DeepSeek-V3 §2.2) each add a projection ``2h → h``, two norms, one layer and
    a second pass of the shared output head; their parameters are not in :meth:`params`
    (the published totals leave them out) but in :meth:`mtp_params`.

    ``attention`` ``flash`` runs the fused kernel ``attention_kernel`` (``fa2``, ``fa3``,
    ``cudnn``: :mod:`.attention_kernels`); ``sliding_window`` > 0 lets each query attend to
    at most that many keys (Mistral), 0 to all — the fused kernel skips the tiles outside
    the window, the ``standard`` path computes all s² scores and masks them (no change);
    ``full_attention_every`` n > 0 keeps every n-th layer (layers n−1, 2n−1, …) on full
    attention beside the windowed ones (GPT-OSS's alternating ``layer_types``: n = 2).
    ``attention_sinks`` gives every query head a learned sink logit in the softmax's
    denominator (GPT-OSS): ``heads`` parameters per layer, one exp per score row.

    ``squared_relu``: the (ungated) MLP's activation is ReLU² (Nemotron-4, Primer) instead
    of GeLU — its own kernels (:mod:`.kernel_impls` ``squared_relu``), the same two MLP
    matrices.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int
    kv_heads: int = 0
    gated_mlp: bool = False
    norm: str = "layernorm"
    position: str = "learned"
    max_position: int = 0
    tied_embeddings: bool = True
    bias: bool = True
    dropout: bool = True
    experts: int = 1
    experts_per_token: int = 1
    moe_ffn_hidden: int = 0
    shared_ffn_hidden: int = 0
    shared_expert_gate: bool = False
    dense_layers: int = 0
    moe_step: int = 1
    capacity_factor: float = 0.0
    expert_load: str = "uniform"
    expert_skew: float = 0.0
    expert_seed: int = 0
    expert_histogram: tuple[float, ...] = ()
    router_score: str = "softmax"
    head_size: int = 0
    qkv_bias: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    mtp_layers: int = 0
    attention: str = "standard"
    causal: bool = True
    attention_kernel: str = "fa2"
    sliding_window: int = 0
    full_attention_every: int = 0
    attention_sinks: bool = False
    squared_relu: bool = False
    published_params: float = 0.0

    @property
    def n_kv(self) -> int:
        """Key/value heads (= heads unless grouped-query attention)."""
        return self.kv_heads or self.heads

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden // self.heads

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        """MLA query/key head dim: the no-RoPE part plus the RoPE part."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def expert_ffn(self) -> int:
        """FFN size of one routed expert."""
        return self.moe_ffn_hidden or self.ffn_hidden

    def is_moe_layer(self, i: int) -> bool:
        """Whether layer ``i`` (0-based) has a MoE MLP (see class doc)."""
        return self.experts > 1 and i >= self.dense_layers and (i + 1) % self.moe_step == 0

    def layer_kinds(self) -> list[bool]:
        """``is_moe_layer`` of every layer, in order."""
        return [self.is_moe_layer(i) for i in range(self.layers)]

    def layer_window(self, i: int) -> int:
        """The sliding window of layer ``i`` (0-based): 0 (all keys) on the full-attention
        layers of ``full_attention_every``, else ``sliding_window``."""
        every = self.full_attention_every
        return 0 if every and (i + 1) % every == 0 else self.sliding_window

    def layer_shapes(self) -> list[tuple[bool, int]]:
        """(MoE MLP, sliding window) of every layer, in order: the layers that cost alike."""
        return [(self.is_moe_layer(i), self.layer_window(i)) for i in range(self.layers)]

    @property
    def positions(self) -> int:
        """Learned position embeddings held (0 with RoPE)."""
        return (self.max_position or self.seq_len) if self.position == "learned" else 0

    # ---- parameters -------------------------------------------------------------------
    def attention_params(self) -> int:
        if self.mla:
            from .mla import mla_params  # mla reads this class's fields

            return mla_params(self)
        h, q, kv = self.hidden, self.heads * self.head_dim, self.n_kv * self.head_dim
        weights = h * q + 2 * h * kv + q * h + (self.heads if self.attention_sinks else 0)
        return weights + ((q + 2 * kv + h) if self.bias else (q + 2 * kv) if self.qkv_bias else 0)

    def mlp_params(self, ffn: int = 0) -> int:
        """One MLP of FFN size ``ffn`` (default ``ffn_hidden``; gated: gate, up, down)
        with biases if any."""
        h, f = self.hidden, ffn or self.ffn_hidden
        mats = 3 if self.gated_mlp else 2
        biases = (f * (mats - 1) + h) if self.bias else 0
        return mats * h * f + biases

    def router_params(self) -> int:
        """The gate ``h × E`` (plus Qwen2-MoE's shared-expert gate ``h × 1``)."""
        return self.hidden * (self.experts + (1 if self.shared_expert_gate else 0))

    def moe_params(self, active: bool = False) -> int:
        """A MoE MLP: all routed experts (``active``: the ``k`` chosen), the shared
        expert and the router."""
        routed = self.experts_per_token if active else self.experts
        shared = self.mlp_params(self.shared_ffn_hidden) if self.shared_ffn_hidden else 0
        return routed * self.mlp_params(self.expert_ffn) + shared + self.router_params()

    def norm_params(self) -> int:
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden

    def layer_params(self, moe: bool | None = None, active: bool = False) -> int:
        """Parameters of one transformer layer (GPT: 12h² + 13h); ``moe`` chooses the
        MLP (default: MoE when the model has experts), ``active`` counts the chosen
        experts only."""
        moe = self.experts > 1 if moe is None else moe
        mlp = self.moe_params(active) if moe else self.mlp_params()
        return self.attention_params() + mlp + 2 * self.norm_params()

    def _over_layers(self, per_kind):
        """Σ over the layers of ``per_kind(moe)``, as count × value per kind (a dense
        model: ``layers × value``, exactly)."""
        kinds = self.layer_kinds()
        return sum(per_kind(moe) * kinds.count(moe) for moe in (False, True) if moe in kinds)

    def embedding_params(self) -> int:
        return (self.vocab + self.positions) * self.hidden

    def output_params(self) -> int:
        """Final norm, plus the output matrix when not tied to the input embedding."""
        return self.norm_params() + (0 if self.tied_embeddings else self.vocab * self.hidden)

    def params(self) -> int:
        """Total parameters (without multi-token-prediction modules)."""
        return self._over_layers(self.layer_params) + self.embedding_params() + self.output_params()

    def active_params(self) -> int:
        """Parameters one token uses: :meth:`params` with only the chosen routed experts
        (embedding and output matrices included, as Mistral and Qwen count them)."""
        active = self._over_layers(lambda moe: self.layer_params(moe, active=True))
        return active + self.embedding_params() + self.output_params()

    def mtp_params(self) -> int:
        """Parameters of the multi-token-prediction modules (embedding and output head
        shared with the main model): per module a ``2h → h`` projection, two input
        norms, a final norm and one (MoE, when the model has experts) layer."""
        h = self.hidden
        return self.mtp_layers * (2 * h * h + 3 * self.norm_params() + self.layer_params())

    # ---- FLOPs ------------------------------------------------------------------------
    def layer_forward_flops(self, tokens_batch: int, moe: bool | None = None) -> float:
        """Matmul FLOPs of one layer's forward for ``b`` sequences (GPT: 24bsh² + 4bs²h);
        a MoE layer's experts at ``k`` tokens per token (no drops), its shared expert
        and router GEMM."""
        b, s, h, f = tokens_batch, self.seq_len, self.hidden, self.ffn_hidden
        moe = self.experts > 1 if moe is None else moe
        if self.mla:
            from .mla import mla_forward_flops  # mla reads this class's fields

            attn = mla_forward_flops(self, b)
        else:
            q, kv = self.heads * self.head_dim, self.n_kv * self.head_dim
            qkv_out = 2 * b * s * h * (q + 2 * kv) + 2 * b * s * q * h
            attn = qkv_out + 4 * b * s * s * q
        mats = 3 if self.gated_mlp else 2
        if not moe:
            return attn + 2 * b * s * h * f * mats
        shared = 2 * b * s * h * self.shared_ffn_hidden * mats
        routed = 2 * b * s * h * self.expert_ffn * mats * self.experts_per_token
        return attn + routed + shared + 2 * b * s * self.router_params()

    def logits_forward_flops(self, batch: int) -> float:
        return 2.0 * batch * self.seq_len * self.hidden * self.vocab

    def iteration_flops(self, global_batch: int, recompute: bool = True) -> float:
        """Matmul FLOPs of one iteration: forward, backward (2×) and, with ``recompute``,
        one more forward of every layer (Megatron's convention for its TFLOP/s). Each
        multi-token-prediction module adds a layer, its ``2h → h`` projection and a pass
        of the output head."""
        b = global_batch
        per_layer = self._over_layers(lambda moe: self.layer_forward_flops(b, moe))
        per_layer += self.mtp_layers * self.layer_forward_flops(b)
        proj = 2.0 * b * self.seq_len * 2 * self.hidden * self.hidden
        head = self.logits_forward_flops(b) * (1 + self.mtp_layers) + self.mtp_layers * proj
        return per_layer * (4 if recompute else 3) + 3 * head


def megatron_params(layers: int, hidden: int, vocab: int, seq: int) -> float:
    """Narayanan et al. 2021 eq. (2): P = 12lh²(1 + 13/(12h) + (V + s)/(12lh))."""
    lh2 = 12 * layers * hidden**2
    return lh2 * (1 + 13 / (12 * hidden) + (vocab + seq) / (12 * layers * hidden))


def megatron_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021 eq. (3), full recompute: 96Bslh²(1 + s/(6h) + V/(16lh))."""
    return 96 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
