"""Outputs (clustersim.output): a symbolic link or ``..`` in an output folder never makes
clustersim write elsewhere, writes are atomic, and a damaged or foreign bundle is refused
with one OutputError before anything is drawn from it (issue 18, item 3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import clustersim as cs
from clustersim import output
from clustersim.experiments.store import RunStore, save_table
from tests.conftest import synthetic
from tests.test_input_boundary import BOMB

ROOT = Path(__file__).resolve().parent.parent
SECRET = "do not overwrite\n"


@pytest.fixture(scope="module")
def result():
    return cs.simulate(cs.load_scenario(synthetic(2, 2)))


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "outside" / "victim.txt"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


def _plant(folder: Path, name: str, victim: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(victim, folder), folder / name)  # a relative link, through ..


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "clustersim.cli", *args], capture_output=True, text=True, env=env
    )


@pytest.mark.parametrize(
    "name",
    # heatmap.png / job.png: names this save does not write, so it would remove them as stale
    [
        "summary.json",
        "devices.csv",
        "waits.csv",
        "scenario.resolved.yaml",
        "trace.json",
        "gantt.png",
        "heatmap.png",
    ],
)
def test_save_refuses_a_planted_link(result, tmp_path, victim, name):
    out = tmp_path / "bundle"
    _plant(out, name, victim)
    with pytest.raises(
        cs.OutputError, match=f"{name}: is a symbolic link; clustersim never writes through a link"
    ):
        result.save(out)
    assert victim.read_text() == SECRET
    assert (out / name).is_symlink()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp file left behind


def test_cli_run_refuses_a_planted_link(tmp_path, victim):
    scenario = tmp_path / "s.yaml"
    scenario.write_text((ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml").read_text())
    out = tmp_path / "bundle"
    _plant(out, "trace.json", victim)
    proc = _cli("run", str(scenario), "--out", str(out), "--quiet")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
    assert "trace.json: is a symbolic link" in proc.stderr
    assert victim.read_text() == SECRET


def test_cli_plot_refuses_a_planted_link(result, tmp_path, victim):
    out = result.save(tmp_path / "bundle", plots=False)
    _plant(out, "memory.png", victim)
    proc = _cli("plot", str(out))
    assert proc.returncode == 2 and "memory.png: is a symbolic link" in proc.stderr
    assert victim.read_text() == SECRET


def test_names_that_leave_the_folder_are_refused(tmp_path):
    with pytest.raises(cs.OutputError, match="not a file name clustersim writes to"):
        output.write_text(tmp_path / "sub" / "..", "x")
    with pytest.raises(cs.OutputError, match="exists and is not a regular file"):
        output.write_text(tmp_path, "x")
    assert list(tmp_path.iterdir()) == []


def test_writes_are_atomic(tmp_path):
    path = tmp_path / "t.txt"
    output.write_text(path, "old")
    with pytest.raises(RuntimeError), output.open_atomic(path) as fh:
        fh.write("half of a new")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]


def test_sweep_files_refuse_links(tmp_path, victim):
    df = pd.DataFrame({"run_id": ["a"], "x": [1]})
    _plant(tmp_path / "sw", "runs.csv", victim)
    with pytest.raises(cs.OutputError, match="runs.csv: is a symbolic link"):
        save_table(df, tmp_path / "sw" / "runs.csv")
    _plant(tmp_path / "sw2", "runs.csv.journal.jsonl", victim)
    store = RunStore(tmp_path / "sw2" / "runs.csv", base="b")
    with pytest.raises(cs.OutputError, match="journal.jsonl: is a symbolic link"):
        store.load()
    with pytest.raises(cs.OutputError, match="journal.jsonl: is a symbolic link"):
        store.add({"run_id": "a", "base_id": "b"})
    assert victim.read_text() == SECRET


def _damaged(result, tmp_path, name: str, content: bytes | None) -> str:
    out = result.save(tmp_path / "bundle", plots=False)
    for twin in (out / name, out / name.replace(".csv", ".parquet")):
        twin.unlink(missing_ok=True)
    if content is not None:
        (out / name).write_bytes(content)
    with pytest.raises(cs.OutputError) as e:
        cs.load_result(out)
    return str(e.value)


@pytest.mark.parametrize(
    "name,content,expected",
    [
        ("summary.json", b"{", "summary.json: Expecting property name"),
        ("summary.json", b"[1, 2]", "summary.json: expected a JSON object of metrics"),
        ("summary.json", b'{"a": "\xff"}', "summary.json: not UTF-8 text: byte 0xff at offset 7 (line 1)"),
        ("spans.csv", None, "spans.csv is missing"),
        (
            "spans.csv",
            b"device,lane\ngpu0,compute\n",
            "spans.csv: lacks the columns kind, name, stage, microbatch, start_s, end_s, bytes, flops, phase, iteration",
        ),
        ("spans.csv", b"\x00\xff\x00garbage", "spans.csv: "),
        ("devices.csv", b"x\n1\n", "devices.csv: lacks the columns device"),
        ("memory.csv", b"", "memory.csv: No columns to parse from file"),
        ("scenario.resolved.yaml", BOMB.encode(), "more than 100,000 values with its aliases expanded"),
        ("scenario.resolved.yaml", b"- 1\n", "expected a mapping (the resolved scenario)"),
    ],
)
def test_damaged_bundle_is_refused(result, tmp_path, name, content, expected):
    message = _damaged(result, tmp_path, name, content)
    assert message.startswith(f"{tmp_path / 'bundle'}: ") and expected in message


def test_span_times_are_checked(result, tmp_path):
    spans = result.spans.copy()
    spans.loc[0, "end_s"] = spans.loc[0, "start_s"] - 1
    out = result.save(tmp_path / "bundle", plots=False)
    (out / "spans.parquet").unlink(missing_ok=True)
    spans.to_csv(out / "spans.csv", index=False)
    with pytest.raises(cs.OutputError, match="span times must be finite with start_s ≤ end_s"):
        cs.load_result(out)


def test_a_device_file_in_a_bundle_is_not_read(result, tmp_path):
    out = result.save(tmp_path / "bundle", plots=False)
    (out / "scenario.resolved.yaml").unlink()
    os.symlink("/dev/zero", out / "scenario.resolved.yaml")
    with pytest.raises(cs.OutputError, match="scenario.resolved.yaml is not a regular file"):
        cs.load_result(out)


def test_cli_plot_of_a_foreign_folder(tmp_path):
    (tmp_path / "summary.json").write_text("not json")
    proc = _cli("plot", str(tmp_path))
    assert proc.returncode == 2
    assert (
        proc.stderr
        == f"error: {tmp_path}: not a readable clustersim result bundle: summary.json: Expecting value: line 1 column 1 (char 0)\n"
    )


# -- issue 39 case 14, 15 and item 4: folders below the named one, and failures halfway ---------------


def _linked_folder(tmp_path: Path) -> tuple[Path, Path]:
    """``out/et`` → a folder outside ``out``: (the link, the folder it points at)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").mkdir()
    os.symlink(elsewhere, tmp_path / "out" / "et")
    return tmp_path / "out" / "et", elsewhere


def test_a_linked_folder_is_refused_as_a_bundle_or_a_chakra_folder(result, tmp_path):
    link, elsewhere = _linked_folder(tmp_path)
    with pytest.raises(cs.OutputError, match=r"et: is a symbolic link"):
        result.save(link, plots=False)
    with pytest.raises(cs.OutputError, match=r"et: is a symbolic link"):
        cs.export_chakra(cs.load_scenario(synthetic(2, 2)), link)
    assert list(elsewhere.iterdir()) == []


def test_cli_refuses_a_linked_chakra_folder_before_writing(tmp_path):
    link, elsewhere = _linked_folder(tmp_path)
    scenario = ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml"
    done = _cli("run", str(scenario), "--quiet", "--chakra", str(link))
    assert done.returncode == 2 and "symbolic link" in done.stderr
    done = _cli("export-chakra", str(scenario), str(link))
    assert done.returncode == 2 and "symbolic link" in done.stderr
    assert list(elsewhere.iterdir()) == []


def test_a_folder_reached_through_a_link_in_its_own_path_is_used(result, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "via")
    result.save(tmp_path / "via" / "bundle", plots=False)
    assert (real / "bundle" / "summary.json").is_file()


def test_a_failed_save_leaves_the_earlier_bundle_as_it_was(result, tmp_path, monkeypatch):
    out = tmp_path / "bundle"
    result.save(out, plots=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "notes.txt").write_text("mine\n")

    real_open = Path.open

    def open_on_a_full_disk(self, *args, **kwargs):  # the disk fills while devices.csv is written
        if self.name.startswith(".devices.csv."):
            raise OSError(28, "No space left on device")
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", open_on_a_full_disk)
    other = cs.simulate(cs.load_scenario(synthetic(2, 4)))  # a run whose summary differs
    with pytest.raises(cs.OutputError, match=r"bundle/devices\.csv: No space left on device"):
        other.save(out, plots=False)
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "notes.txt"}
    assert after == before  # no file half-replaced, no temporary file left behind
    assert (out / "notes.txt").read_text() == "mine\n"


def test_staging_moves_all_files_or_none(tmp_path):
    (tmp_path / "a.txt").write_text("old a")
    with pytest.raises(RuntimeError), output.staged() as stage:
        output.write_text(tmp_path / "a.txt", "new a", stage)
        output.write_text(tmp_path / "b.txt", "new b", stage)
        raise RuntimeError("halfway")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
    assert (tmp_path / "a.txt").read_text() == "old a"
    with output.staged() as stage:
        output.write_text(tmp_path / "a.txt", "new a", stage)
        output.write_text(tmp_path / "b.txt", "new b", stage)
        assert (tmp_path / "a.txt").read_text() == "old a"  # nothing moves before the commit
    assert (tmp_path / "a.txt").read_text() == "new a" and (tmp_path / "b.txt").read_text() == "new b"
