"""Fused attention kernels (workload/attention_kernels.py): which kernel a stack runs, the
FLOP rules (causal counted once, GQA, sliding window, MLA) in closed form, and the curves
against their published rows (the per-row tolerance test is tests/test_calibration.py's,
which covers every row of attention_kernel_measurements.csv)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.workload.attention import attended_pairs
from clustersim.workload.attention_kernels import FALLBACK, KERNELS, pick
from clustersim.workload.calibration import calibration, measurements
from clustersim.workload.context_parallel import context_parallel_ops
from clustersim.workload.cost_model import CostModel
from clustersim.workload.hf_config import load_hf_config
from clustersim.workload.model_presets import TRANSFORMER_PRESETS
from clustersim.workload.transformer_ops import layer_ops

H100, A100, B200 = "H100-SXM5-80GB", "A100-SXM4-80GB", "B200-SXM-180GB"
LLAMA = replace(TRANSFORMER_PRESETS["llama2-70b"][0], attention="flash")  # GQA 64:8, causal


def _flash(cfg, b=2, t=8):
    return next(op for op in layer_ops(cfg, b, t, False, 2) if getattr(op, "name", "") == "flash_attention")


@pytest.mark.parametrize("window", [0, 512, 4096, 10**6])
@pytest.mark.parametrize("causal", [True, False])
def test_flash_flops_count_the_attended_pairs_once(causal, window):
    b, t, s = 2, 8, LLAMA.seq_len
    cfg = replace(LLAMA, causal=causal, sliding_window=window)
    op, at, d = _flash(cfg, b, t), LLAMA.heads // t, LLAMA.head_dim
    w = min(window, s) if window else s
    pairs = (s * w - w * w / 2) if causal else (2 * s * w - w * w)
    assert op.fwd.flops == 4 * b * at * d * pairs and op.bwd_input.flops == 2.5 * op.fwd.flops
    if w == s:  # no window: s², halved by the mask
        assert op.fwd.flops == 4 * b * s * s * at * d / (2 if causal else 1)
    assert op.fwd.attention.seq_len == w and op.fwd.attention.causal == causal


@pytest.mark.parametrize("s,w", [(64, 16), (300, 7), (1000, 999)])
def test_windowed_pairs_match_a_count_of_the_band(s, w):
    # each query i sees keys j ≤ i with i − j < w (causal) or |i − j| < w (not); the
    # closed form is the continuous count (FlashAttention's s²/2 for causal): off the
    # discrete one by w/2 (causal) and s − w (not), both nothing against s·w at scale
    causal = sum(min(i + 1, w) for i in range(s))
    full = sum(min(i + w, s) - max(i - w + 1, 0) for i in range(s))
    assert attended_pairs(s, True, w) == causal - w / 2
    assert attended_pairs(s, False, w) == full + s - w


def test_gqa_keeps_the_flops_and_cuts_the_kv_bytes():
    b, t, s, d, e = 2, 8, LLAMA.seq_len, LLAMA.head_dim, 2
    gqa, mha = _flash(LLAMA, b, t), _flash(replace(LLAMA, kv_heads=0), b, t)
    assert gqa.fwd.flops == mha.fwd.flops and gqa.bwd_input.flops == mha.bwd_input.flops
    kv_less = b * s * 2 * (LLAMA.heads - LLAMA.kv_heads) // t * d * e  # K and V per GPU
    assert mha.fwd.bytes - gqa.fwd.bytes == kv_less
    assert mha.bwd_input.bytes - gqa.bwd_input.bytes == 2 * kv_less  # read K, V; write dK, dV


def test_gqa_runs_at_the_rate_of_mha_as_measured():
    # the A100 check rows measure 32 query heads over 32 and 8 KV heads: same TFLOP/s within 3 %
    rows = [r for r in measurements() if r.gpu == A100 and "GQA" in r.note]
    by_shape = {}
    for r in rows:
        by_shape.setdefault((r.seq_len, r.causal), []).append(r.value)
    assert len(by_shape) == 4 and all(max(v) / min(v) - 1 < 0.03 for v in by_shape.values())


def test_mla_runs_the_mean_head_dim_with_exact_flops():
    ds = replace(load_hf_config("deepseek-v3", 4096), attention="flash")
    b, t = 1, 8
    op = next(
        o for o in layer_ops(ds, b, t, False, 2, moe=False) if getattr(o, "name", "") == "flash_attention"
    )
    a = ds.heads // t
    assert ds.qk_head_dim == 192 and ds.v_head_dim == 128
    assert op.fwd.flops == 2 * b * ds.seq_len**2 * a * (ds.qk_head_dim + ds.v_head_dim) / 2  # causal
    assert op.fwd.attention.head_dim == 160


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_causal_kernel_is_priced_once_at_its_causal_rate(kernel):
    cm = CostModel.for_gpu(H100)
    curve = pick(cm.attention, kernel)
    cfg = replace(LLAMA, attention_kernel=kernel)
    op = _flash(cfg)
    eff = curve.efficiency(cfg.head_dim, cfg.seq_len, causal=True)
    assert eff == curve.efficiency(cfg.head_dim, cfg.seq_len / curve.causal_factor)
    comp = op.fwd.flops / (cm.gpu.peak_flops * eff)
    assert cm.time(op.fwd) == pytest.approx(comp + cm.eff.launch_s, rel=1e-12)
    # half the FLOPs of the unmasked kernel, at a lower rate: between half and the whole time
    full = _flash(replace(cfg, causal=False))
    assert cm.time(full.fwd) / 2 < cm.time(op.fwd) < cm.time(full.fwd)


def test_kernels_order_on_h100_as_the_fa3_paper_measures():
    curves = {c.impl: c for c in calibration(H100).attention}
    for hd, s in ((64, 8192), (128, 2048), (128, 16384)):
        fa2, fa3, cudnn = (curves[k].fwd_bwd_efficiency(hd, s) for k in ("fa2", "fa3", "cudnn"))
        assert fa2 < cudnn < fa3


def test_a_missing_kernel_falls_back_as_its_stack_does():
    a100, b200 = calibration(A100).attention, calibration(B200).attention
    assert {c.impl for c in a100} == {"fa2"} and {c.impl for c in b200} == {"cudnn"}
    assert pick(a100, "cudnn").impl == pick(a100, "fa3").impl == "fa2"  # TE and SDPA below sm90
    assert pick(b200, "cudnn").impl == "cudnn" and pick(b200, "fa2") is None  # GEMM estimate
    assert all(FALLBACK[k][0] == k for k in KERNELS)


def test_b200_takes_h100s_cudnn_shape_and_nvidias_maxima():
    h, b = (pick(calibration(g).attention, "cudnn") for g in (H100, B200))
    assert (b.fwd_s_half, b.bwd_s_half, b.hd64, b.bwd_hd64, b.hd256, b.causal_factor) == (
        h.fwd_s_half,
        h.bwd_s_half,
        h.hd64,
        h.bwd_hd64,
        h.hd256,
        h.causal_factor,
    )
    peak = 2250.0
    assert b.efficiency(128, 16384) * peak == pytest.approx(1460, rel=1e-6)
    assert b.efficiency(128, 16384, backward=True) * peak == pytest.approx(1000, rel=1e-6)


def _scenario(framework=None, **model):
    raw = {
        "cluster": {"preset": "dgx_h100", "nodes": 1},
        "model": {"preset": "llama2-7b", "seq_len": 2048, **model},
        "parallel": {"tp": 1, "pp": 1},
        "training": {"global_batch": 8, "micro_batch": 1, **({"framework": framework} if framework else {})},
    }
    return cs.load_scenario(raw)


@pytest.mark.parametrize(
    "framework,attention,kernel",
    [
        (None, None, None),
        ("megatron_core", "flash", "cudnn"),
        ("fsdp2", "flash", "cudnn"),
        ("deepspeed", None, None),
    ],
)
def test_profiles_fill_the_kernel_their_stack_runs(framework, attention, kernel):
    sc = _scenario(framework)
    assert (sc.model.attention, sc.model.attention_kernel) == (attention, kernel)


def test_a_stated_kernel_wins_and_a_bad_one_is_refused():
    assert _scenario("megatron_core", attention_kernel="fa3").model.attention_kernel == "fa3"
    with pytest.raises(ScenarioError, match="attention_kernel"):
        _scenario(attention="flash", attention_kernel="fa9")


def test_ring_attention_refuses_a_window():
    cfg = replace(LLAMA, seq_len=1024, sliding_window=256)
    with pytest.raises(ScenarioError, match="sliding_window"):
        context_parallel_ops(cfg, 1, 8, 1, 2, 4, "p2p")
    assert context_parallel_ops(cfg, 1, 8, 8, 2, 4, "a2a")  # Ulysses runs the whole sequence


def test_every_priced_kernel_has_rows_for_its_fitted_gpus():
    for gpu in (A100, H100, B200):
        for curve in calibration(gpu).attention:
            rows = [
                r for r in measurements() if r.gpu == gpu and r.impl == curve.impl and r.role == "calibrate"
            ]
            assert rows and all(r.source and not math.isnan(r.value) for r in rows)
