"""Attention kernels (``model.attention``): the fused flash kernel's FLOPs, times and
activation bytes in closed form against the standard (Megatron-2021) path."""

from __future__ import annotations

from dataclasses import replace

import pytest

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.hardware.gpus import get_gpu
from clustersim.workload.attention_kernels import KERNELS
from clustersim.workload.calibration import calibration
from clustersim.workload.cost_model import CostModel, efficiency_for
from clustersim.workload.model_presets import TRANSFORMER_PRESETS
from clustersim.workload.stage_cost import chunk_costs
from clustersim.workload.transformer_ops import layer_ops

H100, A100, MI300X = "H100-SXM5-80GB", "A100-SXM4-80GB", "MI300X-192GB"
GPT = TRANSFORMER_PRESETS["gpt3-175b"][0]  # dropout, learned positions, MHA
LLAMA = TRANSFORMER_PRESETS["llama2-70b"][0]  # no dropout, GQA (8 KV heads)


def _op(cfg, name, b=1, t=8, sp=False):
    return next(op for op in layer_ops(cfg, b, t, sp, 2) if getattr(op, "name", "") == name)


def _kept(cfg, b, t, sp, selective=False):
    ops = layer_ops(cfg, b, t, sp, 2)
    return sum(
        op.activation for op in ops if hasattr(op, "activation") and not (selective and op.attention_core)
    )


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("cfg", [GPT, LLAMA], ids=["gpt3-175b", "llama2-70b"])
def test_flash_flops_are_flashattention_convention(cfg, causal):
    b, t = 2, 8
    op = _op(replace(cfg, attention="flash", causal=causal), "flash_attention", b, t)
    fwd = 4 * b * cfg.seq_len**2 * (cfg.heads // t) * cfg.head_dim / (2 if causal else 1)
    assert op.fwd.flops == fwd
    assert op.bwd_input.flops == 2.5 * fwd
    assert op.bwd_weight.flops == 0 and op.params == 0 and not op.attention_core


@pytest.mark.parametrize("kernel", KERNELS)
def test_flash_times_on_h100_follow_the_named_kernels_curve(kernel):
    cfg = replace(LLAMA, attention="flash", attention_kernel=kernel)  # causal by default
    op, cm = _op(cfg, "flash_attention"), CostModel.for_gpu(H100)
    curve = next(c for c in calibration(H100).attention if c.impl == kernel)
    gpu, eff = get_gpu(H100), calibration(H100).dense16
    s = cfg.seq_len / curve.causal_factor  # causal: the fitted sequence factor
    assert cfg.head_dim == 128  # the curve's unit head dim
    for work, a, sh in (
        (op.fwd, curve.fwd_max, curve.fwd_s_half),
        (op.bwd_input, curve.bwd_max, curve.bwd_s_half),
    ):
        e = a * s / (s + sh)  # head dim 128: the curve's own unit
        want = (
            max(work.flops / (gpu.peak_flops * e), work.bytes / (gpu.hbm_bandwidth * eff.memory))
            + eff.launch_s
        )
        assert cm.time(work) == pytest.approx(want, rel=1e-12)
    # the fused kernel is compute-bound at these sizes
    assert op.fwd.flops / (gpu.peak_flops * curve.fwd_max) > op.fwd.bytes / gpu.hbm_bandwidth


@pytest.mark.parametrize("causal", [True, False])
def test_flash_times_elsewhere_use_the_gemm_efficiency_at_the_head_shape(causal):
    cfg = replace(GPT, attention="flash", causal=causal)
    op, cm, e = _op(cfg, "flash_attention"), CostModel.for_gpu(MI300X), efficiency_for(MI300X)
    assert cm.attention == ()
    s = cfg.seq_len // 2 if causal else cfg.seq_len
    # the GEMM terms at (s, s, head_dim), no wave quantization (the grid spans batch × heads)
    frac = e.matmul_max * (s / (s + e.dim_half)) ** 2 * cfg.head_dim / (cfg.head_dim + e.k_half)
    gpu = get_gpu(MI300X)
    for work in (op.fwd, op.bwd_input):
        want = (
            max(work.flops / (gpu.peak_flops * frac), work.bytes / (gpu.hbm_bandwidth * e.memory))
            + e.launch_s
        )
        assert cm.time(work) == pytest.approx(want, rel=1e-12)


def test_flash_bytes_are_q_k_v_o_and_logsumexp():
    b, t, cfg = 2, 8, replace(LLAMA, attention="flash")
    at, kvt, s, d = cfg.heads // t, cfg.n_kv // t, cfg.seq_len, cfg.head_dim
    q, kv, lse = b * s * at * d * 2, b * s * 2 * kvt * d * 2, b * at * s * 4
    op = _op(cfg, "flash_attention", b, t)
    assert op.fwd.bytes == q + kv + q + lse  # read Q, K, V; write O, lse
    assert op.bwd_input.bytes == 3 * q + q + 2 * kv + lse  # read Q, K, V, O, dO, lse; write dQ, dK, dV
    assert op.activation == q + kv + lse


@pytest.mark.parametrize("t,sp", [(1, False), (8, False), (8, True)])
def test_flash_activations_are_korthikanti_without_s2_terms_plus_logsumexp(t, sp):
    """Korthikanti §4.1: 34sbh + 5as²b (TP-region parts / t); flash drops the 5as²b (softmax
    output, dropout mask, dropout output) and keeps the fp32 log-sum-exp (4·b·a·s / t)."""
    b = 1
    s, h, a = GPT.seq_len, GPT.hidden, GPT.heads
    standard = _kept(GPT, b, t, sp)
    flash = _kept(replace(GPT, attention="flash"), b, t, sp)
    assert standard - flash == 5 * a * s * s * b // t - 4 * b * a * s // t  # to the byte
    korthikanti = s * b * h * (34 / t if sp else 10 + 24 / t) + 5 * a * s * s * b / t
    assert flash == pytest.approx(korthikanti - 5 * a * s * s * b / t + 4 * b * a * s / t, rel=1e-15)


def test_flash_activations_without_dropout_drop_the_softmax_output():
    b, t, at, s = 2, 8, LLAMA.heads // 8, LLAMA.seq_len
    standard, flash = _kept(LLAMA, b, t, True), _kept(replace(LLAMA, attention="flash"), b, t, True)
    assert standard - flash == b * at * s * s * 2 - b * at * s * 4


def test_selective_recompute_changes_nothing_with_flash():
    cfg = replace(GPT, attention="flash")
    assert _kept(cfg, 1, 8, True, selective=True) == _kept(cfg, 1, 8, True)
    sc = cs.load_scenario("scenarios/quickstart.yaml").with_overrides({"model.attention": "flash"})
    none, sel = (chunk_costs(sc.with_overrides({"training.recompute": r}), 4) for r in ("none", "selective"))
    for a, b in zip(none, sel):
        assert (a.forward, a.backward, a.activation_memory) == (b.forward, b.backward, b.activation_memory)


def test_mfu_counts_full_attention_flops_whatever_the_kernel():
    """MFU's model FLOPs keep Megatron's 4bs²h per layer (no causal halving), so MFU × time
    is the same for both kernels; the kernels' own (causal-halved) FLOPs are in the spans."""
    sc = cs.load_scenario("scenarios/quickstart.yaml").with_overrides(
        {"simulation.network": "analytical", "simulation.granularity": "stage"}
    )
    std = cs.simulate(sc, progress=False).summary
    fl = cs.simulate(sc.with_overrides({"model.attention": "flash"}), progress=False).summary
    assert fl["iteration_time_s"] < std["iteration_time_s"]
    assert fl["mfu"] * fl["iteration_time_s"] == pytest.approx(
        std["mfu"] * std["iteration_time_s"], rel=1e-12
    )


def _llama70b(**over):
    raw = {
        "name": "llama2-70b-s4096-64xH100",
        "cluster": {"preset": "dgx_h100", "nodes": 8},
        "model": {"preset": "llama2-70b", "seq_len": 4096},
        "training": {"global_batch": 64, "micro_batch": 2, "recompute": "none"},
        "parallel": {"tp": 8, "pp": 4, "dp": 2, "sequence_parallel": True},
        "simulation": {"network": "analytical", "granularity": "stage"},
    }
    return cs.load_scenario(raw).with_overrides(over)


def test_llama2_70b_at_4096_is_oom_with_standard_attention_and_fits_with_flash():
    std = cs.simulate(_llama70b(), progress=False).summary
    flash = cs.simulate(_llama70b(**{"model.attention": "flash"}), progress=False).summary
    assert std["oom"] is True and std["peak_memory_gib"] > 80
    assert flash["oom"] is False and flash["peak_memory_gib"] < get_gpu("H100-SXM5-80GB").memory_bytes / 2**30


def test_bad_attention_names_the_field():
    with pytest.raises(ScenarioError, match="model.attention"):
        cs.load_scenario("scenarios/quickstart.yaml").with_overrides({"model.attention": "fused"})
