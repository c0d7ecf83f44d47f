"""Result bundle: save → load gives the same tables and the same pictures; CLI plot; progress."""

import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import clustersim as cs  # noqa: E402
from clustersim import progress  # noqa: E402
from clustersim.trace import bundle  # noqa: E402
from tests.conftest import synthetic  # noqa: E402


@pytest.fixture(scope="module")
def result():
    return cs.simulate(
        synthetic(
            3,
            5,
            1e-3,
            2e-3,
            latency=1e-5,
            activation=2**22,
            params=2**22,
            optimizer=1e-4,
            dp=2,
            network="packet",
        ),
        progress=False,
    )


def _pixels(fig) -> np.ndarray:
    fig.canvas.draw()
    out = np.asarray(fig.canvas.buffer_rgba()).copy()
    plt.close(fig)
    return out


@pytest.mark.parametrize("parquet", [True, False])
def test_roundtrip_same_tables_and_pictures(result, tmp_path, monkeypatch, parquet):
    if parquet:
        pytest.importorskip("pyarrow")
    else:
        monkeypatch.setattr(bundle, "_has_pyarrow", lambda: False)
    out = result.save(tmp_path / "b", plots=False)
    assert (out / ("spans.parquet" if parquet else "spans.csv")).exists()
    back = cs.load_result(out)
    pd.testing.assert_frame_equal(back.spans, result.spans, check_dtype=False)
    pd.testing.assert_frame_equal(back.devices, result.devices, check_dtype=False)
    pd.testing.assert_frame_equal(back.memory, result.memory, check_dtype=False)
    assert back.summary == json.loads(json.dumps(result.summary))
    assert back.scenario["parallel"] == result.scenario["parallel"]
    pictures = (
        ("plot_gantt", "plot_utilization", "plot_memory", "plot_breakdown") if parquet else ("plot_gantt",)
    )
    for draw in pictures:
        np.testing.assert_array_equal(_pixels(getattr(back, draw)()), _pixels(getattr(result, draw)()), draw)
    assert back.breakdown().equals(result.breakdown())


def test_load_rejects_a_non_bundle(tmp_path):
    with pytest.raises(cs.OutputError, match="not a clustersim result bundle"):
        cs.load_result(tmp_path)


def test_cli_plot_redraws_a_bundle(result, tmp_path):
    out = result.save(tmp_path / "b", plots=False)
    proc = subprocess.run(
        [sys.executable, "-m", "clustersim.cli", "plot", str(out), "--out", str(tmp_path / "p")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    for name in ("gantt.png", "utilization.png", "memory.png", "breakdown.png"):
        assert (tmp_path / "p" / name).stat().st_size > 1000, name
    proc = subprocess.run(
        [sys.executable, "-m", "clustersim.cli", "plot", str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "not a clustersim result bundle" in proc.stderr


def test_progress_changes_nothing_but_the_screen(result, capsys):
    sc = synthetic(
        3, 5, 1e-3, 2e-3, latency=1e-5, activation=2**22, params=2**22, optimizer=1e-4, dp=2, network="packet"
    )
    shown = cs.simulate(sc, progress=True)
    pd.testing.assert_frame_equal(shown.spans, result.spans)
    assert shown.summary["sim_events"] == result.summary["sim_events"]
    capsys.readouterr()
    cs.simulate(sc, progress="auto")  # pytest's stderr is not a terminal: silent
    assert capsys.readouterr().err == ""


def test_progress_iterate_is_transparent():
    assert list(progress.iterate(range(5), progress=False)) == list(range(5))
    assert list(progress.iterate(range(5), progress=True)) == list(range(5))
    assert progress.wanted(False) is False and progress.wanted(True) is True


@pytest.fixture(scope="module")
def fault_run():
    # 32 A100s, a GPU fails in iteration 5, checkpoint/restart: the job has a timeline
    return cs.simulate(cs.load_scenario("scenarios/gpt-7.5b-32gpu-gpu-fail.yaml"), progress=False)


def test_fault_bundle_holds_the_job_picture(fault_run, tmp_path):
    assert fault_run.job is not None and fault_run.job["kind"].eq("failure").sum() == 1
    out = fault_run.save(tmp_path / "b")
    assert (out / "job.csv").exists() and (out / "job.png").stat().st_size > 5000
    # 32 GPUs × 5 lanes do not fit one row each: the Gantt is per stage and the heatmap comes along
    assert (out / "heatmap.png").exists()
    ax = fault_run.plot_job().axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["gpt-7.5b-32gpu-gpu-fail"]
    legend = {t.get_text() for t in ax.get_legend().get_texts()}
    assert {"useful iteration", "lost work", "restart + checkpoint read"} <= legend
    # a reloaded bundle draws it again (clustersim plot)
    back = cs.load_result(out)
    assert bundle.redraw(back, tmp_path / "p")[-1].name == "job.png"


def test_a_reused_out_keeps_no_stale_file(fault_run, tmp_path):
    out = fault_run.save(tmp_path / "b")
    (out / "notes.txt").write_text("mine\n")  # a user's files: clustersim never names them
    (out / "gantt-annotated.png").write_bytes(b"mine")
    before = {p.name for p in out.iterdir()}
    assert {"heatmap.png", "job.png", "job.csv"} <= before
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "clustersim.cli",
            "run",
            "scenarios/synthetic-4stage-1f1b.yaml",
            "--out",
            str(out),
            "--plots",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    after = {p.name for p in out.iterdir()}
    assert not {"heatmap.png", "job.png", "job.csv"} & after  # the fault run's, not this run's
    assert (out / "notes.txt").read_text() == "mine\n" and (
        out / "gantt-annotated.png"
    ).read_bytes() == b"mine"
    written = {"gantt.png", "utilization.png", "memory.png", "breakdown.png", "trace.json", "summary.json"}
    assert written <= after and after <= set(bundle.BUNDLE_FILES) | {"notes.txt", "gantt-annotated.png"}
    assert cs.load_result(out).summary["num_gpus"] == 4
    # a save without pictures leaves none of the earlier ones
    result_no_plots = cs.load_result(out)
    result_no_plots.save(out, plots=False)
    assert not any(p.suffix == ".png" and p.name in bundle.PICTURES for p in out.iterdir())
