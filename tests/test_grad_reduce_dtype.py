"""Each framework profile reduces data-parallel gradients in the dtype its stack runs by
default (sources: clustersim/scenario/grad_reduce.py): a step's gradient collectives move
the model's parameters × that dtype's bytes, counted from the architecture in closed form."""

import pytest

import clustersim as cs

L, H, V, S, N = 4, 1024, 51200, 512, 4
MODEL = {
    "layers": L,
    "hidden": H,
    "heads": 16,
    "ffn_hidden": 4 * H,
    "vocab": V,
    "seq_len": S,
    "max_position": S,
    "tied_embeddings": True,
    "bias": True,
    "norm": "layernorm",
    "position": "learned",
}
#: GPT parameters: per layer QKV + projection + MLP weights 12h², their biases and two
#: LayerNorms 13h; the tied embedding Vh, learned positions Sh, the final LayerNorm 2h
PARAMS = 12 * L * H * H + 13 * L * H + V * H + S * H + 2 * H
#: the wire bytes per GPU of a ring collective of S bytes over n: factor · (n − 1)/n · S
FACTOR = {"all-reduce": 2, "reduce-scatter": 1}


def _step(framework, precision="bf16", **parallel):
    raw = {
        "name": "grad dtype",
        "cluster": {"nodes": 1, "gpus_per_node": N, "gpu": "H100-SXM5-80GB"},
        "model": MODEL,
        "training": {"global_batch": N, "micro_batch": 1, "framework": framework, "precision": precision},
        "parallel": {"dp": N, **parallel},
        "simulation": {"fidelity": "fast"},
    }
    res = cs.simulate(raw, progress=False)
    sp = res.spans
    ops = sp[(sp["kind"] == "collective") & (sp["device"] == sp["device"].iloc[0])]
    words = ops["name"].str.split()  # "dp reduce-scatter s0 c0 b0", "fsdp2 reduce-scatter B0 l0"
    kinds = words.str[1]
    # the data-parallel traffic (not the grad-norm or found-inf scalars); gathers carry parameters
    grads = ops[words.str[0].isin(("dp", "fsdp2")) & kinds.isin(FACTOR)]
    return grads, set(kinds[grads.index])


@pytest.mark.parametrize(
    "framework,precision,parallel,kind,nbytes",
    [
        # Megatron-Bridge's performance recipes: grad_reduce_in_fp32 False, the distributed optimizer
        ("megatron_core", "bf16", {}, "reduce-scatter", 2),
        ("megatron_core", "fp8", {}, "reduce-scatter", 2),
        ("megatron_core", "fp32", {}, "reduce-scatter", 4),
        # DeepSpeed: communication_data_type unset → the model dtype
        ("deepspeed", "bf16", {"zero": 2}, "reduce-scatter", 2),
        ("deepspeed", "fp16", {"zero": 1}, "reduce-scatter", 2),
        ("deepspeed", "fp32", {"zero": 2}, "reduce-scatter", 4),
        # torchtitan: mixed_precision_reduce float32 (FSDP2); fp32 parameters under autocast (DDP)
        ("fsdp2", "bf16", {}, "reduce-scatter", 4),
        ("fsdp2", "bf16", {"zero": 0}, "all-reduce", 4),
    ],
)
def test_a_steps_gradient_bytes_are_params_times_the_profiles_dtype(
    framework, precision, parallel, kind, nbytes
):
    grads, kinds = _step(framework, precision, **parallel)
    assert kinds == {kind}
    total = float(grads["bytes"].sum())
    assert total == PARAMS * nbytes  # exact: no tensor of this model needs FSDP2's padding at n = 4
    wire = FACTOR[kind] * (N - 1) / N * total
    assert wire == pytest.approx(FACTOR[kind] * (N - 1) / N * PARAMS * nbytes, rel=1e-15)


def test_a_stated_dtype_wins_over_the_profile():
    grads, _ = _step("megatron_core", data_parallel={"grad_reduce_dtype": "fp32"})
    assert float(grads["bytes"].sum()) == PARAMS * 4
    grads, _ = _step("fsdp2", data_parallel={"grad_reduce_dtype": "bf16"})
    assert float(grads["bytes"].sum()) == PARAMS * 2
