"""PyTorch profiler (Kineto) traces in: kernel times by op and shape, the cost model's
predictions beside them, and the ``model.profile`` table they become (clustersim.interop).

tests/data/kineto_sample.json is written by tests/data/make_kineto_sample.py, whose
docstring lists the kernel times it holds; the expected numbers below are those.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import clustersim as cs
from clustersim.cli import main
from clustersim.interop.calibrate import compare, gemm_work, gpu_of, scenario_profile
from clustersim.interop.kineto import read_kineto
from clustersim.workload.cost_model import CostModel, ProfileTable
from clustersim.workload.ops import Work

DATA = Path(__file__).resolve().parent / "data"
SAMPLE = DATA / "kineto_sample.json"
A100 = "A100-SXM4-80GB"
SCENARIO = {
    "name": "kineto-layer",
    "cluster": {"nodes": 1, "gpus_per_node": 1, "gpu": A100},
    "model": {"kind": "transformer", "layers": 2, "hidden": 256, "heads": 4, "vocab": 1000, "seq_len": 128},
    "training": {"global_batch": 2, "micro_batch": 2},
}


def test_the_sample_is_what_its_generator_writes():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_kineto_sample", DATA / "make_kineto_sample.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert json.loads(SAMPLE.read_text()) == gen.build()


def test_kernels_are_charged_to_the_op_that_launched_them():
    trace = read_kineto(SAMPLE)
    assert trace.device == "NVIDIA A100-SXM4-80GB" and trace.unattributed == 1  # the orphan kernel
    got = {(m.op, m.gemm, m.batch): (m.calls, m.time_s) for m in trace.ops}
    assert got == {
        ("aten::addmm", (256, 768, 256), 1): (
            2,
            pytest.approx(10e-6, rel=1e-12),
        ),  # (9 + 11) / 2, not aten::linear
        ("aten::bmm", (128, 128, 64), 8): (1, pytest.approx(4e-6, rel=1e-12)),
        ("aten::_softmax", None, 1): (1, pytest.approx(3e-6, rel=1e-12)),
        ("aten::addmm", (256, 256, 256), 1): (1, pytest.approx(5e-6, rel=1e-12)),
        ("aten::addmm", (256, 1024, 256), 1): (1, pytest.approx(12e-6, rel=1e-12)),  # two kernels summed
        ("aten::mm", (256, 1024, 256), 1): (1, pytest.approx(11e-6, rel=1e-12)),  # launch held by its span
    }
    assert all(m.element_bytes == 2 for m in trace.ops)


def test_compare_prices_each_gemm_at_its_shape():
    rows = {r["op"]: r for r in compare(read_kineto(SAMPLE), A100)}
    cm = CostModel.for_gpu(A100)
    m, n, k = 256, 768, 256
    want = cm.time(Work(2.0 * m * n * k, 2.0 * (m * k + k * n + m * n), (m, n, k)))
    qkv = rows["aten::addmm [256×768×256]"]
    assert qkv["predicted_us"] == pytest.approx(want * 1e6, rel=1e-12)
    assert qkv["ratio"] == pytest.approx(10e-6 / want, rel=1e-12)
    bmm = rows["aten::bmm [8× 128×128×64]"]
    assert bmm["predicted_us"] == pytest.approx(cm.time(gemm_work((128, 128, 64), 8, 2)) * 1e6, rel=1e-12)
    soft = rows["aten::_softmax [[2, 4, 128, 128],[],[]]"]
    assert (
        soft["predicted_us"] is None and soft["ratio"] is None and soft["measured_us"] == pytest.approx(3.0)
    )


def test_profile_rows_map_shapes_onto_the_layer_ops_and_the_cost_model_reads_them(tmp_path):
    sc = cs.load_scenario(SCENARIO)
    profile, rows = scenario_profile(read_kineto(SAMPLE), sc)
    got = {(r["op"], r["phase"], (r["m"], r["n"], r["k"])): r["time_us"] for r in profile}
    pooled = (12.0 + 11.0) / 2  # addmm and mm of one shape: one GEMM to the cost model
    assert got == pytest.approx(
        {
            ("qkv", "F", (256, 768, 256)): 10.0,
            ("qkv", "W", (256, 768, 256)): 10.0,
            ("attn_scores", "F", (128, 128, 64)): 4.0,
            ("attn_out", "F", (256, 256, 256)): 5.0,
            ("attn_out", "B", (256, 256, 256)): 5.0,
            ("attn_out", "W", (256, 256, 256)): 5.0,
            ("mlp_up", "F", (256, 1024, 256)): pooled,
            ("mlp_up", "W", (256, 1024, 256)): pooled,
            ("mlp_down", "B", (256, 1024, 256)): pooled,
        },
        rel=1e-12,
    )
    assert len(rows) == len(profile)
    out = tmp_path / "ops.csv"
    assert (
        main(["calibrate", str(SAMPLE), "--scenario", _yaml(tmp_path, SCENARIO), "--profile", str(out)]) == 0
    )
    table = ProfileTable.read(out)
    cm = CostModel.for_gpu(A100, table)
    qkv = Work(2.0 * 256 * 768 * 256, 0.0, (256, 768, 256))
    assert cm.time(qkv, "qkv", "F") == pytest.approx(10e-6, rel=1e-12)
    assert cm.time(qkv, "proj", "F") != pytest.approx(
        10e-6
    )  # an op the trace did not measure keeps the model
    # this tiny model's kernels (4–10 µs measured) hide behind the eager host's dispatch, so
    # the step is priced with a host that never holds the GPU back (tests/test_host.py)
    gpu_paced = {**SCENARIO, "training": {**SCENARIO["training"], "fixed_costs": {"host_dispatch": 0}}}
    with_profile = cs.simulate(
        {**gpu_paced, "model": {**SCENARIO["model"], "profile": str(out)}}, progress=False
    )
    without = cs.simulate(gpu_paced, progress=False)
    assert (
        with_profile.summary["iteration_time_s"] > without.summary["iteration_time_s"]
    )  # measured ≈ 2× slower


def _yaml(folder: Path, raw: dict) -> str:
    path = folder / "sc.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_calibrate_command_prints_measured_predicted_ratio(capsys):
    assert main(["calibrate", str(SAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "predictions for A100-SXM4-80GB" in out and "1 kernels not charged" in out
    ratio = next(
        r["ratio"] for r in compare(read_kineto(SAMPLE), A100) if r["op"] == "aten::addmm [256×768×256]"
    )
    line = next(x for x in out.splitlines() if x.startswith("aten::addmm [256×768×256]"))
    assert line.split()[-1] == f"{ratio:.3f}" and " 10.00 " in line


def test_device_names_and_bad_traces(tmp_path):
    assert gpu_of("NVIDIA A100-SXM4-80GB") == A100
    assert gpu_of("NVIDIA H100 80GB HBM3") == "H100-SXM5-80GB"
    assert gpu_of("Some Accelerator") is None
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"events": []}))
    with pytest.raises(cs.ScenarioError, match="traceEvents"):
        read_kineto(bad)
    ev = json.loads(SAMPLE.read_text())
    next(e for e in ev["traceEvents"] if e.get("cat") == "kernel")["dur"] = "fast"
    bad.write_text(json.dumps(ev))
    with pytest.raises(cs.ScenarioError, match="dur = 'fast' is invalid; accepted: a time ≥ 0 in µs"):
        read_kineto(bad)
