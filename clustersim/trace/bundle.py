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
    heatmap.png              busy heatmap, for runs above AGGREGATE_ABOVE (32) GPUs

Every picture is drawn from spans, devices and memory only, so :func:`redraw` on a
reloaded bundle draws the same pictures as the live Result.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from ..output import atomic_path, write_text
from ..viz.rows import AGGREGATE_ABOVE, num_gpus

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
    for old in (out / f"{stem}.parquet", out / f"{stem}.csv"):
        old.unlink(missing_ok=True)  # never leave a stale twin that load would prefer
    if parquet:
        with atomic_path(out / f"{stem}.parquet") as tmp:
            df.to_parquet(tmp, index=False)
    else:
        _write_csv(df, out / f"{stem}.csv")


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)


def save_result(res, directory: str | Path, plots: bool = True) -> Path:
    """Write ``res`` as a bundle into ``directory`` (created) and return its path. Every
    file is written atomically and never through a symbolic link (:mod:`clustersim.output`)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    parquet = _has_pyarrow()
    write_text(out / "summary.json", json.dumps(res.summary, indent=2) + "\n")
    _write_table(res.spans, out, "spans", parquet)
    _write_csv(res.devices, out / "devices.csv")
    _write_csv(res.waits, out / "waits.csv")
    _write_table(res.memory, out, "memory", parquet)
    write_text(out / "scenario.resolved.yaml", yaml.safe_dump(res.scenario, sort_keys=False))
    (out / "requests.csv").unlink(missing_ok=True)
    if res.requests is not None:
        _write_csv(res.requests, out / "requests.csv")
    (out / "job.csv").unlink(missing_ok=True)
    if res.job is not None:  # the job timeline of a scenario with faults/recovery
        _write_csv(res.job, out / "job.csv")
    res.to_chrome_trace(out / "trace.json")
    if plots:
        redraw(res, out)
    return out


def redraw(res, directory: str | Path, dpi: int = 110) -> list[Path]:
    """Draw the bundle's pictures of ``res`` into ``directory``; returns the files written."""
    out = Path(directory)
    figs = {
        "gantt.png": res.plot_gantt,
        "utilization.png": res.plot_utilization,
        "memory.png": res.plot_memory,
        "breakdown.png": res.plot_breakdown,
    }
    if num_gpus(res.spans) > AGGREGATE_ABOVE:
        figs["heatmap.png"] = res.plot_heatmap
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
