"""Megatron-Bridge's published MoE runs fit as they ran (issue 37: no run that fit flagged
out of memory), and the two memory terms that had them flagged, in closed form: Megatron-
Core's precision-aware optimizer and the MoE unpermute that keeps no copies."""

from __future__ import annotations

import pytest

import clustersim as cs
from clustersim.experiments.memory import tightest_fit
from clustersim.resolve import resolve
from clustersim.workload.moe_dispatch import ExpertSplit, ep_moe_ops
from clustersim.workload.ops import ExpertRanks
from clustersim.workload.precision_aware import step_bytes
from clustersim.workload.transformer import TransformerConfig

from .test_memory_frameworks import _published


@pytest.mark.parametrize(
    "run",
    [
        # EP 8, MBS 4, recompute_modules [layernorm, moe_act], the precision-aware
        # optimizer: 160.7 GiB of 179.1 (before, with [moe_act]: 179.9)
        "gpt-oss-120b-b200-bf16",
        # PP 8 × VP 2 with the embedding and loss counted in the split, no recompute:
        # stage 1 keeps 21 model chunks of 6 layers in flight — 157.4 GiB (before: 195.9)
        "qwen3-235b-a22b-b200-bf16",
        # PP 4 × VP 4, EP 64, Megatron's layout, bf16 Adam moments: 138.9 GiB of 185.0
        # (before: 181.5)
        "deepseek-v3-gb200-bf16",
    ],
)
def test_megatron_bridges_published_moe_configurations_fit(run):
    peak, capacity = tightest_fit(_published(run))
    assert peak <= capacity


def _optimizer_bytes(sc: cs.Scenario) -> list[int]:
    return [c.static.optimizer for c in resolve(sc).chunk_costs]


@pytest.mark.parametrize(
    "aware, precision, recipe, per_param",
    [
        ({}, "bf16", None, 2 + 4 + 4),  # the master's 16-bit remainder, fp32 moments
        ({"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}, "bf16", None, 2 + 2 + 2),
        ({"store_param_remainders": False}, "bf16", None, 4 + 4 + 4),
        ({}, "fp8", "delayed", 2 + 4 + 4),  # TE keeps the master under delayed scaling
        ({}, "fp8", "mxfp8", 4 + 4 + 4),  # Megatron-Core keeps the fp32 master itself
    ],
)
def test_precision_aware_optimizer_holds_its_dtypes_bytes_per_parameter(aware, precision, recipe, per_param):
    # the Qwen3 row's dense and expert parameters, each sharded as before: the optimizer
    # bytes scale by per_param / 12 exactly
    base = _published("qwen3-235b-a22b-b200-bf16").with_overrides(
        {"training.precision": precision, "training.fp8_recipe": recipe}
    )
    plain = _optimizer_bytes(base.with_overrides({"training.precision_aware_optimizer": None}))
    aware_bytes = _optimizer_bytes(base.with_overrides({"training.precision_aware_optimizer": aware}))
    assert aware_bytes == [pytest.approx(b * per_param / 12, abs=1) for b in plain]


@pytest.mark.parametrize("changes", [{"training.framework": "deepspeed"}, {"training.optimizer": "sgd"}])
def test_precision_aware_optimizer_is_refused_outside_megatron_cores_adam(changes):
    sc = _published("qwen3-235b-a22b-b200-bf16").with_overrides(changes)
    with pytest.raises(cs.ScenarioError, match="precision_aware_optimizer"):
        resolve(sc)


def test_moe_unpermute_keeps_nothing_and_the_weighted_activation_keeps_the_probabilities():
    # alltoall dispatcher, EP 4, 2 experts a rank: each rank's grouped experts keep their
    # inputs (h), the up projection's output (2f, gated) with the routing probabilities
    # (1 a copy), and the activation's output (f) — per received copy, in bf16
    h, f, e, s, k = 256, 384, 2, 512, 2
    cfg = TransformerConfig(
        name="moe", layers=2, hidden=h, heads=4, ffn_hidden=1024, vocab=1000, seq_len=s,
        gated_mlp=True, norm="rmsnorm", position="rope", tied_embeddings=False, bias=False,
        dropout=False, experts=8, experts_per_token=k, moe_ffn_hidden=f,
    )  # fmt: skip
    ops = ep_moe_ops(cfg, 1, 1, e, ExpertSplit(ep=4, permute_fusion=True, expert_mlp="te_grouped"))
    (unpermute,) = [op for op in ops if getattr(op, "name", "") == "moe_unpermute"]
    assert unpermute.activation == 0
    (experts,) = [op for op in ops if isinstance(op, ExpertRanks)]
    copies = s * k  # every rank receives its share of the 4 ranks' copies: s·k
    for rank in experts.ranks:
        assert sum(op.activation for op in rank) == copies * (h + 2 * f + 1 + f) * e


def test_the_optimizer_step_reads_and_writes_the_states_it_holds():
    # the Adam step is memory-bound over its states (read and written) besides the gradient
    # read and the weight written: 2 · 12 + 8 = 32 B/param (the cost model's own default),
    # 2 · 10 + 8 = 28 with the remainder, 2 · 6 + 8 = 20 with BF16 moments too
    assert step_bytes(None) == () and step_bytes(12) == (32,)
    assert step_bytes(10) == (28,) and step_bytes(6) == (20,)
    sc = _published("qwen3-235b-a22b-b200-bf16")
    bf16 = {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}
    plain = resolve(sc.with_overrides({"training.precision_aware_optimizer": None})).chunk_costs
    aware = resolve(sc.with_overrides({"training.precision_aware_optimizer": bf16})).chunk_costs
    assert all(a.optimizer < p.optimizer for p, a in zip(plain, aware, strict=True))


def test_layernorm_recompute_drops_the_pre_mlp_norms_output_before_each_moe_mlp():
    # GPT-OSS 120B at PP 1: 36 MoE layers, each router's input (the pre-MLP norm's output,
    # 2,880 wide) no longer kept for micro-batch 4 × 4,096 tokens in bf16; the attention's
    # input norm is fused into its QKV linear (TE's LayerNormLinear): nothing dropped there
    sc = _published("gpt-oss-120b-b200-bf16")
    both = resolve(sc).chunk_costs[0].activation_memory
    act = resolve(sc.with_overrides({"training.recompute_modules": ["moe_act"]})).chunk_costs[0]
    assert act.activation_memory - both == 36 * 4 * 4096 * 2880 * 2
