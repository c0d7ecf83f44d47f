"""Sweeps: grid expansion, rows equal to direct simulations, errors before any run,
failed runs as rows, outputs written as runs finish, resume after an interrupt or a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import clustersim as cs
from clustersim.experiments import expand_grid, grid, runner, sweep
from clustersim.experiments.runner import NONDETERMINISTIC
from tests.conftest import synthetic

REPO = Path(__file__).resolve().parent.parent


def base4() -> dict:
    """4 GPUs, 4 layers: pp ∈ {1, 2, 4} all valid with dp = auto."""
    sc = synthetic(p=4, m=8, activation=2**20, params=2**24)
    sc["parallel"]["dp"] = "auto"
    return sc


GRID = {"parallel.pp": [1, 2, 4], "parallel.schedule": ["1f1b", "gpipe"]}


def test_expand_crosses_grid_and_advances_zip_together():
    runs = expand_grid({"a.x": [1, 2], "a.y": ["p", "q", "r"]}, {"b.u": [10, 20], "b.v": ["s", "t"]})
    assert len(runs) == 2 * 3 * 2
    assert runs[0] == {"a.x": 1, "a.y": "p", "b.u": 10, "b.v": "s"}
    assert runs[1] == {"a.x": 1, "a.y": "p", "b.u": 20, "b.v": "t"}  # zip is the fastest axis
    assert all((r["b.u"], r["b.v"]) in {(10, "s"), (20, "t")} for r in runs)
    assert len({grid.run_id(r) for r in runs}) == len(runs)


def test_run_id_is_stable_and_ignores_key_order_and_cli_strings():
    assert grid.run_id({"parallel.pp": 2, "parallel.schedule": "gpipe"}) == grid.run_id(
        {"parallel.schedule": "gpipe", "parallel.pp": 2}
    )
    key, values = grid.parse_axis("parallel.pp=1,2,4")
    assert (key, values) == ("parallel.pp", [1, 2, 4])
    assert grid.as_axes({"parallel.pp": ["2"]}, "grid") == {"parallel.pp": [2]}


def test_rows_equal_direct_simulations_in_grid_order():
    df = sweep(base4(), GRID, workers=1)
    assert list(df["parallel.pp"]) == [1, 1, 2, 2, 4, 4]
    assert list(df["parallel.schedule"]) == ["1f1b", "gpipe"] * 3
    assert (df["status"] == "ok").all()
    for row in df.to_dict("records"):
        res = cs.simulate(
            cs.load_scenario(base4()).with_overrides(
                {"parallel.pp": row["parallel.pp"], "parallel.schedule": row["parallel.schedule"]}
            )
        )
        for key, value in res.summary.items():
            if key not in NONDETERMINISTIC:
                assert row[key] == value, key


@pytest.mark.parametrize(
    "bad, key, value",
    [
        ({"parallel.ppp": [1, 2]}, "parallel.ppp", "1"),  # unknown key
        ({"parallel.pp": [1, "two"]}, "parallel.pp", "two"),  # wrong type
        ({"parallel.pp": [2, 0]}, "parallel.pp", "0"),  # out of range
        ({"parallel.schedule": ["1f1b", "gpip"]}, "parallel.schedule", "gpip"),
        ({"parallel.pp": []}, "parallel.pp", "[]"),  # empty axis
        ({"model.layers": 4}, "model.layers", "4"),  # not a list
    ],
)
def test_bad_grids_fail_before_any_run(bad, key, value, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(runner, "simulate", lambda sc, **kw: calls.append(sc))
    with pytest.raises(cs.ScenarioError) as err:
        sweep(base4(), bad, workers=1, out=tmp_path / "runs.csv")
    assert key in str(err.value) and value in str(err.value)
    assert calls == [] and not (tmp_path / "runs.csv").exists()


def test_zip_axes_of_different_lengths_are_an_error():
    with pytest.raises(
        cs.ScenarioError, match=r"parallel.pp: \[1, 2, 4\].*equal lengths.*training.global_batch"
    ):
        sweep(base4(), zip={"training.global_batch": [8, 16], "parallel.pp": [1, 2, 4]}, workers=1)


def test_invalid_combinations_and_failed_runs_are_rows(monkeypatch):
    real = runner.simulate

    def flaky(sc, **kw):
        if sc.parallel.pp == 2:
            raise RuntimeError("boom at pp=2")
        return real(sc, **kw)

    monkeypatch.setattr(runner, "simulate", flaky)
    df = sweep(base4(), {"parallel.pp": [1, 2, 3, 4]}, workers=1)
    assert list(df["status"]) == ["ok", "error", "invalid", "ok"]
    assert "boom at pp=2" in df.loc[1, "error"]
    assert "parallel" in df.loc[2, "error"]  # names the rule the combination breaks
    assert df.loc[3, "iteration_time_s"] > 0


def test_a_combination_its_compiler_refuses_is_an_invalid_row():
    """The compiler's check (after resolve) refuses a row as the loader does: ``invalid``,
    with the refusal naming the field, before it runs; and a base it refuses, up front."""
    base = base4()
    base["parallel"].update(pp=1, zero=3, data_parallel={"shard_group_size": 4})
    df = sweep(base, {"parallel.pp": [1, 2]}, workers=1)
    assert list(df["status"]) == ["ok", "invalid"]
    assert df.loc[1, "error"].startswith("parallel.data_parallel.shard_group_size: 4 is invalid")
    base["parallel"]["pp"] = 2  # the base itself: refused before any run, as by the loader
    with pytest.raises(cs.ScenarioError, match=r"^parallel\.data_parallel\.shard_group_size: 4"):
        sweep(base, {"parallel.schedule": ["1f1b", "gpipe"]}, workers=1)


def test_rows_saved_as_runs_finish_and_interrupt_then_resume(tmp_path, monkeypatch):
    out = tmp_path / "runs.csv"
    real, calls = runner.simulate, []

    def interrupt_third(sc, **kw):
        calls.append(sc)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(sc, **kw)

    monkeypatch.setattr(runner, "simulate", interrupt_third)
    with pytest.raises(KeyboardInterrupt):
        sweep(base4(), GRID, workers=1, out=out)
    assert len(pd.read_csv(out)) == 2  # the two finished runs are on disk
    monkeypatch.setattr(runner, "simulate", lambda sc, **kw: (calls.append(sc), real(sc, **kw))[1])
    resumed = sweep(base4(), GRID, workers=1, out=out)
    assert len(calls) == 3 + 4  # only the 4 unfinished runs ran again
    fresh = sweep(base4(), GRID, workers=1)
    pd.testing.assert_frame_equal(resumed, fresh)
    on_disk = pd.read_csv(out)
    assert sorted(on_disk["run_id"]) == sorted(fresh["run_id"])  # every row exactly once
    lines = (tmp_path / "runs.csv.journal.jsonl").read_text().splitlines()
    assert len(lines) == 6 and len({json.loads(x)["run_id"] for x in lines}) == 6


def test_parquet_output_round_trips(tmp_path):
    pytest.importorskip("pyarrow")
    out = tmp_path / "runs.parquet"
    df = sweep(base4(), {"parallel.pp": [1, 2]}, {"training.global_batch": [8, 16]}, workers=1, out=out)
    back = pd.read_parquet(out)
    assert list(back["run_id"]) == list(df["run_id"])
    assert list(back["iteration_time_s"]) == list(df["iteration_time_s"])


def test_resume_refuses_another_base(tmp_path):
    out = tmp_path / "runs.csv"
    sweep(base4(), {"parallel.pp": [1]}, workers=1, out=out)
    other = base4()
    other["model"]["forward"] = 2e-3
    with pytest.raises(cs.ScenarioError, match="different base scenario"):
        sweep(other, {"parallel.pp": [1]}, workers=1, out=out)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "clustersim.cli", *args]


def test_killed_subprocess_resumes_with_every_row_once(tmp_path):
    """kill -9 a CLI sweep after 3 rows, rerun it: 8 rows, each once, equal to a fresh sweep."""
    base = synthetic(p=4, m=64, activation=2**20, params=2**24, network="packet")
    base["parallel"]["dp"] = "auto"
    scen = tmp_path / "base.yaml"
    scen.write_text(json.dumps(base))
    out = tmp_path / "runs.csv"
    journal = tmp_path / "runs.csv.journal.jsonl"
    args = (
        "sweep",
        str(scen),
        "--grid",
        "parallel.pp=1,2,4",
        "--grid",
        "parallel.schedule=1f1b,gpipe",
        "--zip",
        "training.global_batch=64,128",
        "--workers",
        "1",
        "--out",
        str(out),
    )
    proc = subprocess.Popen(_cli(*args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and len(journal.read_text().splitlines()) >= 3:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(journal.read_text().splitlines())
    assert 3 <= done < 12, "the kill should land midway"
    assert subprocess.run(_cli(*args), cwd=REPO, capture_output=True).returncode == 0
    rows = pd.read_csv(out)
    assert len(rows) == 12 and rows["run_id"].is_unique
    fresh = sweep(
        str(scen),
        {"parallel.pp": [1, 2, 4], "parallel.schedule": ["1f1b", "gpipe"]},
        {"training.global_batch": [64, 128]},
        workers=1,
    )
    assert sorted(rows["run_id"]) == sorted(fresh["run_id"])
    merged = rows.set_index("run_id").loc[fresh["run_id"]]
    assert list(merged["iteration_time_s"]) == pytest.approx(list(fresh["iteration_time_s"]), rel=1e-12)


def test_sweep_file_and_cli(tmp_path, capsys):
    from clustersim.cli import main

    out = tmp_path / "runs.csv"
    assert (
        main(
            [
                "sweep",
                str(REPO / "scenarios/sweeps/quickstart-pp-schedule.yaml"),
                "--grid",
                "parallel.pp=2,4",
                "--workers",
                "1",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    df = pd.read_csv(out)
    assert len(df) == 2 * 2 * 2  # --grid pp replaces the file's pp axis; × schedule × zipped batch
    assert set(zip(df["training.global_batch"], df["name"])) == {(8, "quickstart-b8"), (32, "quickstart-b32")}
    printed = capsys.readouterr().out
    assert "8 runs: 8 ok" in printed


def test_cli_bad_grid_is_one_clear_error(capsys):
    from clustersim.cli import main

    assert (
        main(["sweep", str(REPO / "scenarios/synthetic-4stage-1f1b.yaml"), "--grid", "parallel.pp=1,x"]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: parallel.pp: 'x'") and "Traceback" not in err
