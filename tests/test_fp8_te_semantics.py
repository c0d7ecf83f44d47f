"""What Transformer Engine does around an FP8 step beyond the GEMMs, in closed form: the
weights quantized once per step (not per micro-batch), the sequence-parallel all-gathers
moving quantized tensors, and neither adding a simulated op or event."""

from __future__ import annotations

import pytest

import clustersim as cs
from clustersim.hardware.gpus import get_gpu
from clustersim.workload.calibration import calibration
from clustersim.workload.cost_model import CostModel
from clustersim.workload.fp8 import te_fp8_layer, weight_cast_seconds
from clustersim.workload.memory_bandwidth import memory_curves_for
from clustersim.workload.model_presets import TRANSFORMER_PRESETS
from clustersim.workload.ops import LayerOp, TPComm
from clustersim.workload.segments import backward_items, forward_items
from clustersim.workload.stage_cost import chunk_costs
from clustersim.workload.transformer_ops import layer_ops

H100 = "H100-SXM5-80GB"
GPT = TRANSFORMER_PRESETS["gpt3-175b"][0]
B, T, E = 1, 8, 2
# one quantized copy's bytes per element (data + scale / block) against BF16's 2, and the
# copies TE gathers for a tensor used both ways (per-tensor: rowwise, then a transpose)
ONE_COPY = {"delayed": 1.0, "current": 1.0, "block": 1 + 4 / 128, "mxfp8": 1 + 1 / 32, "nvfp4": 0.5 + 1 / 16}
BOTH_USAGES = {"delayed": 1, "current": 1, "block": 2, "mxfp8": 2, "nvfp4": 2}


def _comms(ops, amax: bool = False):
    """A layer's TP collectives: the gathers and reduce-scatters, or (``amax``) the amax
    all-reduces."""
    return [op for op in ops if isinstance(op, TPComm) and ("amax" in op.name) == amax]


@pytest.mark.parametrize("recipe", list(ONE_COPY))
def test_sequence_parallel_gathers_move_the_quantized_tensors(recipe):
    bf16 = _comms(layer_ops(GPT, B, T, True, E))
    fp8 = _comms(te_fp8_layer(layer_ops(GPT, B, T, True, E), recipe))
    bsh = B * GPT.seq_len * GPT.hidden
    for a, q in zip(bf16, fp8, strict=True):
        assert a.nbytes == q.nbytes == bsh * E
        if a.name == "tp all-gather":  # into QKV / MLP up: the rowwise copy
            assert q.forward_nbytes == int(bsh * ONE_COPY[recipe])
            assert q.backward_nbytes == bsh * E  # the input gradient's reduce-scatter: BF16
        else:  # out of attention-out / MLP down: BF16 out, the output gradient gathered quantized
            assert q.forward_nbytes == bsh * E
            assert q.backward_nbytes == int(bsh * ONE_COPY[recipe] * BOTH_USAGES[recipe])


@pytest.mark.parametrize("recipe", list(ONE_COPY))
def test_current_scaling_all_reduces_the_amax_before_each_gather(recipe):
    """Current scaling and NVFP4 (the recipes with an amax pass) all-reduce one FP32 amax
    over the TP group before each quantized gather: forward before the gathers into QKV and
    MLP up, backward before the gathers of attention-out's and MLP down's output gradients."""
    ops = te_fp8_layer(layer_ops(GPT, B, T, True, E), recipe)
    amax = _comms(ops, amax=True)
    if recipe not in ("current", "nvfp4"):
        assert amax == []
        return
    assert [(op.fwd, op.bwd, op.nbytes, op.group) for op in amax] == [
        ("all_reduce", "", 4, "tp"),
        ("", "all_reduce", 4, "tp"),
    ] * 2
    cm = CostModel.for_gpu(H100)
    fwd = [(i[1], i[3]) for i in forward_items(ops, cm) if i[0] == "x"]
    bwd = [(i[1], i[3]) for i in backward_items(ops, cm) if i[0] == "x"]
    # each all-reduce right before the gather it scales for
    assert (
        fwd
        == [
            ("all_reduce", "tp amax all-reduce"),
            ("all_gather", "tp all-gather"),
            ("reduce_scatter", "tp reduce-scatter"),
        ]
        * 2
    )
    assert (
        bwd
        == [
            ("all_reduce", "tp grad amax all-reduce"),
            ("all_gather", "tp reduce-scatter"),  # the row-parallel exit's backward: gathers dY
            ("reduce_scatter", "tp all-gather"),
        ]
        * 2
    )
    # no amax all-reduce without a sequence-parallel gather
    assert _comms(te_fp8_layer(layer_ops(GPT, B, T, False, E), recipe), amax=True) == []


def test_without_sequence_parallelism_the_all_reduces_stay_bf16():
    fp8 = _comms(te_fp8_layer(layer_ops(GPT, B, T, False, E), "current"))
    assert all(op.fwd_nbytes is None and op.bwd_nbytes is None for op in fp8)


def test_the_passes_carry_the_quantized_bytes_in_the_same_collectives():
    cm = CostModel.for_gpu(H100)
    bf16, fp8 = layer_ops(GPT, B, T, True, E), te_fp8_layer(layer_ops(GPT, B, T, True, E), "delayed")
    for items in (forward_items, backward_items):
        a = [i for i in items(bf16, cm) if i[0] == "x"]
        q = [i for i in items(fp8, cm) if i[0] == "x"]
        # the layer's two all-gathers and two reduce-scatters, none added (issue 38: no
        # events multiplied)
        assert len(a) == len(q) == 4
        assert [x[1] for x in a] == [x[1] for x in q]
        assert all(qx[2] * 2 == ax[2] for ax, qx in zip(a, q) if ax[1] == "all_gather")


def _quick(**over):
    return cs.load_scenario("scenarios/quickstart.yaml").with_overrides(
        {"cluster.preset": "dgx_h100", "simulation.network": "analytical", **over}
    )


def test_weights_are_quantized_once_per_step_with_the_optimizer():
    """gpt-1.3b (h 2048), TP 2, 6 layers a stage, delayed scaling on H100: each of a layer's
    four weights (3h²/2, h²/2, 2h², 2h² elements) read in BF16 and written as FP8 data +
    FP8 transpose (4 bytes an element, one cast_transpose kernel), once per step — the
    steady micro-batches' forwards cast only X."""
    bf16, fp8 = chunk_costs(_quick(), 4), chunk_costs(_quick(**{"training.precision": "fp8"}), 4)
    h, layers = 2048, 6
    eff, curve, hbm = calibration(H100).fp8, memory_curves_for(H100).of("tuned"), get_gpu(H100).hbm_bandwidth
    weights = [3 * h * h / 2, h * h / 2, 2 * h * h, 2 * h * h]
    per_layer = sum(eff.launch_s + (w * 4 + curve.bytes_half) / (hbm * curve.frac_max) for w in weights)
    for a, b in zip(bf16, fp8, strict=True):
        assert b.optimizer - a.optimizer == pytest.approx(layers * per_layer, rel=1e-9)
    layer = te_fp8_layer(layer_ops(TRANSFORMER_PRESETS["gpt-1.3b"][0], 1, 2, False, 2), "delayed")
    assert weight_cast_seconds(layer, H100, "delayed") == pytest.approx(per_layer, rel=1e-12)


def test_a_steady_forward_casts_only_its_input():
    # the micro-batch forward's casts: X alone (W is the cached copy of the step's first
    # cast), by a quantize kernel or, after a norm, by TE's norm kernel
    for op in te_fp8_layer(layer_ops(GPT, B, T, False, E), "current"):
        if isinstance(op, LayerOp) and op.fwd.fp8_casts is not None:
            m, n, k = op.fwd.gemm
            assert op.fwd.fp8_casts + op.fwd.fp8_norm_casts == (float(m * k),)
