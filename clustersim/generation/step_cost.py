"""The per-GPU cost of one generation step: prefill chunks and decode tokens in one forward.

A step runs the model forward once over a batch of sequences, each contributing ``new``
tokens on top of ``context`` tokens already in its KV cache (:class:`StepSeq`). It is priced
by the same kernel-level cost model as training (:mod:`clustersim.workload.cost_model`) on
the ops of :mod:`clustersim.workload.transformer_ops`, run on the step's T = Σ new tokens
(vLLM's flattened batch: every linear and memory-bound kernel runs over the T tokens), with
three serving kernels in place of the training ones:

* **attention** — the training attention core is replaced by (a) one fused FlashAttention
  varlen kernel over the prefill chunks (sequences with new > 1 or no context): FLOPs of the
  chunk's rows of the causal square, ``flash_forward_flops(c + n) − flash_forward_flops(c)``,
  at the calibrated attention efficiency for the longest key length among them; and (b) one
  paged decode-attention kernel over the decode sequences (new = 1, context > 0): memory-bound,
  it reads every sequence's K and V (``2 · kv_heads/tp · head_dim`` elements per cached token,
  within the sliding window where a layer has one) plus its query and writes its output,
  priced at the achieved HBM bandwidth (:mod:`clustersim.workload.memory_bandwidth`);
* **KV write** — vLLM's ``reshape_and_cache``: the T tokens' new K and V read and written
  into their blocks, a memory-bound kernel;
* **skinny linears** — a linear over at most :data:`SKINNY_TOKENS` tokens runs one tile row
  (Hopper's smallest ``wgmma`` tile is 64 rows; cuBLAS/TRT-LLM pick GEMV or one-row-of-tiles
  kernels there): every weight is read once and used for ≤ 64 multiply-adds, below every
  catalog GPU's ridge point, so it is priced as a memory-bound kernel moving the weights, its
  input and its output at the achieved bandwidth. Above it, the calibrated GEMM shape model
  prices it as in training. The shape model was fitted on M ≥ 256 GEMMs and is pessimistic
  below ~128 tokens on H100 (its ``dim_half`` term); no public skinny-GEMM sweep was found to
  check it (docs/generation.md).

A MoE layer runs training's MoE ops (router, permute, experts, unpermute, the token
dispatcher's collectives under expert parallelism) with its routed experts' GEMMs over the
weights of the experts the step's tokens touch: :mod:`.moe_step`.

The output layer computes the logits of each sequence's last token only (sampling needs no
others; no loss), after the final norm over those tokens. Not priced: the sampler, the
detokenizer and the scheduler's own CPU time beyond ``training.fixed_costs`` (whose
``microbatch_overhead`` applies once per step, as a pass's host gap).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import ScenarioError
from ..memory_kinds import StaticMemory
from ..workload.attention import attention_core_ops, flash_forward_flops
from ..workload.ops import AttentionShape, LayerOp, TPComm, Work, elementwise
from ..workload.resolve import resolve_transformer
from ..workload.segments import compute_time, forward_items
from ..workload.stage_builder import FixedCosts, TrainSetup, cost_model_of
from ..workload.stage_cost import StageCost
from ..workload.transformer_ops import embedding_ops, layer_ops, output_ops
from .moe_step import step_moe_ops

#: a linear over at most this many tokens is a weights-streaming (memory-bound) kernel
SKINNY_TOKENS = 64


@dataclass(frozen=True, order=True)
class StepSeq:
    """One sequence of a step: ``new`` tokens computed on top of ``context`` cached ones."""

    new: int
    context: int

    @property
    def decode(self) -> bool:
        """A decode token: one new token over a non-empty cache (the paged kernel runs it)."""
        return self.new == 1 and self.context > 0


def kv_bytes_per_token(cfg, tp: int, e: int) -> float:
    """Bytes of K and V one layer caches per token on one GPU (``kv_heads/tp`` heads)."""
    return 2.0 * max(1, cfg.n_kv // tp) * cfg.head_dim * e


def check_generation_model(sc) -> None:
    """Refuse, naming the field, a model the generation step cannot price."""
    if sc.model.kind != "transformer":
        raise ScenarioError(
            "model.kind", sc.model.kind, "generation runs transformer models; accepted: transformer"
        )
    cfg = resolve_transformer(sc.model)
    if cfg.mla:
        raise ScenarioError(
            "model.kv_lora_rank",
            cfg.kv_lora_rank,
            "MLA's latent KV cache is not modelled for generation; accepted: 0",
        )
    if cfg.mtp_layers:
        raise ScenarioError(
            "model.mtp_layers", cfg.mtp_layers, "generation samples one token a step; accepted: 0"
        )


def _skinny(op, tokens: int):
    """``op`` with a linear over ≤ :data:`SKINNY_TOKENS` tokens priced memory-bound (module doc)."""
    if not isinstance(op, LayerOp):
        return op
    w = op.fwd
    if w.gemm is None or w.attention is not None or w.gemm[0] > SKINNY_TOKENS or tokens > SKINNY_TOKENS:
        return op
    return replace(op, fwd=Work(w.flops, w.bytes))


def _attention(cfg, seqs: tuple[StepSeq, ...], at: int, kvt: int, e: int, window: int) -> list[LayerOp]:
    """The serving attention kernels of one layer for ``seqs`` (module doc)."""
    d = cfg.head_dim
    ops = []
    pre = [s for s in seqs if not s.decode]
    if pre:
        flops = sum(
            flash_forward_flops(1, s.context + s.new, at, d, True, window)
            - flash_forward_flops(1, s.context, at, d, True, window)
            for s in pre
        )
        n = sum(s.new for s in pre)
        keys = max(s.context + s.new for s in pre)
        keys = min(keys, window) if window else keys
        read = sum(min(s.context + s.new, window) if window else s.context + s.new for s in pre)
        nbytes = 2 * n * at * d * e + read * 2 * kvt * d * e  # Q in, O out, the K and V it reads
        shape = AttentionShape(d, keys, True, False, cfg.attention_kernel)
        ops.append(LayerOp("prefill_attention", Work(flops, nbytes, attention=shape), Work()))
    dec = [s for s in seqs if s.decode]
    if dec:
        cached = sum(min(s.context + 1, window) if window else s.context + 1 for s in dec)
        flops = 4.0 * at * d * cached
        nbytes = cached * 2 * kvt * d * e + len(dec) * 2 * at * d * e
        ops.append(LayerOp("decode_attention", Work(flops, nbytes), Work()))
    tokens = sum(s.new for s in seqs)
    ops.append(elementwise("kv_write", tokens * 2 * kvt * d, 2 * e, 0))
    return ops


def _layer(cfg, seqs, tp: int, e: int, split, kernels: str, shape: tuple[bool, int]) -> list:
    """One layer's ops for the step: the training layer's over T tokens, attention replaced;
    ``shape``: (MoE, sliding window) — a MoE layer's experts as :mod:`.moe_step` says
    (``split``: their expert parallelism)."""
    moe, window = shape
    tokens = sum(s.new for s in seqs)
    at, kvt = cfg.heads // tp, max(1, cfg.n_kv // tp)
    base = replace(cfg, seq_len=tokens, sliding_window=window)
    core = {op.name for op in attention_core_ops(base, 1, at, kvt, e)}
    out, placed = [], False
    ops = layer_ops(base, 1, tp, False, e, moe, split=split, kernels=kernels)
    if moe:
        ops = step_moe_ops(ops, cfg, split, tp, tokens, e, SKINNY_TOKENS)
    for op in ops:
        if isinstance(op, LayerOp) and op.name in core:
            if not placed:
                out += _attention(cfg, seqs, at, kvt, e, window)
                placed = True
            continue
        out.append(_skinny(op, tokens) if isinstance(op, LayerOp) else op)
    return out


def _output(cfg, sampled: int, tp: int, e: int, kernels: str) -> list:
    """Final norm and logits of the ``sampled`` sequences' last tokens, gathered from the
    vocab-parallel TP ranks to sample; no loss."""
    ops = output_ops(replace(cfg, seq_len=sampled), 1, tp, False, e, kernels)
    ops = [_skinny(op, sampled) for op in ops if op.name.partition(".")[0] != "cross_entropy"]
    if tp > 1:
        ops.append(TPComm("tp logits gather", "all_gather", "", int(sampled * cfg.vocab * e)))
    return ops


class StepModel:
    """A scenario's step pricing, set up once (its transformer, cost model and fixed costs):
    :meth:`ops` and :meth:`costs` of any step. ``partition``: layers per pipeline stage."""

    def __init__(self, sc, partition: list[int]):
        self.sc, self.partition = sc, list(partition)
        self.st = TrainSetup.of(sc)
        # serving runs the model in eval mode: no dropout kernels
        self.cfg = replace(resolve_transformer(sc.model), dropout=False)
        self.cm = cost_model_of(sc, self.st)

    def ops(self, seqs: tuple[StepSeq, ...], sampled: int) -> list[list]:
        """Per pipeline stage, the ops of one GPU in one step of ``seqs`` of which
        ``sampled`` sample a token from their last one (module doc)."""
        cfg, st = self.cfg, self.st
        tp, e = st.tp, st.e
        tokens = sum(s.new for s in seqs)
        shapes = cfg.layer_shapes()
        layers = {k: _layer(cfg, seqs, tp, e, st.split, st.kernels, k) for k in sorted(set(shapes))}
        emb = embedding_ops(replace(cfg, seq_len=tokens), 1, tp, False, e)
        out = _output(cfg, sampled, tp, e, st.kernels)
        stages, start = [], 0
        for k, n in enumerate(self.partition):
            ops = (emb if k == 0 else []) + [op for key in shapes[start : start + n] for op in layers[key]]
            stages.append(ops + (out if k == len(self.partition) - 1 else []))
            start += n
        return stages

    def costs(self, seqs: tuple[StepSeq, ...], sampled: int) -> list[StageCost]:
        """The StageCost of every pipeline stage for one step (:meth:`ops`) on
        ``cluster.gpu``: the step's forward in ``passes["F"]``, priced as the stage builder
        prices a pass (kernels without their launches, which lead the pass with the host's wait)."""
        cfg, st, cm = self.cfg, self.st, self.cm
        e = st.e
        tokens = sum(s.new for s in seqs)
        fixed = FixedCosts.of(self.sc, cm, st.precision, tokens * cfg.hidden * e)
        km = replace(cm.without_launch(), host=fixed.host)
        stages = self.ops(seqs, sampled)
        costs = []
        for k, ops in enumerate(stages):
            seg = fixed.pass_segments([forward_items(ops, km)], st.granularity)[0]
            t, flops = compute_time(seg)
            params = sum(op.params for op in ops if hasattr(op, "params"))
            costs.append(
                StageCost(
                    forward=t,
                    backward=0.0,
                    backward_weight=0.0,
                    activation_bytes=int(0 if k == len(stages) - 1 else tokens * cfg.hidden * e),
                    activation_memory=0,
                    optimizer=0.0,
                    forward_flops=flops,
                    static=StaticMemory(weights=int(params * e)),
                    passes={"F": seg},
                    pass_overhead=fixed.pass_overhead,
                )
            )
        return costs
