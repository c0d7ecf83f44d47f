"""``training.fp8_recipe``: Transformer Engine's delayed / current / block / MXFP8 / NVFP4
recipes — quantize bytes in closed form, against TE's published per-recipe GEMM benchmark,
the GEMM never below its peak time, cached weight copies, profile defaults and refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.hardware.datasheets import datasheet
from clustersim.hardware.gpus import get_gpu
from clustersim.validation.te_gemms import GEMM_ONLY, TE_GPUS, quantize_rows
from clustersim.workload.calibration import calibration
from clustersim.workload.fp8 import fp8_cache_bytes, fp8_gemm_time, fp8_linear_params, te_fp8_layer
from clustersim.workload.fp8_recipes import (
    RECIPES,
    _layer_ms,
    cast_bytes_per_element,
    default_recipe,
    effective,
    gemm_factor,
)
from clustersim.workload.memory_bandwidth import memory_curves_for
from clustersim.workload.model_presets import TRANSFORMER_PRESETS
from clustersim.workload.ops import LayerOp
from clustersim.workload.stage_cost import chunk_costs
from clustersim.workload.transformer_ops import layer_ops

H100, H200, B200 = "H100-SXM5-80GB", "H200-SXM-141GB", "B200-SXM-180GB"
GPT = TRANSFORMER_PRESETS["gpt3-175b"][0]

# bytes per element of one quantization used rowwise and columnwise, from TE's kernels:
# read BF16 (2) [+ amax read 2] + copies · (element + scale / block)
CLOSED = {
    (H100, "delayed"): 2 + 2 * 1,  # cast_transpose: FP8 data + FP8 transpose (TN-only GEMMs)
    (B200, "delayed"): 2 + 1,  # non-TN FP8 GEMMs: no transpose
    (H100, "current"): 2 + 2 + 2 * 1,  # amax pass, then cast_transpose
    (B200, "current"): 2 + 2 + 1,
    (H100, "block"): 2 + 2 * (1 + 4 / 128),  # rowwise + columnwise, FP32 scale per 1×128
    (B200, "block"): 2 + 2 * (1 + 1 / 32),  # TE emulates block by MXFP8 on Blackwell
    (B200, "mxfp8"): 2 + 2 * (1 + 1 / 32),  # E8M0 scale per 1×32, both copies
    (B200, "nvfp4"): 2 + 2 + 2 * (0.5 + 1 / 16),  # per-tensor amax, E2M1 + E4M3 scale per 16
}


@pytest.mark.parametrize("gpu,recipe", list(CLOSED))
def test_quantize_bytes_per_element_closed_form(gpu, recipe):
    assert cast_bytes_per_element(effective(recipe, gpu), gpu) == pytest.approx(
        CLOSED[gpu, recipe], rel=1e-15
    )


@pytest.mark.parametrize("gpu,recipe", list(CLOSED))
def test_cast_time_is_its_kernels_and_bytes_at_the_tuned_kernels_bandwidth(gpu, recipe):
    eff, curve = calibration(gpu).fp8, memory_curves_for(gpu).of("tuned")
    casts = [8192.0 * 4096, 4096.0 * 12288]
    t = fp8_gemm_time(gpu, 8192, 12288, 4096, casts, recipe=recipe)
    kernels = {"delayed": 1, "current": 3, "block": 1, "mxfp8": 2, "nvfp4": 3}[effective(recipe, gpu).name]
    hbm = get_gpu(gpu).hbm_bandwidth
    want = sum(
        kernels * eff.launch_s + (e * CLOSED[gpu, recipe] + curve.bytes_half) / (hbm * curve.frac_max)
        for e in casts
    )
    assert t.cast_s == pytest.approx(want, rel=1e-12)


def test_per_tensor_recipes_share_the_calibrated_fp8_gemm():
    d, c = (fp8_gemm_time(H100, 8192, 8192, 8192, [], recipe=r).gemm_s for r in ("delayed", "current"))
    assert d == c


@pytest.mark.parametrize("row", quantize_rows(), ids=lambda r: f"{r.gpu}-{r.what}")
def test_quantize_cost_matches_te_autocast_less_prequantized(row):
    """Measured quantize time = TE's autocast − pre-quantized per-layer ms (12 te.Linear calls:
    X for both usages, W rowwise only); bound 10 % plus the table's run-to-run spread (its
    BF16 autocast vs pre-quantized rows, which quantize nothing: 0.05 ms on H200 NVL, 0.34 ms
    on B300) — :mod:`clustersim.validation.te_gemms`."""
    ms = _layer_ms()
    te = {v: k for k, v in TE_GPUS.items()}[row.gpu]
    spread = abs(ms[te, "bf16", "autocast"] - ms[te, "bf16", "prequantized"])
    recipe = row.what.split()[0]
    measured = ms[te, recipe, "autocast"] - ms[te, GEMM_ONLY[recipe], "prequantized"]
    assert row.measured_ms == measured
    assert abs(row.model_ms - measured) <= 0.10 * measured + spread


def test_gemm_factors_are_the_benchmark_ratios():
    ms = _layer_ms()
    b = "B300 SXM6 AC"
    assert gemm_factor("mxfp8") == ms[b, "mxfp8", "prequantized"] / ms[b, "current", "prequantized"]
    assert gemm_factor("nvfp4") == ms[b, "nvfp4", "prequantized"] / ms[b, "current", "prequantized"]
    assert gemm_factor("block") == pytest.approx((16.785 + 22.882 - 18.978) / 16.785, rel=1e-12)
    assert gemm_factor("delayed") == gemm_factor("current") == 1.0


# FP4 tensor cores: twice the FP8 dense peak on B200 / GB200 (NVIDIA Blackwell datasheet: 9 vs 4.5 PFLOPS)
PEAK_MULTIPLE = {"delayed": 1, "current": 1, "block": 1, "mxfp8": 1, "nvfp4": 2}


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([(g, r) for g, r in CLOSED] + [(H200, "current"), ("GB200-186GB", "nvfp4")]),
    st.integers(1, 65536),
    st.integers(1, 65536),
    st.integers(1, 65536),
)
def test_a_low_precision_gemm_never_beats_its_peak(gpu_recipe, m, n, k):
    gpu, recipe = gpu_recipe
    t = fp8_gemm_time(gpu, m, n, k, [], recipe=recipe)
    peak = datasheet(gpu).fp8_flops * PEAK_MULTIPLE[effective(recipe, gpu).name]
    assert t.gemm_s >= 2.0 * m * n * k / peak


def _casts(ops, fused: bool = False):
    """(elements, recipe) of every quantization a layer's ops run by a quantize kernel of
    their own (``fused``: by the TE norm kernel before the GEMM)."""
    works = [w for op in ops if isinstance(op, LayerOp) for w in (op.fwd, op.bwd_input, op.bwd_weight)]
    return [(e, w.fp8_recipe) for w in works for e in (w.fp8_norm_casts if fused else w.fp8_casts or ())]


@pytest.mark.parametrize("recipe", ["delayed", "current", "block"])
@pytest.mark.parametrize("t,sp", [(1, False), (8, False), (8, True)])
def test_a_layers_cast_bytes_match_the_closed_form(recipe, t, sp):
    """Per micro-batch a GPT layer quantizes the inputs X of its four linears (the LN output
    sbh, gathered under SP; the attention context sbh/t; the LN output sbh; the GeLU output
    4sbh/t) and their output gradients dY (3sbh/t, sbh, 4sbh/t, sbh), each at the recipe's
    bytes per element — the two LN outputs by TE's norm kernel where the recipe fuses it
    (delayed, current: :func:`test_a_norm_quantizes_its_output_as_te_fuses_it`)."""
    s, b, h = GPT.seq_len, 1, GPT.hidden
    ops = te_fp8_layer(layer_ops(GPT, b, t, sp, 2), recipe)
    casts, fused = _casts(ops), _casts(ops, fused=True)
    ln = 2 * s * b * h if RECIPES[recipe].norm_fusion else 0
    x = s * b * h + s * b * h // t + s * b * h + 4 * s * b * h // t
    dy = 3 * s * b * h // t + s * b * h + 4 * s * b * h // t + s * b * h
    assert sum(e for e, _ in casts) == x + dy - ln and sum(e for e, _ in fused) == ln
    cast_bytes = sum(e * cast_bytes_per_element(RECIPES[r], H100) for e, r in casts)
    assert cast_bytes == pytest.approx((x + dy - ln) * CLOSED[H100, recipe], rel=1e-12)


# the quantize a TE norm leaves for its LayerNormLinear / LayerNormMLP output: (kernels,
# bytes per element). Delayed: the norm writes FP8 itself, Hopper then transposes it (read
# 1 + write 1); current: the norm takes the amax, the scale + cast_transpose remain (the
# amax kernel and its 2-byte read go); block / MXFP8: unfused, the recipe's own quantize
NORM_FUSED = {
    (H100, "delayed"): (1, 1 + 1),
    (B200, "delayed"): (0, 0),
    (H100, "current"): (2, CLOSED[H100, "current"] - 2),
    (B200, "current"): (2, CLOSED[B200, "current"] - 2),
    (H100, "block"): (1, CLOSED[H100, "block"]),
    (B200, "mxfp8"): (2, CLOSED[B200, "mxfp8"]),
}


@pytest.mark.parametrize("gpu,recipe", list(NORM_FUSED))
def test_a_norm_quantizes_its_output_as_te_fuses_it(gpu, recipe):
    kernels, per_element = NORM_FUSED[gpu, recipe]
    eff, curve, hbm = calibration(gpu).fp8, memory_curves_for(gpu).of("tuned"), get_gpu(gpu).hbm_bandwidth
    e = 8192.0 * 4096
    t = fp8_gemm_time(gpu, 8192, 12288, 4096, [], recipe=recipe, norm_casts=[e])
    moved = (e * per_element + curve.bytes_half) / (hbm * curve.frac_max) if per_element else 0.0
    assert t.cast_s == pytest.approx(kernels * eff.launch_s + moved, rel=1e-12)
    # never dearer than its unfused quantize
    assert t.cast_s <= fp8_gemm_time(gpu, 8192, 12288, 4096, [e], recipe=recipe).cast_s


@pytest.mark.parametrize(
    "gpu,recipe,per_param,fp8_params",
    [
        (H100, "delayed", 2.0, False),  # FP8 weight + FP8 transpose
        (H100, "delayed", 1.0, True),  # the FP8 parameter is the weight: the transpose only
        (B200, "delayed", 1.0, False),  # no transpose on Blackwell
        (B200, "delayed", 0.0, True),
        (H100, "block", 2 * (1 + 4 / 128**2), False),  # 128×128 weight blocks, FP32 scales
        (B200, "mxfp8", 2 * (1 + 1 / 32), False),
        (B200, "nvfp4", 2 * (0.5 + 1 / 256), False),  # 16×16 weight blocks, E4M3 scales
    ],
)
def test_cached_weight_copies_by_recipe(gpu, recipe, per_param, fp8_params):
    ops = te_fp8_layer(layer_ops(GPT, 1, 8, True, 2), recipe)
    want = per_param * sum(fp8_linear_params(ops))
    assert fp8_cache_bytes(ops, gpu, recipe, fp8_params) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(
    "framework,gpu,want",
    [
        ("megatron_core", H100, "current"),
        ("megatron_core", B200, "mxfp8"),
        ("megatron_2021", H100, "delayed"),
        ("fsdp2", B200, "mxfp8"),
        ("deepspeed", "MI300X-192GB", "delayed"),
    ],
)
def test_profile_defaults(framework, gpu, want):
    assert default_recipe(framework, gpu) == want


def _quick(**over):
    return cs.load_scenario("scenarios/quickstart.yaml").with_overrides(
        {"cluster.preset": "dgx_h100", "simulation.network": "analytical", **over}
    )


def test_current_scaling_is_slower_than_delayed_and_the_profile_picks_it():
    fp8 = {"training.precision": "fp8"}
    delayed = chunk_costs(_quick(**fp8), 4)
    current = chunk_costs(_quick(**fp8, **{"training.fp8_recipe": "current"}), 4)
    assert all(c.forward > d.forward and c.backward > d.backward for d, c in zip(delayed, current))
    mcore = chunk_costs(
        _quick(**fp8, **{"training.framework": "megatron_core", "training.fp8_recipe": "current"}), 4
    )
    default = chunk_costs(_quick(**fp8, **{"training.framework": "megatron_core"}), 4)
    assert [c.forward for c in mcore] == [c.forward for c in default]


@pytest.mark.parametrize(
    "over,match",
    [
        ({"training.precision": "fp8", "training.fp8_recipe": "mxfp8"}, "mxfp8 needs Blackwell"),
        ({"training.precision": "fp8", "training.fp8_recipe": "nvfp4"}, "nvfp4 needs Blackwell"),
        ({"training.fp8_recipe": "current"}, "needs training.precision: fp8"),
        (
            {"training.precision": "fp8", "training.fp8_recipe": "block", "cluster.gpu": "MI300X-192GB"},
            "block needs Hopper or newer .* use delayed or current",
        ),
    ],
)
def test_refusals_name_the_field_and_what_is_accepted(over, match):
    with pytest.raises(ScenarioError, match=f"training.fp8_recipe: .*{match}"):
        chunk_costs(_quick(**over), 4)
