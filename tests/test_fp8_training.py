"""``training.precision: fp8``: Transformer-Engine FP8 linears priced by workload/fp8.py,
FP8 saved inputs and the cached FP8 weights in closed form; refused without FP8 GPUs."""

from __future__ import annotations

import pytest

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.workload.cost_model import CostModel
from clustersim.workload.fp8 import NORM_LINEARS, TE_LINEARS, fp8_gemm_time, te_fp8_layer
from clustersim.workload.model_presets import TRANSFORMER_PRESETS
from clustersim.workload.stage_cost import chunk_costs
from clustersim.workload.transformer_ops import layer_ops

H100 = "H100-SXM5-80GB"
GPT = TRANSFORMER_PRESETS["gpt3-175b"][0]


def _by_name(ops):
    return {op.name: op for op in ops if hasattr(op, "fwd")}


@pytest.mark.parametrize("sp", [False, True])
def test_fp8_linears_are_te_gemms_with_their_casts(sp):
    b, t = 1, 8
    bf16, fp8 = _by_name(layer_ops(GPT, b, t, sp, 2)), _by_name(te_fp8_layer(layer_ops(GPT, b, t, sp, 2)))
    cm = CostModel.for_gpu(H100)
    for name in TE_LINEARS:
        m, n, k = bf16[name].fwd.gemm
        op = fp8[name]
        if name in NORM_LINEARS:  # X from TE's norm, which writes it in FP8 (delayed)
            assert cm.time(op.fwd) == fp8_gemm_time(H100, m, n, k, [], norm_casts=[m * k]).total_s
        else:
            assert cm.time(op.fwd) == fp8_gemm_time(H100, m, n, k, [m * k]).total_s  # casts X
        assert cm.time(op.bwd_input) == fp8_gemm_time(H100, m, k, n, [m * n]).total_s  # dX = dY·Wᵀ, casts dY
        assert cm.time(op.bwd_weight) == fp8_gemm_time(H100, k, n, m, []).total_s  # dW = Xᵀ·dY, cached copies
        assert op.fwd.flops == bf16[name].fwd.flops and op.params == bf16[name].params
    for name in set(bf16) - set(TE_LINEARS):  # attention core, norms, activations stay BF16
        # (SP's all-gathers move the quantized tensors: tests/test_fp8_te_semantics.py)
        assert fp8[name] == bf16[name] or (sp and fp8[name].name.startswith("tp "))


@pytest.mark.parametrize("t,sp", [(1, False), (8, False), (8, True)])
def test_fp8_saves_the_linear_inputs_in_one_byte(t, sp):
    """The four linears' inputs (LN output 2sbh, attention context 2sbh/t, LN output 2sbh,
    GeLU output 8sbh/t; the LN outputs /t with SP) are kept in FP8: half of those bytes."""
    s, b, h = GPT.seq_len, 1, GPT.hidden
    bf16 = sum(op.activation for op in layer_ops(GPT, b, t, sp, 2) if hasattr(op, "activation"))
    fp8 = sum(op.activation for op in te_fp8_layer(layer_ops(GPT, b, t, sp, 2)) if hasattr(op, "activation"))
    ln = s * b * h // t if sp else s * b * h
    assert bf16 - fp8 == 2 * ln + s * b * h // t + 4 * s * b * h // t


def _quick(**over):
    return cs.load_scenario("scenarios/quickstart.yaml").with_overrides(
        {"cluster.preset": "dgx_h100", "simulation.network": "analytical", **over}
    )


def test_fp8_keeps_bf16_weights_and_fp32_states_plus_the_fp8_weight_cache():
    bf16, fp8 = chunk_costs(_quick(), 4), chunk_costs(_quick(**{"training.precision": "fp8"}), 4)
    h, t, layers = 2048, 2, 24 // 4  # gpt-1.3b, TP 2, 6 layers per stage
    for a, b in zip(bf16, fp8):
        assert (a.static.weights, a.static.grads, a.static.optimizer) == (
            b.static.weights,
            b.static.grads,
            b.static.optimizer,
        )
        assert a.grad_bytes == b.grad_bytes  # fp32 main_grad on the wire either way
        # FP8 copy + FP8 transpose of the 12h²/t linear weights of each layer
        assert b.static.buffers - a.static.buffers == 2 * layers * 12 * h * h // t


def test_fp8_speeds_up_the_linears_on_h100():
    bf16, fp8 = chunk_costs(_quick(), 4), chunk_costs(_quick(**{"training.precision": "fp8"}), 4)
    assert all(b.forward < a.forward and b.backward < a.backward for a, b in zip(bf16, fp8))


@pytest.mark.parametrize(
    "preset,gpu", [("dgx_a100", "A100-SXM4-80GB"), (None, "V100-SXM2-32GB"), (None, "T4-16GB")]
)
def test_fp8_is_refused_without_fp8_tensor_cores(preset, gpu):
    over = {"training.precision": "fp8"}
    over.update({"cluster.preset": preset} if preset else {"cluster.gpu": gpu})
    sc = cs.load_scenario("scenarios/quickstart.yaml").with_overrides(over)
    with pytest.raises(ScenarioError, match=f"training.precision: 'fp8' is invalid; {gpu} has no FP8"):
        chunk_costs(sc, 4)


def test_fp8_is_refused_for_cnns():
    sc = cs.load_scenario("scenarios/pipedream-vgg16-16xV100-10GbE.yaml").with_overrides(
        {"training.precision": "fp8"}
    )
    with pytest.raises(ScenarioError, match="training.precision: 'fp8' is invalid; FP8 .* transformer"):
        chunk_costs(sc, sc.parallel.pp)
