"""MoE models and expert parallelism in generation (clustersim/generation/moe_step.py,
docs/generation.md): the expected number of experts a step touches against enumeration,
a decode step in closed form (bytes over achieved bandwidth, launches, the collectives on
an idle fabric), the expert GEMMs' regimes, and the refusals."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from clustersim.collectives.bench import measure
from clustersim.errors import ScenarioError
from clustersim.generation.moe_step import EXPERT_GEMMS, expected_distinct_experts
from clustersim.generation.runner import StepPricer
from clustersim.generation.step_cost import StepSeq
from clustersim.resolve import resolve
from clustersim.scenario import load_scenario
from clustersim.simulate import build_engine
from clustersim.workload.moe import layer_expert_tokens
from clustersim.workload.ops import ExpertRanks, LayerOp, TPComm

IDLE = {"cuda_graphs": True, "fixed_costs": {"microbatch_overhead": 0}}


def mixtral(tp: int, ep: int, nodes: int = 1, **parallel) -> dict:
    """Mixtral-8x7B (the shipped EP scenario's model) served on DGX H100s."""
    par = {"tp": tp, "ep": ep, **({"etp": 1, "sequence_parallel": True} if ep > 1 else {}), **parallel}
    return {
        "name": "mixtral-serve",
        "cluster": {"preset": "dgx_h100", "nodes": nodes},
        "model": {"hf_config": "mixtral-8x7b", "seq_len": 4096},
        "training": {"mode": "inference", "global_batch": nodes * 8 // tp, **IDLE},
        "parallel": par,
        "generation": {"prompt_len": 100, "output_len": 3},
    }


def pricer(raw: dict) -> StepPricer:
    sc = load_scenario(raw)
    return StepPricer(sc, resolve(sc), build_engine)


@pytest.mark.parametrize("experts,k,tokens", [(4, 2, 3), (8, 2, 1), (8, 2, 3), (6, 3, 2), (5, 1, 4)])
def test_expected_distinct_experts_equals_exhaustive_enumeration(experts, k, tokens):
    """Every way T tokens can each pick k distinct experts of E, equally likely: the mean
    count of distinct experts picked is E·(1 − (1 − k/E)^T)."""
    choices = list(itertools.combinations(range(experts), k))
    counts = [len(set().union(*pick)) for pick in itertools.product(choices, repeat=tokens)]
    mean = sum(counts) / len(counts)
    assert expected_distinct_experts(experts, k, tokens) == pytest.approx(mean, rel=1e-12)


@pytest.mark.parametrize("experts,k,tokens", [(8, 2, 8), (256, 8, 16), (128, 8, 64), (64, 6, 1)])
def test_expected_distinct_experts_against_a_seeded_draw(experts, k, tokens):
    """At DeepSeek-V3 / Qwen3 / DeepSeek-MoE sizes: 4,000 seeded routings (each token k
    distinct experts, uniformly) average within 4 standard errors of the closed form."""
    rng = np.random.default_rng([experts, k, tokens])
    draws = 4000
    scores = rng.random((draws, tokens, experts))
    picks = np.argsort(scores, axis=2)[:, :, :k]  # k distinct experts, uniformly
    hit = np.zeros((draws, experts), bool)
    np.put_along_axis(hit, picks.reshape(draws, -1), True, axis=1)
    counts = hit.sum(axis=1)
    se = counts.std(ddof=1) / math.sqrt(draws) if tokens > 1 or counts.std() else 0.0
    assert abs(counts.mean() - expected_distinct_experts(experts, k, tokens)) <= 4 * se + 1e-12


def _idle_time(cluster: dict, op: TPComm) -> float:
    """The collective ``op`` alone on an idle fabric, among the 8 GPUs of one node."""
    return measure(cluster, op.fwd, op.forward_nbytes).time_s


@pytest.mark.parametrize(
    "batch,parallel",
    [
        (1, {}),
        (8, {}),
        (8, {"moe_token_dispatcher": "allgather", "moe_expert_mlp": "grouped"}),
    ],
)
def test_moe_decode_step_is_bytes_over_bandwidth_plus_launches_plus_idle_collectives(batch, parallel):
    """Mixtral-8x7B, TP 8 × EP 8 (one expert a GPU), CUDA graphs, idle node: a decode step
    of ``batch`` sequences lasts Σ bytes / achieved HBM bandwidth + the kernels' launches
    (every kernel memory-bound) + each collective's idle-fabric time (TP all-reduce, the EP
    dispatch and combine all-to-alls, the all-gather after the experts) — and the experts'
    GEMMs read E·(1 − (1 − k/E)^T)/ep experts' weights a GPU, not E/ep. Under the all-to-all
    and all-gather dispatchers, sequential and grouped experts (DeepEP's ``flex`` moves an
    uneven all-to-all-v matrix that ``measure`` does not take: not in this closed form)."""
    price = pricer(mixtral(8, 8, **parallel))
    cm, cfg = price.model.cm, price.model.cfg
    seqs = (StepSeq(1, 1000),) * batch
    ops = price.model.ops(seqs, batch)[0]
    rank0 = [x for op in ops for x in (op.ranks[0] if isinstance(op, ExpertRanks) else (op,))]
    kernels = [op for op in rank0 if isinstance(op, LayerOp) and op.fwd.bytes]
    comms = [op for op in rank0 if isinstance(op, TPComm) and op.fwd]
    assert all(op.fwd.gemm is None and op.fwd.attention is None for op in kernels)  # memory-bound
    hbm = cm.gpu.hbm_bandwidth
    compute = sum(
        op.fwd.bytes / (hbm * cm.bandwidth.of(op.fwd.memory_kind).fraction(op.fwd.bytes, hbm))
        for op in kernels
    )
    compute += len(kernels) * cm.eff.launch_s
    cluster = price.sc.resolved()["cluster"]
    comm = sum(_idle_time(cluster, op) for op in comms)
    assert price(seqs, batch) == pytest.approx(compute + comm, rel=1e-12)
    # two exchanges per MoE layer (every Mixtral layer is one), over the EP group
    exchange = [op for op in comms if op.group != "tp"]
    assert len(exchange) == 2 * cfg.layers
    # the touched experts' weights: each GPU holds E/ep = 1 expert, read with probability D/E
    e, h, f = 2, cfg.hidden, cfg.expert_ffn
    per_expert = 3 * h * f * e  # gate, up, down
    tokens = batch  # the expert group is the TP group: it routes the step's T tokens
    touched = expected_distinct_experts(cfg.experts, cfg.experts_per_token, tokens)
    copies = tokens * cfg.experts_per_token / cfg.experts  # token copies an expert takes, expected
    experts = [op for op in kernels if op.name in EXPERT_GEMMS]
    moved = copies * (h + 2 * f) + copies * (f + h)  # up: in h, out 2f; down: in f, out h
    expect = cfg.layers * (touched / cfg.experts * per_expert + moved * e)
    assert sum(op.fwd.bytes for op in experts) == pytest.approx(expect, rel=1e-12)


def test_without_expert_parallelism_decode_reads_the_touched_experts_and_prefill_is_a_gemm():
    """Mixtral TP 2, EP 1 (experts inside the TP region): one decode token reads 2 of the 8
    experts' weights (k = 2); a 2,048-token prefill touches all 8 (E·(1 − (3/4)^2048) = 8 to
    1e-12) and runs its expert GEMMs compute-bound, shaped as in training."""
    price = pricer(mixtral(2, 1))
    cfg = price.model.cfg
    per_expert = 3 * cfg.hidden * cfg.expert_ffn // 2 * 2  # FFN split over TP 2, bf16
    dec = [op for op in price.model.ops((StepSeq(1, 500),), 1)[0] if getattr(op, "name", "") in EXPERT_GEMMS]
    assert all(op.fwd.gemm is None for op in dec)
    weights = sum(op.fwd.bytes for op in dec) / cfg.layers
    assert 2 * per_expert < weights < 2 * per_expert * 1.001  # + the token's activations
    pre = [op for op in price.model.ops((StepSeq(2048, 0),), 1)[0] if getattr(op, "name", "") in EXPERT_GEMMS]
    assert all(op.fwd.gemm is not None and op.fwd.gemm[0] == 2048 * 2 / 8 for op in pre)
    assert expected_distinct_experts(8, 2, 2048) == pytest.approx(8, rel=1e-12)


def test_expert_parallelism_reads_the_same_expert_bytes_in_fewer_kernels():
    """TP 8 × EP 8 against TP 8 with each expert's FFN split 8 ways (EP 1), decode of 4
    sequences: over the node the step reads the same expected expert weights either way,
    but a GPU holds 1 expert whole (2 GEMMs a layer, gated up and down) instead of 1/8 of
    each of the 8 (16 GEMMs, Megatron-Core's sequential expert loop)."""
    ep, tp = pricer(mixtral(8, 8)), pricer(mixtral(8, 1))
    seqs = (StepSeq(1, 1000),) * 4
    cfg = ep.model.cfg

    def experts(price):
        ops = price.model.ops(seqs, 4)[0]
        flat = [x for op in ops for x in (op.ranks[0] if isinstance(op, ExpertRanks) else (op,))]
        return [op for op in flat if getattr(op, "name", "") in EXPERT_GEMMS]

    by_ep, by_tp = experts(ep), experts(tp)
    assert len(by_ep) == 2 * cfg.layers and len(by_tp) == 16 * cfg.layers
    # expected weights read: D/E · (one expert) either way; the rest is the tokens' inputs and
    # outputs, (T·k/E)(h + 2f + f + h) a GPU under EP, 8 × (T·k/E)(h + 2f/8 + f/8 + h) under TP
    e, h, f = 2, cfg.hidden, cfg.expert_ffn
    touched = expected_distinct_experts(8, 2, 4) / 8 * 3 * h * f * e
    copies = 4 * 2 / 8
    moved = (copies * (2 * h + 3 * f) * e, 8 * copies * (2 * h + 3 * f / 8) * e)
    for ops, act in zip((by_ep, by_tp), moved):
        assert sum(op.fwd.bytes for op in ops) == pytest.approx(cfg.layers * (touched + act), rel=1e-12)
    ranks = [op for op in ep.model.ops(seqs, 4)[0] if isinstance(op, ExpertRanks)]
    assert ranks and all(r.params == 3 * cfg.hidden * cfg.expert_ffn for r in ranks)


def test_a_small_moe_serving_run_is_deterministic():
    raw = mixtral(8, 8)
    raw["generation"] = {
        "requests": 3,
        "prompt_len": 64,
        "output_len": 4,
        "arrival": {"process": "poisson", "rate": 50},
    }
    from clustersim import simulate

    a, b = simulate(raw), simulate(raw)
    assert a.summary["iteration_time_s"] == b.summary["iteration_time_s"] > 0
    assert (a.requests.end_s == b.requests.end_s).all() and len(a.requests) == 3


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda: expected_distinct_experts(8, 9, 4), "model.experts_per_token"),
        (lambda: expected_distinct_experts(8, 0, 4), "model.experts_per_token"),
        (lambda: expected_distinct_experts(8, 2, -1), "tokens"),
    ],
)
def test_bad_counts_are_refused_naming_them(call, field):
    with pytest.raises(ScenarioError) as err:
        call()
    assert err.value.field == field


def test_an_expert_group_wider_than_a_replica_is_refused_naming_ep():
    """TP 2 with 4 replicas: EP 8 would span replicas (data-parallel attention), not modelled."""
    raw = mixtral(2, 8)
    with pytest.raises(ScenarioError) as err:
        from clustersim import simulate

        simulate(raw)
    assert err.value.field == "parallel.ep" and "data-parallel attention" in str(err.value)


@pytest.mark.parametrize(
    "model,field",
    [
        ({"hf_config": "deepseek-v3", "seq_len": 4096}, "model.kv_lora_rank"),
    ],
)
def test_what_generation_does_not_model_is_still_refused(model, field):
    raw = mixtral(8, 8)
    raw["model"] = model
    from clustersim import simulate

    with pytest.raises(ScenarioError) as err:
        simulate(raw)
    assert err.value.field == field


def test_under_a_skewed_load_the_seeded_draw_says_which_experts_are_read():
    """``expert_load: skew``: the draw's integer counts decide; a decode token's 2 copies
    land on at most 2 experts, each read whole, the others run nothing (no double
    discount by D(T)/E)."""
    raw = mixtral(2, 1)
    raw["model"].update(expert_load="skew", expert_skew=1.0, expert_seed=3)
    price = pricer(raw)
    cfg = price.model.cfg
    counts = layer_expert_tokens(cfg, 1)
    reached = sum(1 for n in counts if n > 0)
    assert 1 <= reached <= 2 and sum(counts) == 2
    per_expert = 3 * cfg.hidden * cfg.expert_ffn // 2 * 2  # FFN split over TP 2, bf16
    ops = [op for op in price.model.ops((StepSeq(1, 500),), 1)[0] if getattr(op, "name", "") in EXPERT_GEMMS]
    assert len(ops) == 2 * reached * cfg.layers and all(op.fwd.gemm is None for op in ops)
    moved = sum(counts) * (2 * cfg.hidden + 3 * cfg.expert_ffn // 2) * 2
    assert sum(op.fwd.bytes for op in ops) / cfg.layers == pytest.approx(
        reached * per_expert + moved, rel=1e-12
    )


@given(st.integers(1, 64), st.integers(1, 8), st.integers(0, 500))
def test_distinct_experts_lie_between_k_and_min_e_tk(experts, k, tokens):
    """D(0) = 0, D(1) = k, k ≤ D(T) ≤ min(E, T·k) for T ≥ 1, non-decreasing in T."""
    k = min(k, experts)
    d = expected_distinct_experts(experts, k, tokens)
    if tokens == 0:
        assert d == 0
        return
    assert k * (1 - 1e-12) <= d <= min(experts, tokens * k) * (1 + 1e-12)
    assert expected_distinct_experts(experts, k, tokens + 1) >= d
    assert expected_distinct_experts(experts, k, 1) == pytest.approx(k, rel=1e-12)


def test_an_rlhf_job_with_a_moe_actor_is_still_refused_naming_experts():
    """Generation now serves MoE models; RLHF's other phases (its weight transfer, per dense
    layer) do not, so its MoE actors stay refused, now at load, naming the field."""
    raw = {
        "name": "grpo-moe",
        "cluster": {"preset": "dgx_h100", "nodes": 1},
        "model": {"hf_config": "mixtral-8x7b", "seq_len": 4096},
        "training": {"global_batch": 8, "micro_batch": 1},
        "parallel": {"tp": 8},
        "rlhf": {"algorithm": "grpo", "prompts": 2, "samples_per_prompt": 2, "rollout": {"tp": 8}},
    }
    with pytest.raises(ScenarioError) as err:
        load_scenario(raw)
    assert err.value.field == "model.experts"
