"""Result tables, saved bundle and CLI on a synthetic pipeline (trace format: test_chrome_trace.py)."""

import json
import subprocess
import sys

import pandas as pd
import pytest

import clustersim as cs
from tests.conftest import synthetic


@pytest.fixture(scope="module")
def result():
    return cs.simulate(
        synthetic(4, 8, 1e-3, 2e-3, latency=1e-4, activation=2**20, params=2**20, optimizer=5e-4)
    )


def test_devices_table(result):
    dev = result.devices
    assert list(dev["device"]) == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert list(dev["stage"]) == [0, 1, 2, 3]
    assert ((dev["busy_fraction"] > 0) & (dev["busy_fraction"] <= 1)).all()
    assert not dev["oom"].any()


def test_utilization_matches_span_sums(result):
    util = result.utilization().set_index(["device", "lane"])
    spans = result.spans
    makespan = spans["end_s"].max()
    comp0 = spans[(spans["device"] == "gpu0") & (spans["lane"] == "compute")]
    assert util.loc[("gpu0", "compute"), "busy_fraction"] == pytest.approx(
        (comp0["end_s"] - comp0["start_s"]).sum() / makespan, rel=1e-12
    )


def test_oom_is_reported_not_raised():
    res = cs.simulate(synthetic(2, 4, params="70 GiB", activation="8 GiB"))  # > 80 GiB
    assert res.summary["oom"] is True
    assert res.devices.loc[0, "oom"]
    assert res.devices.loc[0, "peak_memory_bytes"] > res.devices.loc[0, "memory_capacity_bytes"]


def test_save_bundle(result, tmp_path):
    out = result.save(tmp_path / "out")
    ext = "parquet" if (out / "spans.parquet").exists() else "csv"
    for name in (
        "summary.json",
        f"spans.{ext}",
        "devices.csv",
        f"memory.{ext}",
        "gantt.png",
        "utilization.png",
        "memory.png",
        "trace.json",
        "scenario.resolved.yaml",
    ):
        assert (out / name).stat().st_size > 0, name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["iteration_time_s"] == result.summary["iteration_time_s"]
    spans = pd.read_parquet(out / "spans.parquet") if ext == "parquet" else pd.read_csv(out / "spans.csv")
    assert len(spans) == len(result.spans)
    resolved = cs.load_scenario(str(out / "scenario.resolved.yaml"))
    assert cs.simulate(resolved).summary["iteration_time_s"] == result.summary["iteration_time_s"]


def test_overrides_make_a_new_scenario():
    sc = cs.load_scenario("scenarios/synthetic-4stage-1f1b.yaml")
    sc2 = sc.with_overrides({"parallel.schedule": "gpipe", "training.global_batch": 16})
    assert sc.parallel.schedule == "1f1b" and sc2.parallel.schedule == "gpipe"
    assert sc2.num_microbatches == 16
    assert sc2.resolved()["parallel"]["dp"] == 1
    assert sc2.resolved()["model"]["forward"] == pytest.approx(1e-3)


def test_cli_run_draws_pictures_with_plots_and_only_into_out(tmp_path):
    out = tmp_path / "out"
    cli = [sys.executable, "-m", "clustersim.cli", "run", "scenarios/synthetic-4stage-1f1b.yaml", "--quiet"]
    proc = subprocess.run([*cli, "--out", str(out), "--plots"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in out.glob("*.png")} == {
        "gantt.png",
        "utilization.png",
        "memory.png",
        "breakdown.png",
    }
    proc = subprocess.run([*cli, "--plots"], capture_output=True, text=True)
    assert (
        proc.returncode == 2
        and proc.stderr == "error: --plots: the pictures are drawn into the --out folder; add --out DIR\n"
    )


def test_cli_run_and_list(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "clustersim.cli",
            "run",
            "scenarios/synthetic-4stage-1f1b.yaml",
            "--out",
            str(out),
            "--set",
            "parallel.schedule=gpipe",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "iteration_time_s" in proc.stdout and "gpipe" in proc.stdout
    # pictures only when asked (--plots): the data and the trace always
    assert {"summary.json", "spans.csv", "trace.json"} <= {p.name for p in out.iterdir()}
    assert not list(out.glob("*.png")) and f"clustersim plot {out}" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "clustersim.cli", "list"], capture_output=True, text=True)
    assert proc.returncode == 0
    for word in ("schedules:", "1f1b", "gpipe", "GPUs:", "A100-SXM4-80GB", "network models:"):
        assert word in proc.stdout
