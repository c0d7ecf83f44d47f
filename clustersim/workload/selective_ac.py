"""What a layer keeps under ``training.recompute: selective``, as each framework selects it.

* **Megatron** (``megatron_2021``, ``megatron_core``) and DeepSpeed: Korthikanti et al.
  2022 §5 — the attention core (scores to context) is recomputed, every other activation
  kept (the ``attention_core`` ops): Megatron-Core's ``recompute_modules`` default
  ``core_attn``. ``training.recompute_modules`` names Megatron-Core's others this models
  (megatron/core/transformer/transformer_config.py ``recompute_modules``):
  ``mla_up_proj`` re-runs multi-head latent attention's up projections in the backward
  and keeps only their latent inputs, so the Q, K and V the attention kernel would keep
  are gone (``multi_latent_attention.py``, ``CheckpointWithoutOutput`` around the up
  projections and RoPE; the attention kernel's output and log-sum-exp stay); ``moe_act``
  re-runs the routed experts' activation function, so its output — the down projection's
  input — is not kept (``experts.py``, ``CheckpointWithoutOutput`` around the activation);
  ``layernorm`` re-runs the norms that are modules of their own and drops their outputs
  (``transformer_layer.py``: a norm fused into the next linear — Transformer Engine's
  ``LayerNormLinear``, an ``IdentityOp`` in the layer — is not recomputed). Under
  Megatron-Core's TE layer specs that is the pre-MLP norm before a MoE MLP, whose output the
  router keeps; MLA's separate input norm is not modelled (its output counted as kept).
* **torchtitan** (``fsdp2``): op-level selective activation checkpointing, the
  ``activation_checkpoint.mode = 'selective'``, ``selective_ac_option = 'op'`` of its
  Llama training configs (torchtitan/models/llama/train_configs/llama3_8b.toml). Each
  transformer block runs under ``checkpoint_wrapper`` with a policy that saves the outputs
  of the ops in ``_save_list`` — ``aten.mm`` except every second one, the SDPA kernels
  (output and log-sum-exp) and the functional reduce-scatter — and recomputes all else in
  the backward (torchtitan/parallelisms/parallelize_llama.py ``_apply_ac_to_transformer_block``
  at 004b314, of the time of its docs/performance.md memory tables; its list names the
  flash and memory-efficient SDPA kernels, later ones also cuDNN's). The
  block's input is kept by the checkpoint itself. A Llama block's matmuls run ``wq, wk, wv,
  wo`` then ``w1, w3, w2`` (``w2(silu(w1(x)) * w3(x))``), so the policy keeps ``wq``, ``wv``,
  ``w1`` and ``w2``'s outputs and recomputes ``wk``, ``wo`` and ``w3`` with the norms, RoPE,
  the SwiGLU product and the residual adds.

The op-level policy is modelled for the blocks torchtitan's policy was written for: dense
Llama blocks without linear biases (a biased linear is ``addmm``, not ``mm``), without
multi-head latent attention, and without context parallelism (ring attention calls SDPA
once per ring step); other models are refused with the options that are modelled.
"""

from __future__ import annotations

from ..errors import ScenarioError
from .ops import ExpertRanks, LayerOp, TPComm, gemm
from .transformer import TransformerConfig

#: training.framework → how ``recompute: selective`` selects: ``attention_core``
#: (Korthikanti) or torchtitan's ``op`` policy (module doc)
SELECTIVE_POLICY = {
    "megatron_2021": "attention_core",
    "megatron_core": "attention_core",
    "deepspeed": "attention_core",
    "fsdp2": "op",
}
#: Megatron-Core's ``recompute_modules`` default
MEGATRON_MODULES = ("core_attn",)
#: multi-head latent attention's up projections (:mod:`.mla`): ``q_proj`` without query compression
MLA_UP = ("q_up", "q_proj", "kv_up")
#: flash / SDPA log-sum-exp element size (fp32)
LSE_BYTES = 4
#: the ops of a Llama block torchtitan's op policy recomputes whole (the kernels after the
#: saved outputs: norms, RoPE, the SwiGLU product, residual adds, the attention output
#: projection ``wo`` — the 4th matmul)
OP_RECOMPUTED = ("norm1", "rope", "attn_out", "residual1", "norm2", "mlp_act", "residual2")


def policy_of(framework: str) -> str:
    """How ``framework`` selects under ``recompute: selective`` (:data:`SELECTIVE_POLICY`)."""
    return SELECTIVE_POLICY[framework]


def check_op_policy(cfg: TransformerConfig, cp: int) -> None:
    """Refuse a model the op-level policy is not modelled for (module doc)."""
    why = (
        "a MoE model"
        if cfg.experts > 1
        else "multi-head latent attention"
        if cfg.mla
        else "biased linears"
        if cfg.bias or cfg.qkv_bias
        else f"context parallelism {cp}"
        if cp > 1
        else ""
    )
    if why:
        raise ScenarioError(
            "training.recompute",
            "selective",
            f"torchtitan's op-level selective checkpointing (fsdp2) is modelled for dense Llama "
            f"blocks, not {why}; use recompute none or full",
        )


def matmul_widths(cfg: TransformerConfig, tp: int) -> list[float]:
    """Output elements per token of a Llama block's ``aten.mm`` calls in forward order on one
    TP rank: ``wq, wk, wv`` (column-parallel), ``wo`` (row-parallel: the whole ``h`` before its
    reduce-scatter), ``w1, w3`` (column-parallel; ``w3`` only gated) and ``w2`` (row-parallel)."""
    d, h, f = cfg.head_dim, cfg.hidden, cfg.ffn_hidden
    kv = max(1, cfg.n_kv // tp) * d
    up = [f / tp, f / tp] if cfg.gated_mlp else [f / tp]
    return [cfg.heads // tp * d, kv, kv, h, *up, h]


def op_saved_bytes(cfg: TransformerConfig, b: int, tp: int, sp: bool, e: int) -> float:
    """Bytes one block keeps for its backward under torchtitan's op policy (module doc): the
    block input, every other matmul's output (the 1st, 3rd, …), SDPA's output and fp32
    log-sum-exp, and with sequence parallelism the two reduce-scatters' outputs."""
    tokens, h = b * cfg.seq_len, cfg.hidden
    at = cfg.heads // tp
    block_in = h / tp if sp else h
    kept_mm = sum(matmul_widths(cfg, tp)[0::2])
    sdpa = at * cfg.head_dim * e + at * LSE_BYTES
    reduce_scatter = 2 * h / tp if sp else 0.0
    return tokens * ((block_in + kept_mm + reduce_scatter) * e + sdpa)


def op_recompute_ops(layer: list, cfg: TransformerConfig, b: int, tp: int, e: int) -> list:
    """The ops a block's backward re-runs first under the op policy: the recomputed
    kernels of ``layer`` (:data:`OP_RECOMPUTED`, their TP all-gathers) and the two matmuls
    recomputed beside kept ones — ``wk`` (of the fused ``qkv``) and ``w3`` (of ``mlp_up``)."""
    tokens, h = b * cfg.seq_len, cfg.hidden
    widths = matmul_widths(cfg, tp)
    rerun = [
        op
        for op in layer
        if (op.fwd == "all_gather" if isinstance(op, TPComm) else op.name.partition(".")[0] in OP_RECOMPUTED)
    ]
    again = [gemm("wk", tokens, int(widths[1]), h, e)]
    if cfg.gated_mlp:
        again.append(gemm("w3", tokens, int(widths[5]), h, e))
    return rerun + again


def check_modules(training, cfg: TransformerConfig, cp: int) -> tuple[str, ...]:
    """The recompute modules of ``training`` (a ``TrainingSpec``) on model ``cfg``:
    Megatron-Core's default unless stated; refused where they cannot apply."""
    modules = training.recompute_modules
    if modules is None:
        return MEGATRON_MODULES
    if training.recompute != "selective" or policy_of(training.framework) != "attention_core":
        raise ScenarioError(
            "training.recompute_modules",
            modules,
            f"Megatron's selective recompute (recompute: selective under a Megatron framework; "
            f"here recompute {training.recompute!r}, framework {training.framework!r}); leave it unset",
        )
    if "moe_act" in modules and cfg.experts <= 1:
        raise ScenarioError("training.recompute_modules", modules, "moe_act for a MoE model; drop it")
    if "mla_up_proj" in modules and not (cfg.mla and cfg.attention == "flash" and cp == 1):
        raise ScenarioError(
            "training.recompute_modules",
            modules,
            "mla_up_proj for a multi-head latent attention model with flash attention and no "
            "context parallelism; drop it",
        )
    return tuple(modules)


#: the expert MLP's activation and down-projection ops, per expert (``SequentialMLP``,
#: :func:`.moe.expert_ops`) or grouped (:mod:`.moe_experts`)
EXPERT_ACT = ("expert_act", "experts_act")
EXPERT_DOWN = ("expert_down", "experts_down")


def module_recompute(layer: list, modules: tuple[str, ...], b: int, seq: int, at: int) -> tuple[list, float]:
    """(the ops a layer's backward re-runs first, the bytes it no longer keeps) under
    Megatron-Core's ``modules`` (module doc), ``at`` attention heads on this GPU, ``b``
    sequences of ``seq`` tokens."""
    rerun, dropped = [], 0.0
    # the pre-MLP norm is a module of its own (not fused into the next linear) only before
    # a MoE MLP: there ``layernorm`` re-runs it and drops its output, which the router keeps
    norm = "layernorm" in modules and any(getattr(op, "name", "") == "moe_router" for op in layer)
    for op in layer:
        if isinstance(op, ExpertRanks) and "moe_act" in modules:
            rerun.append(op.map(lambda ops: [o for o in ops if o.name in EXPERT_ACT]))
            dropped += op.activation - max(
                sum(o.activation for o in ops if o.name not in EXPERT_DOWN) for ops in op.ranks
            )
        if not isinstance(op, LayerOp):
            continue
        if op.name in EXPERT_ACT + EXPERT_DOWN and "moe_act" in modules:  # experts on this GPU
            rerun += [op] if op.name in EXPERT_ACT else []
            dropped += op.activation if op.name in EXPERT_DOWN else 0.0
        elif op.attention_core and "core_attn" in modules:
            rerun.append(op)
            dropped += op.activation
        elif op.name in MLA_UP and "mla_up_proj" in modules:
            rerun.append(op)
        elif norm and op.name.partition(".")[0] == "norm2":
            rerun.append(op)
        elif norm and op.name == "moe_router":
            dropped += op.activation
        elif op.name == "flash_attention" and "mla_up_proj" in modules:
            dropped += op.activation - b * seq * at * LSE_BYTES  # its Q, K and V
    return rerun, dropped
