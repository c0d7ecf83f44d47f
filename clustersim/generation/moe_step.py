"""MoE layers in a generation step: the experts' weights a step reads, and expert parallelism.

A MoE layer of a step runs training's MoE ops (:mod:`clustersim.workload.moe`,
:mod:`clustersim.workload.moe_dispatch`, :mod:`clustersim.workload.moe_experts`,
:mod:`clustersim.workload.deepep`): the router GEMM and its softmax/top-k, the permute, the
routed experts at their token counts under ``model.expert_load``, the unpermute, the shared
expert, and with ``parallel.ep`` > 1 the token dispatcher's collectives over the EP group —
priced by the same cost model. What serving changes is the experts' regime.

**Touched experts.** With uniform routing each of T tokens picks k distinct experts of E,
so a given expert is missed by one token with probability 1 − k/E and by all T with
(1 − k/E)^T; the expected number of experts at least one token reaches is

    D(T) = E · (1 − (1 − k/E)^T)

(exact for the expectation: linearity over the E experts). An expert no token reaches runs
no GEMM and reads no weight. A routed expert GEMM whose rows per touched expert,
T·k / D(T), are at most :data:`.step_cost.SKINNY_TOKENS` is a weights-streaming kernel as
the dense skinny linears are: it is priced memory-bound, moving the fraction D(T)/E of the
experts' weights it holds (in expectation) plus its tokens' input and output; above that
it is a GEMM priced by the shape model as in training (where D(T) = E to within 1e-9 for
every shipped MoE model). In decode (T small) the expert GEMMs thus read the weights of
the experts the step touches, not all E. That is ``model.expert_load: uniform`` (the
default), whose token counts are expectations (T·k/E each). Under ``skew`` the seeded
draw's integer counts already say which experts are reached: one with no token runs
nothing (:mod:`clustersim.workload.moe`), one with tokens reads its weights whole, a GEMM
of ≤ SKINNY_TOKENS rows memory-bound; ``histogram`` likewise reads every expert of
non-zero weight whole (it errs high for small steps).

**Expert parallelism** (``parallel.ep`` > 1, ``etp`` × ``ep`` dividing ``tp``): attention runs
tensor-parallel over the replica's tp GPUs as configured (its all-reduce), and the MoE
layer is sequence-parallel — vLLM's ``sequence_parallel_chunk`` before the experts and
``tensor_model_parallel_all_gather`` after them (``vllm/model_executor/models/deepseek_v2.py``
under ``--enable-expert-parallel`` with an all-to-all backend): each TP rank routes its
T/tp share of the step's tokens, the dispatcher's all-to-all (``moe_token_dispatcher``:
``alltoall``, ``allgather``, or DeepEP's ``flex``) moves them to the ranks holding their
experts (E/ep per GPU), the combine brings them back, and a TP all-gather of the T tokens'
hidden states rebuilds the full batch for the next layer's attention. Megatron-Core's rule
that EP with TP needs ``parallel.sequence_parallel`` names it. Data-parallel attention
over the EP ranks (vLLM/SGLang DP-attention, whose ranks' batches differ and meet at every
MoE layer) is not modelled: each replica (``parallel.dp``) serves on its own tp GPUs, so an
expert group must fit in one. A step of fewer tokens than tp ranks routes a fraction of a
token per rank: the expectation over which rank holds them.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import ScenarioError
from ..workload.moe import load_model
from ..workload.ops import ExpertRanks, LayerOp, TPComm, Work

#: the routed experts' GEMMs (sequential per expert, or grouped): their weights are read
#: only for the experts a token reaches
EXPERT_GEMMS = frozenset({"expert_up", "expert_down", "experts_up", "experts_down"})


def expected_distinct_experts(experts: int, top_k: int, tokens: float) -> float:
    """E · (1 − (1 − k/E)^T): the expected number of ``experts`` at least one of ``tokens``
    tokens reaches when each picks ``top_k`` distinct ones uniformly (module doc)."""
    if experts < 1 or not 1 <= top_k <= experts:
        raise ScenarioError(
            "model.experts_per_token", top_k, f"accepted: 1 to model.experts ({experts}), experts ≥ 1"
        )
    if tokens < 0:
        raise ScenarioError("tokens", tokens, "the tokens a step routes: accepted ≥ 0")
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def routed_pool(split, tp: int, tokens: int) -> float:
    """Tokens routed together by one expert group: the step's ``tokens`` without expert
    parallelism; ``etp·ep`` TP ranks' shares of T/tp with it (module doc)."""
    return split.etp * split.ep * tokens / tp if split.active(tp) else float(tokens)


def _touched(op, cfg, pool: float, skinny: int, e: int):
    """Expert GEMM ``op`` priced memory-bound over the touched experts' weights when its
    rows per touched expert are at most ``skinny`` (module doc); other ops unchanged."""
    if not isinstance(op, LayerOp) or op.name not in EXPERT_GEMMS or op.fwd.gemm is None:
        return op
    if load_model(cfg) != "uniform":  # the load model's counts say which experts are reached
        touched, rows = cfg.experts, op.fwd.gemm[0]
    else:
        touched = expected_distinct_experts(cfg.experts, cfg.experts_per_token, pool)
        rows = pool * cfg.experts_per_token / touched if touched else 0.0
    if rows > skinny or not touched:
        return op
    w = op.fwd
    untouched = (1.0 - touched / cfg.experts) * op.params * e
    return replace(op, fwd=Work(w.flops, w.bytes - untouched))


def step_moe_ops(ops: list, cfg, split, tp: int, tokens: int, e: int, skinny: int) -> list:
    """One layer's ops for a step of ``tokens`` tokens (training's, ``split`` its expert
    parallelism) with the routed experts' GEMMs over their touched weights and, under
    expert parallelism with tp > 1, the TP all-gather after the MoE region (module doc);
    without the router's auxiliary load-balancing loss (a training term; eval computes none)."""
    pool = routed_pool(split, tp, tokens)
    gather = tp > 1 and split.active(tp)
    out = []
    for op in ops:
        if getattr(op, "name", "").startswith("moe_aux_loss"):
            continue
        if isinstance(op, ExpertRanks):
            ranks = tuple(tuple(_touched(x, cfg, pool, skinny, e) for x in r) for r in op.ranks)
            op = replace(op, ranks=ranks)
        if gather and getattr(op, "name", "") == "residual2":  # before the residual's first kernel
            out.append(TPComm("moe tp all-gather", "all_gather", "", int(tokens * cfg.hidden * e)))
        out.append(_touched(op, cfg, pool, skinny, e))
    return out
