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
