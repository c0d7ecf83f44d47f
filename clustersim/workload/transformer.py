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
    masks (GPT training; LLaMA trains without); ``experts``/``experts_per_token`` make
    the MLP a mixture of experts (Mixtral): all experts count as parameters, only the
    chosen ones as FLOPs.
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
    attention: str = "standard"
    causal: bool = True
    published_params: float = 0.0

    @property
    def n_kv(self) -> int:
        """Key/value heads (= heads unless grouped-query attention)."""
        return self.kv_heads or self.heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def positions(self) -> int:
        """Learned position embeddings held (0 with RoPE)."""
        return (self.max_position or self.seq_len) if self.position == "learned" else 0

    # ---- parameters -------------------------------------------------------------------
    def attention_params(self) -> int:
        h, kv = self.hidden, self.n_kv * self.head_dim
        weights = h * h + 2 * h * kv + h * h
        return weights + ((h + 2 * kv + h) if self.bias else 0)

    def mlp_params(self) -> int:
        """One expert's MLP (gated: gate, up, down) with biases if any."""
        h, f = self.hidden, self.ffn_hidden
        mats = 3 if self.gated_mlp else 2
        biases = (f * (mats - 1) + h) if self.bias else 0
        return mats * h * f + biases

    def norm_params(self) -> int:
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden

    def layer_params(self) -> int:
        """Parameters of one transformer layer (GPT: 12h² + 13h)."""
        router = self.hidden * self.experts if self.experts > 1 else 0
        return self.attention_params() + self.experts * self.mlp_params() + router + 2 * self.norm_params()

    def embedding_params(self) -> int:
        return (self.vocab + self.positions) * self.hidden

    def output_params(self) -> int:
        """Final norm, plus the output matrix when not tied to the input embedding."""
        return self.norm_params() + (0 if self.tied_embeddings else self.vocab * self.hidden)

    def params(self) -> int:
        """Total parameters."""
        return self.layers * self.layer_params() + self.embedding_params() + self.output_params()

    # ---- FLOPs ------------------------------------------------------------------------
    def layer_forward_flops(self, tokens_batch: int) -> float:
        """Matmul FLOPs of one layer's forward for ``b`` sequences (GPT: 24bsh² + 4bs²h)."""
        b, s, h, f = tokens_batch, self.seq_len, self.hidden, self.ffn_hidden
        kv = self.n_kv * self.head_dim
        qkv_out = 2 * b * s * h * (h + 2 * kv) + 2 * b * s * h * h
        attention = 4 * b * s * s * h
        mlp = 2 * b * s * h * f * (3 if self.gated_mlp else 2) * self.experts_per_token
        return qkv_out + attention + mlp

    def logits_forward_flops(self, batch: int) -> float:
        return 2.0 * batch * self.seq_len * self.hidden * self.vocab

    def iteration_flops(self, global_batch: int, recompute: bool = True) -> float:
        """Matmul FLOPs of one iteration: forward, backward (2×) and, with ``recompute``,
        one more forward of every layer (Megatron's convention for its TFLOP/s)."""
        per_layer = self.layer_forward_flops(global_batch) * self.layers
        return per_layer * (4 if recompute else 3) + 3 * self.logits_forward_flops(global_batch)


def megatron_params(layers: int, hidden: int, vocab: int, seq: int) -> float:
    """Narayanan et al. 2021 eq. (2): P = 12lh²(1 + 13/(12h) + (V + s)/(12lh))."""
    lh2 = 12 * layers * hidden**2
    return lh2 * (1 + 13 / (12 * hidden) + (vocab + seq) / (12 * layers * hidden))


def megatron_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021 eq. (3), full recompute: 96Bslh²(1 + s/(6h) + V/(16lh))."""
    return 96 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
