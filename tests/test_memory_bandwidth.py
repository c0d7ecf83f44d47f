"""Memory-bound kernels (issue 36 item 4): the achieved-bandwidth curves against Liger-Kernel's
kernel-level rows, and the closed-form bytes of fused and unfused implementations per framework."""

from __future__ import annotations

import copy
import math

import pytest

import clustersim as cs
from clustersim.hardware.gpus import get_gpu
from clustersim.workload.calibration import calibration
from clustersim.workload.cost_model import CostModel
from clustersim.workload.kernel_impls import FRAMEWORK_KERNELS, GENERIC, TUNED
from clustersim.workload.memory_bandwidth import (
    TOLERANCE,
    BandwidthCurve,
    measured_gpus,
    memory_curves,
    memory_rows,
    predicted_us,
)
from clustersim.workload.model_presets import TRANSFORMER_PRESETS
from clustersim.workload.ops import LayerOp, Work
from clustersim.workload.stage_builder import TrainSetup
from clustersim.workload.transformer_ops import layer_ops, output_ops

A100, H100, H200 = "A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB"
GPT, LLAMA = TRANSFORMER_PRESETS["gpt-22b"][0], TRANSFORMER_PRESETS["llama2-7b"][0]
B, T, E = 2, 4, 2  # micro-batch, TP, bf16 bytes


def _sets(role: str) -> dict[tuple[str, str], list]:
    sets: dict[tuple[str, str], list] = {}
    for r in memory_rows():
        if r.role == role:
            sets.setdefault((r.gpu, r.kind), []).append(r)
    return sets


def _errors(rows) -> list[float]:
    return [predicted_us(r, memory_curves(r.gpu)) / r.time_us - 1 for r in rows]


@pytest.mark.parametrize("key", sorted(_sets("calibrate")), ids="-".join)
def test_each_gpu_and_kind_fits_its_kernel_rows(key):
    errors = _errors(_sets("calibrate")[key])
    rms, largest = TOLERANCE[key[1]]
    assert math.sqrt(sum(e * e for e in errors) / len(errors)) <= rms, errors
    assert max(map(abs, errors)) <= largest, errors


@pytest.mark.parametrize("key", sorted(_sets("check")), ids="-".join)
def test_check_rows_hold_with_the_fitted_curves(key):
    # other implementations' kernel lists and bytes (transformers' complex RoPE on H100)
    errors = _errors(_sets("check")[key])
    rms, largest = TOLERANCE["check"]
    assert math.sqrt(sum(e * e for e in errors) / len(errors)) <= rms, errors
    assert max(map(abs, errors)) <= largest, errors


def test_every_row_names_its_source():
    assert all(r.source and r.role in ("calibrate", "check", "context") for r in memory_rows())


def test_the_curve_reaches_half_its_plateau_at_x_half_and_the_plateau_when_large():
    curve, hbm = BandwidthCurve(0.8, 1e7), 2e12
    assert curve.fraction(1e7, hbm) == pytest.approx(0.4, rel=1e-12)
    assert curve.fraction(1e15, hbm) == pytest.approx(0.8, rel=1e-5)
    assert curve.fraction(1e6, hbm) < curve.fraction(1e7, hbm) < curve.fraction(1e8, hbm) < 0.8


@pytest.mark.parametrize("gpu", measured_gpus())
def test_generic_kernels_run_below_the_tuned_curve(gpu):
    curves = memory_curves(gpu)
    assert curves.generic.frac_max < curves.tuned.frac_max


def test_a_gpu_without_rows_takes_the_nearest_curves_scaled_by_the_triad_and_hbm_ratios():
    own, donor = memory_curves(H200), memory_curves(H100)
    ratio = calibration(H200).dense16.memory / calibration(H100).dense16.memory
    assert own.tuned.frac_max == pytest.approx(donor.tuned.frac_max * ratio, rel=1e-12)
    # the ramp's seconds kept: its bytes scale with the HBM bandwidth
    hbm = get_gpu(H200).hbm_bandwidth / get_gpu(H100).hbm_bandwidth
    assert own.tuned.bytes_half == pytest.approx(donor.tuned.bytes_half * hbm, rel=1e-12)
    assert "transfer" in own.tuned.source


@pytest.mark.parametrize("kind", ["tuned", "generic"])
def test_the_cost_model_prices_a_memory_bound_kernel_on_its_kinds_curve(kind):
    cm = CostModel.for_gpu(H100)
    curve, hbm, x = memory_curves(H100).of(kind), get_gpu(H100).hbm_bandwidth, 3e7
    expected = cm.eff.launch_s + (x + curve.bytes_half) / (hbm * curve.frac_max)
    assert cm.time(Work(0.0, x, memory_kind=kind)) == pytest.approx(expected, rel=1e-12)


def _ops(ops, prefix: str) -> list[LayerOp]:
    return [op for op in ops if isinstance(op, LayerOp) and op.name.split(".")[0] == prefix]


def _bytes(ops, prefix: str) -> tuple[float, float, int, int]:
    """(forward bytes, backward bytes, forward kernels, backward kernels) of ops ``prefix``."""
    mine = _ops(ops, prefix)
    return (
        sum(op.fwd.bytes for op in mine),
        sum(op.bwd_input.bytes for op in mine),
        sum(1 for op in mine if op.fwd.bytes),
        sum(1 for op in mine if op.bwd_input.bytes),
    )


def test_megatron_2021_gpt_layer_keeps_its_fused_kernels():
    # Apex layernorm: read x, write y (2e) / the dγ/dβ partials read dy and x (2e), the input
    # gradient reads them again and writes dx (3e): two kernels; bias-dropout-add
    # reads x and the residual, writes the sum and the uint8 mask; bias-GeLU 2e / 3e
    ops = layer_ops(GPT, B, T, False, E)
    bsh, f = B * GPT.seq_len * GPT.hidden, B * GPT.seq_len * GPT.ffn_hidden / T
    assert _bytes(ops, "norm1") == (2 * E * bsh, 5 * E * bsh, 1, 2)
    assert _bytes(ops, "residual2") == ((3 * E + 1) * bsh, (2 * E + 1) * bsh, 1, 1)
    assert _bytes(ops, "mlp_act") == (2 * E * f, 3 * E * f, 1, 1)
    assert not _ops(ops, "rope")  # learned positions


@pytest.mark.parametrize(
    "framework, fwd, bwd, kernels",
    [
        # bias_swiglu: read gate and up (2f), write f / read dh, gate, up, write both gradients
        ("megatron_core", 3, 5, (1, 1)),
        # silu (read f, write f) then mul (read 2f, write f); backward two muls and silu_backward
        ("fsdp2", 5, 9, (2, 3)),
    ],
)
def test_swiglu_bytes_fused_and_unfused(framework, fwd, bwd, kernels):
    ops = layer_ops(LLAMA, B, T, False, E, kernels=framework)
    f = B * LLAMA.seq_len * LLAMA.ffn_hidden / T
    assert _bytes(ops, "mlp_act") == (fwd * E * f, bwd * E * f, *kernels)


@pytest.mark.parametrize(
    "framework, per_element, kernels",
    [
        ("megatron_core", 2 * E, 1),  # TE fused RoPE: read and write q, k
        ("megatron_2021", 10 * E, 5),  # neg, cat, ·cos, ·sin, add
        ("fsdp2", 2 * E + 16, 3),  # float(), complex multiply, type_as
    ],
)
def test_rope_rotates_the_query_and_key_heads(framework, per_element, kernels):
    ops = layer_ops(LLAMA, B, T, False, E, kernels=framework)
    qk = B * LLAMA.seq_len * (LLAMA.heads + LLAMA.n_kv) / T * LLAMA.head_dim
    assert _bytes(ops, "rope") == (per_element * qk, per_element * qk, kernels, kernels)


@pytest.mark.parametrize(
    "framework, fwd, bwd, kernels",
    [
        # cast, max, sub, exp, sum, div / mul by the loss gradient, cast back
        ("megatron_core", E + 36, E + 12, (6, 2)),
        # cast, log_softmax / nll_loss backward, log_softmax backward, cast back
        ("fsdp2", E + 12, E + 20, (2, 3)),
    ],
)
def test_cross_entropy_bytes_per_logit(framework, fwd, bwd, kernels):
    logits = B * LLAMA.seq_len * LLAMA.vocab / T
    ops = output_ops(LLAMA, B, T, False, E, framework)
    assert _bytes(ops, "cross_entropy") == (fwd * logits, bwd * logits, *kernels)


def test_deepspeeds_rmsnorm_is_the_fp32_chain_of_llamarmsnorm():
    # cast to fp32 (e + 4), pow (8), mean (4), ·rsqrt (8), cast back (4 + e), ·weight (2e)
    ops = layer_ops(LLAMA, B, T, False, E, kernels="deepspeed")
    bsh = B * LLAMA.seq_len * LLAMA.hidden
    fwd, _, n, _ = _bytes(ops, "norm1")
    assert (fwd, n) == ((4 * E + 28) * bsh, 6)
    kinds = [op.fwd.memory_kind for op in _ops(ops, "norm1") if op.fwd.bytes]
    assert kinds == [TUNED, TUNED, GENERIC, GENERIC, TUNED, GENERIC]  # the reduction, the broadcasts


def test_every_framework_names_an_implementation_of_every_op():
    assert all(set(row) == set(FRAMEWORK_KERNELS["megatron_2021"]) for row in FRAMEWORK_KERNELS.values())


LLAMA_SCENARIO = {
    "cluster": {"nodes": 1, "gpus_per_node": 1, "gpu": H100},
    "model": {
        "kind": "transformer",
        "layers": 2,
        "hidden": 512,
        "heads": 8,
        "ffn_hidden": 1408,
        "vocab": 4096,
        "seq_len": 512,
        "gated_mlp": True,
        "norm": "rmsnorm",
        "position": "rope",
        "bias": False,
        "dropout": False,
    },
    "training": {"global_batch": 2, "micro_batch": 1, "framework": "megatron_core"},
    "parallel": {"tp": 1, "pp": 1, "dp": 1},
    "simulation": {"network": "analytical", "collective_model": "analytical"},
}


def test_the_framework_picks_the_kernels_and_memory_kernels_overrides_it():
    raw = copy.deepcopy(LLAMA_SCENARIO)
    assert TrainSetup.of(cs.load_scenario(raw)).kernels == "megatron_core"
    raw["training"]["memory_kernels"] = "fsdp2"
    assert TrainSetup.of(cs.load_scenario(raw)).kernels == "fsdp2"


def test_unfused_kernels_make_the_step_slower():
    fused = cs.simulate(cs.load_scenario(LLAMA_SCENARIO)).summary["iteration_time_s"]
    raw = copy.deepcopy(LLAMA_SCENARIO)
    raw["training"]["memory_kernels"] = "fsdp2"
    unfused = cs.simulate(cs.load_scenario(raw)).summary["iteration_time_s"]
    assert unfused > fused
