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
    trace.json               Chrome/Perfetto trace (ui.perfetto.dev)
    gantt.png, utilization.png, memory.png, breakdown.png   pictures (plots=True)
    heatmap.png              busy heatmap, when the Gantt is drawn per stage (too many
                             GPU lanes for one row each: viz.rows.per_lane_fits)
    job.png                  the job timeline picture (with job.csv)

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
from ..output import atomic_path, open_atomic, remove, write_text
from ..viz.rows import per_lane_fits
from .csv_text import csv_text

#: every picture a bundle can hold
PICTURES = ("gantt.png", "utilization.png", "memory.png", "breakdown.png", "heatmap.png", "job.png")
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


def _write_table(df: pd.DataFrame, out: Path, stem: str, parquet: bool) -> None:
    if parquet:
        with atomic_path(out / f"{stem}.parquet") as tmp:
            df.to_parquet(tmp, index=False)
    else:
        _write_csv(df, out / f"{stem}.csv")


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    """``df.to_csv(path, index=False)``'s bytes, made a column at a time where
    :func:`~.csv_text.csv_text` knows every column's kind (a bundle's tables), else by pandas."""
    text = csv_text(df)
    if text is None:
        with atomic_path(path) as tmp:
            df.to_csv(tmp, index=False)
        return
    with open_atomic(path, newline="") as fh:  # (newline="": the line ends as written, as pandas)
        fh.write(text)


@collector_paused()  # (the trace's event dicts: engine/collector.py)
def save_result(res, directory: str | Path, plots: bool = True) -> Path:
    """Write ``res`` as a bundle into ``directory`` (created) and return its path. Every
    file is written atomically and never through a symbolic link (:mod:`clustersim.output`)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    parquet = _has_pyarrow()
    tables = ("spans", "memory")
    writes = {"summary.json", "devices.csv", "waits.csv", "scenario.resolved.yaml", "trace.json"}
    writes |= {f"{t}.parquet" if parquet else f"{t}.csv" for t in tables}
    writes |= {"requests.csv"} if res.requests is not None else set()
    writes |= {"job.csv"} if res.job is not None else set()
    writes |= set(pictures(res)) if plots else set()
    # first, so that a run killed half-way never leaves a previous run's file beside its own
    # (a stale spans.csv twin would even be read instead of the new spans.parquet)
    for name in BUNDLE_FILES:
        if name not in writes:
            remove(out / name)
    write_text(out / "summary.json", json.dumps(res.summary, indent=2) + "\n")
    _write_table(res.spans, out, "spans", parquet)
    _write_csv(res.devices, out / "devices.csv")
    _write_csv(res.waits, out / "waits.csv")
    _write_table(res.memory, out, "memory", parquet)
    write_text(out / "scenario.resolved.yaml", yaml.safe_dump(res.scenario, sort_keys=False))
    if res.requests is not None:
        _write_csv(res.requests, out / "requests.csv")
    if res.job is not None:  # the job timeline of a scenario with faults/recovery
        _write_csv(res.job, out / "job.csv")
    res.to_chrome_trace(out / "trace.json")
    if plots:
        redraw(res, out)
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
    return figs


def redraw(res, directory: str | Path, dpi: int = 110) -> list[Path]:
    """Draw the bundle's pictures of ``res`` into ``directory`` and remove any other
    :data:`PICTURES` there (a previous drawing's); returns the files written."""
    out = Path(directory)
    figs = pictures(res)
    for name in PICTURES:
        if name not in figs:
            remove(out / name)
    written = []
    for name, draw in figs.items():
        fig = draw()
        with atomic_path(out / name) as tmp:
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
