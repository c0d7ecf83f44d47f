"""Summary throughput metrics follow their definitions (docs/metrics.md)."""

import pytest

import clustersim as cs
from clustersim.workload.transformer import megatron_flops


@pytest.fixture(scope="module")
def run():
    sc = cs.load_scenario("scenarios/quickstart.yaml").with_overrides({"training.recompute": "full"})
    return sc, cs.simulate(sc, progress=False).summary


def test_tflops_per_gpu_is_megatrons_convention(run):
    sc, s = run
    m = sc.model
    from clustersim.workload.resolve import resolve_transformer

    cfg = resolve_transformer(m)
    f = megatron_flops(sc.training.global_batch, cfg.seq_len, cfg.layers, cfg.hidden, cfg.vocab)
    assert s["tflops_per_gpu"] == pytest.approx(f / s["iteration_time_s"] / sc.num_gpus / 1e12, rel=0.01)
    assert s["tokens_per_s"] == pytest.approx(sc.training.global_batch * cfg.seq_len / s["iteration_time_s"])


def test_mfu_excludes_recompute_and_hfu_includes_it(run):
    sc, s = run
    assert 0 < s["mfu"] < s["hfu"] < 1
    assert s["hfu"] == pytest.approx(s["tflops_per_gpu"] * 1e12 / 312e12, rel=1e-9)
    assert s["mfu"] / s["hfu"] == pytest.approx(0.75, abs=0.02)  # 3 passes of 4 without the recompute


def test_synthetic_models_report_none():
    s = cs.simulate("scenarios/synthetic-4stage-1f1b.yaml", progress=False).summary
    assert s["mfu"] is None and s["tflops_per_gpu"] is None


def _closed_form_flops(sc, recompute: bool) -> float:
    """The transformer closed form with the vocabulary the TP-sharded logits GEMM computes
    (⌊V/tp⌋ columns per rank, so ⌊V/tp⌋·tp in all)."""
    from dataclasses import replace

    from clustersim.workload.resolve import resolve_transformer

    cfg = resolve_transformer(sc.model)
    tp = sc.parallel.tp
    return replace(cfg, vocab=cfg.vocab // tp * tp).iteration_flops(sc.training.global_batch, recompute)


@pytest.mark.parametrize("recompute", ["none", "full"])
@pytest.mark.parametrize("fold", [False, True])
def test_transformer_span_flops_are_the_closed_form(recompute, fold):
    # the ops carry matmul FLOPs only, so what the GPUs execute is the closed form — with the
    # vocabulary rounded down to a multiple of tp, as each rank's logits GEMM has V // tp
    # columns (GPT-1.3B: 50,257 → 50,256 at tp 2); full recompute adds one forward of every
    # layer, the closed form's recompute term
    from clustersim.trace.throughput import span_flops

    sc = cs.load_scenario("scenarios/quickstart.yaml").with_overrides(
        {"training.recompute": recompute, "simulation.network": "analytical", "simulation.fold": fold}
    )
    res = cs.simulate(sc, progress=False)
    twins = sc.parallel.tp * sc.dp if fold else 1
    hw, _ = span_flops(res.spans, twins)
    assert hw == pytest.approx(_closed_form_flops(sc, recompute == "full"), rel=1e-12)


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_cnn_mfu_comes_from_its_ops_flops(recompute):
    # VGG-16 on 2 data-parallel V100s: one iteration is global_batch / micro_batch micro-batches
    # of every layer op's forward + input-gradient + weight-gradient FLOPs; full recompute runs
    # each forward once more (hardware FLOPs), which model FLOPs leave out
    from clustersim.workload.cnn import cnn_layers

    sc = cs.load_scenario("scenarios/pipedream-vgg16-16xV100-10GbE.yaml").with_overrides(
        {
            "cluster.nodes": 1,
            "cluster.gpus_per_node": 2,
            "parallel.dp": 2,
            "training.global_batch": 128,
            "training.recompute": recompute,
            "simulation.network": "analytical",
        }
    )
    s = cs.simulate(sc, progress=False).summary
    ops = [op for layer in cnn_layers("vgg16", 64, 4) for op in layer.ops]
    forward = 2 * sum(op.fwd.flops for op in ops)  # 2 micro-batches of 64 images
    model = forward + 2 * sum(op.bwd_input.flops + op.bwd_weight.flops for op in ops)
    hw = model + (forward if recompute == "full" else 0.0)
    peak = 2 * 125e12  # two V100s' dense fp16 peak
    t = s["iteration_time_s"]
    assert s["mfu"] == pytest.approx(model / t / peak, rel=1e-12)
    assert s["hfu"] == pytest.approx(hw / t / peak, rel=1e-12)
    assert s["tflops_per_gpu"] == pytest.approx(hw / t / 2 / 1e12, rel=1e-12)
    assert s["tokens_per_s"] is None
