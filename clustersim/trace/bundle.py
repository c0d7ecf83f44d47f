"""The result bundle: ``res.save(dir)`` writes it, ``cs.load_result(dir)`` reads it back.

Files::

    summary.json             headline metrics (res.summary)
    spans.parquet|spans.csv  res.spans (Parquet when pyarrow is installed)
    devices.csv              res.devices
    waits.csv                res.waits (who waited for whom)
    memory.parquet|memory.csv res.memory
    scenario.resolved.yaml   the scenario with every default filled in
    requests.csv             res.requests (inference runs only)
    job.csv                  res.job, the job timeline (scenarios with faults/recovery only)
    steps.csv                res.steps, a generation run's steps (generation runs only)
    trace.json               Chrome/Perfetto trace (ui.perfetto.dev)
    gantt.png, utilization.png, memory.png, breakdown.png   pictures (plots=True)
    heatmap.png              busy heatmap, when the Gantt is drawn per stage (too many
                             GPU lanes for one row each: viz.rows.per_lane_fits)
    job.png                  the job timeline picture (with job.csv)
    generation.png           batch size and KV cache in use over time (with steps.csv)

Every picture is drawn from spans, devices, memory and the job table only, so
:func:`redraw` on a reloaded bundle draws the same pictures as the live Result. A folder
used again holds only this run's files: every name above that this save does not write is
removed first (:data:`BUNDLE_FILES`; nothing else in the folder is touched).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from ..engine.collector import collector_paused
from ..output import Staging, atomic_path, folder, open_atomic, staged, write_text
from ..viz.rows import per_lane_fits
from .csv_text import csv_text

#: every picture a bundle can hold
PICTURES = (
    "gantt.png",
    "utilization.png",
    "memory.png",
    "breakdown.png",
    "heatmap.png",
    "job.png",
    "generation.png",
)
#: every file :func:`save_result` can write; a save removes those it will not write
BUNDLE_FILES = (
    "summary.json",
    "spans.parquet",
    "spans.csv",
    "devices.csv",
    "waits.csv",
    "memory.parquet",
    "memory.csv",
    "scenario.resolved.yaml",
    "requests.csv",
    "job.csv",
    "steps.csv",
    "trace.json",
) + PICTURES

SPAN_DTYPES = {
    "device": str,
    "lane": str,
    "kind": str,
    "name": str,
    "phase": str,
    "stage": "int64",
    "microbatch": "int64",
    "iteration": "int64",
    "bytes": "int64",
    "start_s": float,
    "end_s": float,
    "flops": float,
}


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def _write_table(df: pd.DataFrame, out: Path, stem: str, parquet: bool, stage: Staging) -> None:
    if parquet:
        with atomic_path(out / f"{stem}.parquet", stage) as tmp:
            df.to_parquet(tmp, index=False)
    else:
        _write_csv(df, out / f"{stem}.csv", stage)


def _write_csv(df: pd.DataFrame, path: Path, stage: Staging | None = None) -> None:
    """``df.to_csv(path, index=False)``'s bytes, made a column at a time where
    :func:`~.csv_text.csv_text` knows every column's kind (a bundle's tables), else by pandas."""
    text = csv_text(df)
    if text is None:
        with atomic_path(path, stage) as tmp:
            df.to_csv(tmp, index=False)
        return
    with open_atomic(
        path, newline="", stage=stage
    ) as fh:  # (newline="": the line ends as written, as pandas)
        fh.write(text)


@collector_paused()  # (the trace's event dicts: engine/collector.py)
def save_result(res, directory: str | Path, plots: bool = True) -> Path:
    """Write ``res`` as a bundle into ``directory`` (created) and return its path. The
    files are written under temporary names and renamed into place together once all are
    complete, never through a symbolic link (:mod:`clustersim.output`): a failure leaves
    the folder's earlier files as they were."""
    out = folder(directory)
    parquet = _has_pyarrow()
    tables = ("spans", "memory")
    writes = {"summary.json", "devices.csv", "waits.csv", "scenario.resolved.yaml", "trace.json"}
    writes |= {f"{t}.parquet" if parquet else f"{t}.csv" for t in tables}
    writes |= {"requests.csv"} if res.requests is not None else set()
    writes |= {"job.csv"} if res.job is not None else set()
    writes |= {"steps.csv"} if res.steps is not None else set()
    writes |= set(pictures(res)) if plots else set()
    with staged() as stage:
        # removed at the commit, before the new files move in: a previous run's file never
        # stays beside this run's (a stale spans.csv twin would be read instead of spans.parquet)
        stage.removals = [out / name for name in BUNDLE_FILES if name not in writes]
        write_text(out / "summary.json", json.dumps(res.summary, indent=2) + "\n", stage)
        _write_table(res.spans, out, "spans", parquet, stage)
        _write_csv(res.devices, out / "devices.csv", stage)
        _write_csv(res.waits, out / "waits.csv", stage)
        _write_table(res.memory, out, "memory", parquet, stage)
        write_text(out / "scenario.resolved.yaml", yaml.safe_dump(res.scenario, sort_keys=False), stage)
        if res.requests is not None:
            _write_csv(res.requests, out / "requests.csv", stage)
        if res.job is not None:  # the job timeline of a scenario with faults/recovery
            _write_csv(res.job, out / "job.csv", stage)
        if res.steps is not None:  # the steps of a generation run
            _write_csv(res.steps, out / "steps.csv", stage)
        res.to_chrome_trace(out / "trace.json", stage=stage)
        if plots:
            _draw(res, out, 110, stage)
    return out


def pictures(res) -> dict:
    """File name → drawing method of every picture the bundle of ``res`` holds."""
    figs = {
        "gantt.png": res.plot_gantt,
        "utilization.png": res.plot_utilization,
        "memory.png": res.plot_memory,
        "breakdown.png": res.plot_breakdown,
    }
    if not per_lane_fits(res.spans):  # the Gantt shows stages: the heatmap shows every GPU
        figs["heatmap.png"] = res.plot_heatmap
    if res.job is not None:
        figs["job.png"] = res.plot_job
    if res.steps is not None:
        figs["generation.png"] = res.plot_generation
    return figs


def redraw(res, directory: str | Path, dpi: int = 110) -> list[Path]:
    """Draw the bundle's pictures of ``res`` into ``directory`` and remove any other
    :data:`PICTURES` there (a previous drawing's), all at once when every picture is
    drawn; returns the files written."""
    out = folder(directory)
    with staged() as stage:
        return _draw(res, out, dpi, stage)


def _draw(res, out: Path, dpi: int, stage: Staging) -> list[Path]:
    figs = pictures(res)
    stage.removals += [out / name for name in PICTURES if name not in figs]
    written = []
    for name, draw in figs.items():
        fig = draw()
        with atomic_path(out / name, stage) as tmp:
            fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
        written.append(out / name)
    return written


def load_result(directory: str | Path):
    """Read a bundle written by ``res.save(directory)`` back into a Result.

    Every file is checked before anything is drawn from it (:mod:`.bundle_check`): a
    missing, damaged or foreign file is an :class:`~clustersim.errors.OutputError` naming
    the folder, the file and what is wrong."""
    from .bundle_check import read_bundle
    from .result import Result

    parts = read_bundle(Path(directory))
    return Result(**parts)
