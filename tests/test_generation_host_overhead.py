"""vLLM's CPU time per step (``generation.host_overhead``, docs/generation.md): Vidur's
A100 profile, interpolated in the batch size, added to every step."""

from __future__ import annotations

import csv

import pytest

from clustersim import simulate
from clustersim.errors import ScenarioError
from clustersim.generation.host_overhead import HOST_OVERHEAD_CSV, PARTS, host_overhead_s
from clustersim.generation.runner import StepPricer
from clustersim.generation.step_cost import StepSeq
from clustersim.resolve import resolve
from clustersim.scenario import load_scenario
from clustersim.simulate import build_engine

ROWS = list(csv.DictReader(HOST_OVERHEAD_CSV.open()))


def scenario(gen: dict, tp: int = 1, gpu: str = "A100-SXM4-80GB") -> dict:
    return {
        "name": "host",
        "cluster": {"nodes": 1, "gpus_per_node": tp, "gpu": gpu},
        "model": {"preset": "llama2-7b"},
        "training": {"global_batch": 1, "mode": "inference", "cuda_graphs": True},
        "parallel": {"tp": tp},
        "generation": gen,
    }


def row_s(row) -> float:
    return sum(float(row[p]) for p in PARTS) * 1e-3


def test_the_profile_is_vidurs_rows_interpolated_in_the_batch_size():
    assert len(ROWS) == 8 and all("microsoft/vidur" in r["source"] for r in ROWS)
    by_b = sorted((int(r["batch_size"]), row_s(r)) for r in ROWS)
    for b, t in by_b:
        assert host_overhead_s(b) == pytest.approx(t, rel=1e-12)
    (b0, t0), (b1, t1) = by_b[0], by_b[1]
    assert host_overhead_s(1) == pytest.approx(t0 - (t1 - t0) * (b0 - 1) / (b1 - b0), rel=1e-12)
    assert host_overhead_s(12) == pytest.approx((t0 + t1) / 2, rel=1e-12)
    (b0, t0), (b1, t1) = by_b[-2], by_b[-1]
    assert host_overhead_s(256) == pytest.approx(t1 + (t1 - t0) * (256 - b1) / (b1 - b0), rel=1e-12)
    # the CPU grows with the batch: 3 ms at 8 sequences, 13 ms at 64 (vLLM of early 2024)
    assert 3e-3 < host_overhead_s(8) < host_overhead_s(32) < host_overhead_s(64) < 14e-3


def test_each_step_pays_its_cpu_time():
    """One request: its first token after its prefill's GPU time plus one step's CPU time,
    each later token one decode plus one step's CPU time."""
    gen = {"prompt_len": 300, "output_len": 4}
    sc = load_scenario(scenario(gen))
    gpu = StepPricer(sc, resolve(sc), build_engine)
    req = simulate(scenario({**gen, "host_overhead": True})).requests.iloc[0]
    host = host_overhead_s(1)
    assert req.ttft_s == pytest.approx(gpu((StepSeq(300, 0),), 1) + host, rel=1e-12)
    decodes = sum(gpu((StepSeq(1, 300 + k),), 1) + host for k in range(3))
    assert req.end_s == pytest.approx(req.ttft_s + decodes, rel=1e-12)


def test_a_batch_step_lasts_its_gpu_time_plus_its_batchs_cpu_time():
    gen = {"requests": 12, "prompt_len": {"dist": "uniform", "low": 20, "high": 90}, "output_len": 5}
    off, on = simulate(scenario(gen)), simulate(scenario({**gen, "host_overhead": True}))
    assert on.steps.seqs.tolist() == off.steps.seqs.tolist()  # all at once: the same batches
    extra = (on.steps.end_s - on.steps.start_s) - (off.steps.end_s - off.steps.start_s)
    assert extra.tolist() == pytest.approx([host_overhead_s(b) for b in on.steps.seqs], rel=1e-9)
    assert on.summary["tpot_p50_s"] > off.summary["tpot_p50_s"]


@pytest.mark.parametrize("tp, gpu", [(2, "A100-SXM4-80GB"), (1, "H100-SXM5-80GB")])
def test_outside_its_profile_it_is_refused(tp, gpu):
    with pytest.raises(ScenarioError) as err:
        simulate(scenario({"prompt_len": 10, "output_len": 2, "host_overhead": True}, tp=tp, gpu=gpu))
    assert err.value.field == "generation.host_overhead" and "accepted there: false" in str(err.value)
