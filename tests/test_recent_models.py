"""The 2024–25 model configs (Qwen3-235B-A22B, GPT-OSS-120B, Nemotron-4 15B/340B) and
DeepSeek-V3's multi-token-prediction module: parameter counts as published, what each
architecture feature adds to the ops, against closed forms."""

from __future__ import annotations

import pytest

from clustersim.errors import ScenarioError
from clustersim.scenario import load_scenario
from clustersim.workload.hf_config import hf_config_table, load_hf_config
from clustersim.workload.kernel_impls import IMPLS
from clustersim.workload.ops import LayerOp
from clustersim.workload.stage_cost import chunk_costs
from clustersim.workload.transformer_ops import layer_ops

NEW = ("qwen3-235b-a22b", "gpt-oss-120b", "nemotron-4-15b", "nemotron-4-340b")


def test_qwen3_235b_a22b_counts_truncate_to_the_model_card():
    # huggingface.co/Qwen/Qwen3-235B-A22B: "235B in total and 22B activated" (truncated)
    c = load_hf_config("qwen3-235b-a22b")
    assert 235e9 <= c.params() < 236e9
    assert 22e9 <= c.active_params() < 23e9


def test_gpt_oss_120b_counts_match_the_model_card():
    # OpenAI gpt-oss model card (2025) Table 1: 116.83B total, 5.13B active — its active
    # count takes the unembedding, not the embedding; the expert and output-projection
    # biases clustersim leaves out are 36 × (128 × 3 × 2880 + 2880 + 128) = 40 M (0.03 %)
    c = load_hf_config("gpt-oss-120b")
    biases = 36 * (128 * 3 * 2880 + 2880 + 128)
    assert c.params() + biases == pytest.approx(116.83e9, abs=0.005e9)
    assert c.active_params() - c.embedding_params() == pytest.approx(5.13e9, abs=0.005e9)


@pytest.mark.parametrize(
    "name,embedding,non_embedding",
    # Nemotron-4 15B (arXiv:2402.16819) Table 1: 3.2B embedding, 12.5B non-embedding;
    # Nemotron-4 340B (arXiv:2406.11704) Table 1: 9.4B embedding, 331.6B non-embedding
    [("nemotron-4-15b", 3.2e9, 12.5e9), ("nemotron-4-340b", 9.4e9, 331.6e9)],
)
def test_nemotron_4_counts_match_the_papers(name, embedding, non_embedding):
    c = load_hf_config(name)
    emb = c.embedding_params() + c.vocab * c.hidden  # untied: input and output matrices
    # two or three significant digits: the non-embedding count to its last digit, the total
    # within 1 % (the 15B's 256,000 × 6,144 × 2 = 3.15B embedding is printed 3.2B)
    assert c.params() - emb == pytest.approx(non_embedding, abs=0.05e9)
    assert c.params() == pytest.approx(embedding + non_embedding, rel=0.01)


@pytest.mark.parametrize("name", NEW)
def test_op_params_equal_closed_form(name):
    """Σ parameters of one layer's ops (TP 1) = layer_params of its kind — the sinks and
    the two-matrix ReLU² MLP included."""
    c = load_hf_config(name, seq_len=256)
    for moe in sorted(set(c.layer_kinds())):
        ops = layer_ops(c, 1, 1, False, 2, moe)
        assert sum(op.params for op in ops if isinstance(op, LayerOp)) == c.layer_params(moe)


def test_every_new_config_is_listed():
    names = [name for name, _ in hf_config_table()]
    assert set(NEW) <= set(names)


def _stage(hf: str, framework: str = "megatron_2021", **model):
    sc = load_scenario(
        {
            "cluster": {"preset": "dgx_h100", "nodes": 1},
            "model": {"hf_config": hf, "seq_len": 4096, "attention": "flash", **model},
            "training": {"global_batch": 8, "micro_batch": 1, "framework": framework},
            "parallel": {"pp": 1, "tp": 1},
        }
    )
    return chunk_costs(sc, 1)[0]


def test_gpt_oss_alternates_windowed_and_full_attention():
    c = load_hf_config("gpt-oss-120b")
    assert c.layer_shapes()[:4] == [(True, 128), (True, 0), (True, 128), (True, 0)]
    # two layers, one windowed: the flash forward counts s·w − w²/2 key pairs per query head
    # there (causal) instead of s²/2 — 4·a·d FLOPs per pair, and nothing else changes
    s, w, a, d = 4096, 128, 64, 64
    windowed = _stage("gpt-oss-120b", layers=2)
    full = _stage("gpt-oss-120b", layers=2, full_attention_every=1)
    assert full.forward_flops - windowed.forward_flops == pytest.approx(
        4 * a * d * (s * s / 2 - (s * w - w * w / 2))
    )
    assert windowed.forward < full.forward


def test_gpt_oss_sinks_are_one_parameter_per_query_head():
    c = load_hf_config("gpt-oss-120b")
    from dataclasses import replace

    assert c.attention_params() - replace(c, attention_sinks=False).attention_params() == c.heads
    tp = 8  # the sinks split with their heads
    ops = layer_ops(c, 1, tp, False, 2, True)
    qkv = next(op for op in ops if getattr(op, "name", "") == "qkv")
    assert (
        qkv.params
        == c.hidden * (c.heads + 2 * c.n_kv) * c.head_dim // tp
        + (c.heads + 2 * c.n_kv) * c.head_dim // tp
        + c.heads // tp
    )


def test_nemotron_mlp_is_two_matrices_and_a_squared_relu():
    c = load_hf_config("nemotron-4-15b", seq_len=1024)
    assert not c.gated_mlp and c.squared_relu and c.norm == "layernorm"
    assert c.mlp_params() == 2 * c.hidden * c.ffn_hidden
    ops = layer_ops(c, 1, 1, False, 2)
    up = next(op for op in ops if getattr(op, "name", "") == "mlp_up")
    assert up.params == c.hidden * c.ffn_hidden  # no gate half
    # Megatron-LM 2021's eager torch.pow(F.relu(x), 2): two kernels forward, four backward
    # (pow_backward's three, relu's one); Megatron-Core's jit_fuser squared_relu: one, with
    # GeLU's bytes
    acts = [op for op in ops if getattr(op, "name", "").startswith("mlp_act")]
    assert [op.name for op in acts] == ["mlp_act", "mlp_act.1", "mlp_act.2", "mlp_act.3"]
    assert [bool(op.fwd.bytes) for op in acts] == [True, True, False, False]
    core = layer_ops(c, 1, 1, False, 2, kernels="megatron_core")
    assert [op.name for op in core if getattr(op, "name", "").startswith("mlp_act")] == ["mlp_act"]
    assert IMPLS["act"]["two_pass"].bytes(2) != IMPLS["act"]["fused"].bytes(2)


def test_squared_relu_with_a_gated_mlp_is_refused():
    with pytest.raises(ScenarioError) as info:
        _stage("nemotron-4-15b", layers=2, gated_mlp=True)
    assert info.value.field == "model.squared_relu"


def test_full_attention_every_needs_a_window():
    with pytest.raises(ScenarioError) as info:
        _stage("qwen3-235b-a22b", layers=2, full_attention_every=2)
    assert info.value.field == "model.full_attention_every"


def test_deepseek_v3_mtp_module_is_one_layer_a_projection_and_a_head_pass():
    """DeepSeek-V3 §2.2: the MTP module (num_nextn_predict_layers 1) — one more MoE layer, a
    2h → h projection and a second pass of the shared output head, on the last stage;
    ``model.mtp_layers: 0`` switches it off."""
    c = load_hf_config("deepseek-v3", seq_len=4096)
    with_mtp = _stage("deepseek-v3", layers=4)
    without = _stage("deepseek-v3", layers=4, mtp_layers=0)
    one_more = _stage("deepseek-v3", layers=5, mtp_layers=0)
    layer = one_more.forward_flops - without.forward_flops
    proj = 2 * 4096 * 2 * c.hidden * c.hidden
    assert with_mtp.forward_flops - without.forward_flops - layer == pytest.approx(
        proj + c.logits_forward_flops(1)
    )
    # its parameters (embedding and head shared) held in bf16 beside the main model's
    assert with_mtp.static.weights - without.static.weights == 2 * c.mtp_params()
    assert with_mtp.forward > without.forward and with_mtp.backward > without.backward


def test_layer_types_must_be_periodic(tmp_path):
    import json

    from clustersim.workload.hf_config import DATA_HF

    cfg = json.loads((DATA_HF / "gpt-oss-120b.json").read_text())
    cfg["layer_types"][4] = "full_attention"
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ScenarioError) as info:
        load_hf_config(str(path))
    assert "layer_types" in info.value.expected
