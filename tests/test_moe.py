"""Mixture-of-experts layers, MLA and the shipped HF configs: closed forms and published counts."""

import json
import math
from dataclasses import replace

import pytest

from clustersim.errors import ScenarioError
from clustersim.planner import run_chunk_costs
from clustersim.scenario import load_scenario
from clustersim.workload.cost_model import CostModel
from clustersim.workload.fp8 import te_fp8_layer
from clustersim.workload.hf_config import DATA_HF, load_hf_config
from clustersim.workload.mla import mla_forward_flops, mla_params
from clustersim.workload.moe import expert_tokens
from clustersim.workload.ops import LayerOp, Work
from clustersim.workload.segments import forward_items
from clustersim.workload.transformer import TransformerConfig
from clustersim.workload.transformer_ops import layer_ops

#: config → (total, active) parameters as published, and where
PUBLISHED = {
    # Mistral AI, "Mixtral of experts" (Jiang et al. 2024 §2): 47B total, 13B active;
    # mistral.ai/news/mixtral-of-experts: "46.7B total parameters but only uses 12.9B"
    "mixtral-8x7b": (46.7e9, 12.9e9),
    # huggingface.co/Qwen/Qwen1.5-MoE-A2.7B model card: "14.3B parameters in total and 2.7B activated"
    "qwen1.5-moe-a2.7b": (14.3e9, 2.7e9),
    # Meta, huggingface.co/meta-llama/Meta-Llama-3-8B / -70B (safetensors: 8.03B, 70.6B)
    "llama-3-8b": (8.03e9, 8.03e9),
    "llama-3-70b": (70.6e9, 70.6e9),
    # Qwen2 technical report (Yang et al. 2024) / huggingface.co/Qwen/Qwen2-7B: 7.62B
    "qwen2-7b": (7.62e9, 7.62e9),
}
#: published with two significant digits, truncated: DeepSeek-V3 report (2024) abstract
#: "671B total parameters with 37B activated"; DeepSeek-V2 paper (2024) abstract "236B
#: total parameters, of which 21B are activated"; huggingface.co/Qwen/Qwen3-30B-A3B
#: model card "30.5B in total and 3.3B activated" — (total, active, active's last digit)
TRUNCATED_ACTIVE = {
    "deepseek-v3": (671e9, 37e9, 1e9),
    "deepseek-v2": (236e9, 21e9, 1e9),
    "qwen3-30b-a3b": (30.5e9, 3.3e9, 0.1e9),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_total_and_active_params_match_published(name):
    c = load_hf_config(name, seq_len=4096)
    total, active = PUBLISHED[name]
    assert c.params() == pytest.approx(total, rel=0.01)
    assert c.active_params() == pytest.approx(active, rel=0.01)


@pytest.mark.parametrize("name", sorted(TRUNCATED_ACTIVE))
def test_truncated_published_counts(name):
    """Total within 1 %; the active count lies in [published, published + one unit of its
    last digit) — the published figure is ours truncated (it is 1.5–1.8 % below ours, so
    a 1 % test against it would reject a count that agrees with it digit for digit)."""
    c = load_hf_config(name, seq_len=4096)
    total, active, unit = TRUNCATED_ACTIVE[name]
    assert c.params() == pytest.approx(total, rel=0.01)
    assert active <= c.active_params() < active + unit


def test_deepseek_v3_with_mtp_matches_the_hf_checkpoint_total():
    """HF model card: 685B on Hugging Face = 671B main model + 14B MTP module, whose
    checkpoint keeps its own copy of the embedding and the output head."""
    c = load_hf_config("deepseek-v3", seq_len=4096)
    copies = c.embedding_params() + c.vocab * c.hidden
    assert c.params() + c.mtp_params() + copies == pytest.approx(685e9, rel=0.01)


def test_qwen3_non_embedding_params():
    """Model card: "Number of Parameters (Non-Embedding): 29.9B"."""
    c = load_hf_config("qwen3-30b-a3b", seq_len=4096)
    non_embedding = c.params() - c.embedding_params() - c.vocab * c.hidden
    assert non_embedding == pytest.approx(29.9e9, rel=0.01)


def test_layer_kinds_dense_first_and_sparse_step():
    v3 = load_hf_config("deepseek-v3", seq_len=4096)
    assert v3.layer_kinds() == [False] * 3 + [True] * 58
    c = replace(v3, dense_layers=0, moe_step=2)
    assert c.layer_kinds() == [False, True] * 30 + [False]


@pytest.mark.parametrize("name", sorted([*PUBLISHED, *TRUNCATED_ACTIVE]))
def test_op_params_equal_closed_form(name):
    """Σ parameters of one layer's ops (TP 1) = layer_params of its kind."""
    c = load_hf_config(name, seq_len=256)
    for moe in sorted(set(c.layer_kinds())):
        ops = layer_ops(c, 1, 1, False, 2, moe)
        assert sum(op.params for op in ops if isinstance(op, LayerOp)) == c.layer_params(moe)


def _moe(**kw) -> TransformerConfig:
    base = dict(
        name="moe", layers=2, hidden=256, heads=4, ffn_hidden=1024, vocab=1000, seq_len=512,
        gated_mlp=True, norm="rmsnorm", position="rope", tied_embeddings=False, bias=False,
        dropout=False, experts=8, experts_per_token=2, moe_ffn_hidden=384,
    )  # fmt: skip
    return TransformerConfig(**{**base, **kw})


def test_uniform_load_gives_each_expert_k_over_e():
    assert expert_tokens(1000, 8, 2) == (250.0,) * 8
    assert expert_tokens(999, 64, 6) == (999 * 6 / 64,) * 64


def test_seeded_skew_is_reproducible_and_conserves_tokens():
    a = expert_tokens(4096, 16, 4, "skew", skew=1.0, seed=3)
    assert a == expert_tokens(4096, 16, 4, "skew", skew=1.0, seed=3)
    assert a != expert_tokens(4096, 16, 4, "skew", skew=1.0, seed=4)
    assert sum(a) == 4096 * 4
    assert max(a) > 2 * 4096 * 4 / 16  # Zipf exponent 1 over 16: the top expert gets ~30 %


def test_capacity_factor_drops_tokens_over_capacity():
    counts = expert_tokens(1024, 4, 2, "histogram", histogram=(5, 1, 1, 1))
    assert counts == (1280.0, 256.0, 256.0, 256.0)
    capped = expert_tokens(1024, 4, 2, "histogram", histogram=(5, 1, 1, 1), capacity_factor=1.0)
    cap = math.ceil(1.0 * 1024 * 2 / 4)  # GShard: ceil(c · T · k / E) = 512
    assert capped == (cap, 256.0, 256.0, 256.0)
    assert sum(counts) - sum(capped) == 1280 - cap  # 768 token copies dropped
    assert expert_tokens(1024, 4, 2, capacity_factor=1.25) == (512.0,) * 4  # under capacity: none


def test_skewed_layer_time_is_the_sum_over_experts():
    """Forward time of a MoE layer = its non-expert ops + Σ_e cost(tokens_e), each expert's
    GEMMs and activation priced by the cost model at that expert's token count."""
    c = _moe(expert_load="skew", expert_skew=1.2, expert_seed=7)
    b, e, cm = 2, 2, CostModel.for_gpu("H100-SXM5-80GB")
    tokens = expert_tokens(b * c.seq_len, 8, 2, "skew", skew=1.2, seed=7)
    h, f = c.hidden, c.moe_ffn_hidden

    def cost(n):
        up = Work(2.0 * n * 2 * f * h, e * (n * h + h * 2 * f + n * 2 * f), (n, 2 * f, h))
        act = Work(0.0, n * 2 * f * 1.5 * e)
        down = Work(2.0 * n * h * f, e * (n * f + f * h + n * h), (n, h, f))
        return cm.time(up) + cm.time(act) + cm.time(down)

    ops = layer_ops(c, b, 1, False, e)
    other = [op for op in ops if not op.name.startswith("expert")]
    expected = sum(t for _, t, *_ in forward_items(other, cm)) + sum(cost(n) for n in tokens)
    got = sum(t for _, t, *_ in forward_items(ops, cm))
    assert got == pytest.approx(expected, rel=1e-12)


def test_idle_expert_keeps_its_parameters():
    c = _moe(expert_load="histogram", expert_histogram=(1, 0, 0, 0, 0, 0, 0, 1))
    ops = layer_ops(c, 1, 1, False, 2)
    assert sum(op.params for op in ops if isinstance(op, LayerOp)) == c.layer_params(True)
    assert sum(op.fwd.flops for op in ops if op.name.startswith("expert")) == pytest.approx(
        2 * 2 * c.seq_len * c.hidden * c.moe_ffn_hidden * 3
    )


def test_moe_layer_flops_closed_form():
    """Σ forward FLOPs of a MoE layer's ops (TP 1, uniform, no drops) = layer_forward_flops:
    attention + k experts + shared expert + router GEMM."""
    c = _moe(shared_ffn_hidden=512, shared_expert_gate=True)
    ops = layer_ops(c, 2, 1, False, 2)
    b, s, h = 2, c.seq_len, c.hidden
    expected = (
        2 * b * s * h * (3 * h) + 2 * b * s * h * h + 4 * b * s * s * h  # qkv, out, scores + context
        + 2 * b * s * h * 384 * 3 * 2 + 2 * b * s * h * 512 * 3 + 2 * b * s * h * 9  # experts, shared, router
    )  # fmt: skip
    assert c.layer_forward_flops(b, moe=True) == expected
    assert sum(op.fwd.flops for op in ops if isinstance(op, LayerOp)) == pytest.approx(expected, rel=1e-12)


def test_mla_params_and_flops_closed_form():
    """DeepSeek-V3's MLA: q 7168·1536 + 1536 + 1536·128·192, kv 7168·576 + 512 +
    512·128·256, out 128·128·7168; forward FLOPs twice each projection's MACs plus
    2bs²H(d_qk + d_v) for the scores and context."""
    c = load_hf_config("deepseek-v3", seq_len=1024)
    q = 7168 * 1536 + 1536 + 1536 * 128 * 192
    kv = 7168 * 576 + 512 + 512 * 128 * 256
    assert mla_params(c) == c.attention_params() == q + kv + 128 * 128 * 7168
    b, t = 2, 2 * 1024
    proj = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    flops = 2 * t * proj + 2 * b * 1024**2 * 128 * (192 + 128)
    assert mla_forward_flops(c, b) == flops
    ops = [op for op in layer_ops(c, b, 1, False, 2, moe=False) if isinstance(op, LayerOp)]
    attention = [op for op in ops if not op.name.startswith(("mlp", "norm", "residual"))]
    assert sum(op.fwd.flops for op in attention) == pytest.approx(flops, rel=1e-12)


def test_mixtral_experts_are_sharded_like_megatron_core():
    """EP 1 with Megatron-Core's default expert-tensor-parallel size (= TP): each of the 8
    TP ranks holds 1/8 of every expert, of attention and of the vocab; the router and the
    norms whole. Static weight bytes (bf16) = 2 × that, exactly."""
    sc = load_scenario(
        {
            "cluster": {"preset": "dgx_h100", "nodes": 8},
            "model": {"hf_config": "mixtral-8x7b", "seq_len": 4096},
            "training": {"global_batch": 64, "micro_batch": 1, "recompute": "selective"},
            "parallel": {"tp": 8, "pp": 1, "dp": 8, "sequence_parallel": True},
        }
    )
    c = load_hf_config("mixtral-8x7b", seq_len=4096)
    per_layer = c.attention_params() / 8 + 8 * c.mlp_params() / 8 + c.router_params() + 2 * c.norm_params()
    per_gpu = 32 * per_layer + 2 * c.vocab * c.hidden / 8 + c.norm_params()
    (cost,) = run_chunk_costs(sc)
    assert cost.static.weights == int(2 * per_gpu)


def test_hf_mlp_only_layers_refused(tmp_path):
    cfg = json.loads((DATA_HF / "qwen3-30b-a3b.json").read_text())
    path = tmp_path / "q.json"
    path.write_text(json.dumps({**cfg, "mlp_only_layers": [0, 5]}))
    with pytest.raises(ScenarioError, match="mlp_only_layers is not supported"):
        load_hf_config(str(path))


def test_deepseek_v3_stage_costs_build():
    """The whole DeepSeek-V3 (MLA, 3 dense + 58 MoE layers, MTP head on the last stage)
    compiles; the last of 2 stages holds the MTP layer's parameters on top of its share."""
    sc = load_scenario(
        {
            "cluster": {"preset": "dgx_h100", "nodes": 2},
            "model": {"hf_config": "deepseek-v3", "seq_len": 1024, "layers": 4},
            "training": {"global_batch": 8, "micro_batch": 1},
            "parallel": {"tp": 8, "pp": 2, "dp": 1},
        }
    )
    first, last = run_chunk_costs(sc)
    c = load_hf_config("deepseek-v3", seq_len=1024)
    assert last.static.weights > first.static.weights + 2 * c.layer_params(True) / 8


def test_fp8_runs_expert_and_mla_linears_in_fp8_but_not_the_router():
    c = replace(load_hf_config("deepseek-v3", seq_len=512), experts=8, experts_per_token=2)
    ops = te_fp8_layer(layer_ops(c, 1, 1, False, 2, moe=True))
    fp8 = {op.name for op in ops if isinstance(op, LayerOp) and op.fwd.fp8_casts is not None}
    assert fp8 == {"q_down", "q_up", "kv_down", "kv_up", "attn_out"} | {
        f"{p}_{d}" for p in ("expert", "shared_expert") for d in ("up", "down")
    }


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"expert_skew": 1.5}, "model.expert_skew: 1.5 is invalid; applies with model.expert_load: skew"),
        ({"expert_load": "histogram", "expert_histogram": [1, 2]}, "expected 8 weights ≥ 0"),
        ({"expert_histogram": [1] * 8}, "applies with model.expert_load: histogram"),
    ],
)
def test_load_model_fields_are_checked(fields, message):
    """Refused when the scenario is loaded, naming the field."""
    raw = {
        "cluster": {"preset": "dgx_h100", "nodes": 1},
        "model": {"hf_config": "mixtral-8x7b", "seq_len": 1024, **fields},
        "training": {"global_batch": 8, "micro_batch": 1},
        "parallel": {"tp": 8},
    }
    with pytest.raises(ScenarioError, match=message):
        load_scenario(raw)


def test_expert_ffn_must_divide_by_tp():
    raw = {
        "cluster": {"preset": "dgx_h100", "nodes": 1},
        "model": {"hf_config": "qwen1.5-moe-a2.7b", "seq_len": 1024, "moe_ffn_hidden": 1410},
        "training": {"global_batch": 8, "micro_batch": 1},
        "parallel": {"tp": 4},
    }
    with pytest.raises(ScenarioError, match="model.moe_ffn_hidden = 1410 must divide by tp"):
        load_scenario(raw)


def test_mla_without_query_compression():
    """q_lora_rank null (DeepSeek-V2-Lite): one ``h → H·d_qk`` query projection."""
    c = replace(load_hf_config("deepseek-v2", seq_len=256), q_lora_rank=0)
    kv = 5120 * 576 + 512 + 512 * 128 * 256
    assert c.attention_params() == 5120 * 128 * 192 + kv + 128 * 128 * 5120
    ops = layer_ops(c, 1, 1, False, 2, moe=False)
    assert "q_proj" in {op.name for op in ops} and "q_down" not in {op.name for op in ops}
    assert sum(op.params for op in ops if isinstance(op, LayerOp)) == c.layer_params(False)
