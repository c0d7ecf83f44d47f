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

from .recorder import SPAN_FIELDS

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
        df.to_parquet(out / f"{stem}.parquet", index=False)
    else:
        df.to_csv(out / f"{stem}.csv", index=False)


def _read_table(directory: Path, stem: str, dtypes: dict | None = None) -> pd.DataFrame:
    pq = directory / f"{stem}.parquet"
    if pq.exists():
        return pd.read_parquet(pq)
    return pd.read_csv(directory / f"{stem}.csv", keep_default_na=False, dtype=dtypes)


def save_result(res, directory: str | Path, plots: bool = True) -> Path:
    """Write ``res`` as a bundle into ``directory`` (created) and return its path."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    parquet = _has_pyarrow()
    (out / "summary.json").write_text(json.dumps(res.summary, indent=2) + "\n")
    _write_table(res.spans, out, "spans", parquet)
    res.devices.to_csv(out / "devices.csv", index=False)
    res.waits.to_csv(out / "waits.csv", index=False)
    _write_table(res.memory, out, "memory", parquet)
    (out / "scenario.resolved.yaml").write_text(yaml.safe_dump(res.scenario, sort_keys=False))
    (out / "requests.csv").unlink(missing_ok=True)
    if res.requests is not None:
        res.requests.to_csv(out / "requests.csv", index=False)
    (out / "job.csv").unlink(missing_ok=True)
    if res.job is not None:  # the job timeline of a scenario with faults/recovery
        res.job.to_csv(out / "job.csv", index=False)
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
    from ..viz.layout import AGGREGATE_ABOVE, num_gpus

    if num_gpus(res.spans) > AGGREGATE_ABOVE:
        figs["heatmap.png"] = res.plot_heatmap
    written = []
    for name, draw in figs.items():
        fig = draw()
        fig.savefig(out / name, dpi=dpi, bbox_inches="tight")
        written.append(out / name)
    return written


def load_result(directory: str | Path):
    """Read a bundle written by ``res.save(directory)`` back into a Result."""
    from .result import Result

    d = Path(directory)
    if not (d / "summary.json").exists():
        raise FileNotFoundError(
            f"{d}: not a clustersim result bundle (no summary.json); "
            "write one with res.save(dir) or `clustersim run SCENARIO --out DIR`"
        )
    summary = json.loads((d / "summary.json").read_text())
    spans = _read_table(d, "spans", SPAN_DTYPES)
    spans = spans[list(SPAN_FIELDS)].astype({k: v for k, v in SPAN_DTYPES.items() if k in spans.columns})
    devices = pd.read_csv(d / "devices.csv")
    memory = _read_table(d, "memory", {"device": str, "time_s": float, "allocated_bytes": "int64"})
    scenario_path = d / "scenario.resolved.yaml"
    scenario = yaml.safe_load(scenario_path.read_text()) if scenario_path.exists() else {}
    waits = pd.read_csv(d / "waits.csv", keep_default_na=False) if (d / "waits.csv").exists() else None
    requests = pd.read_csv(d / "requests.csv") if (d / "requests.csv").exists() else None
    job = (
        pd.read_csv(
            d / "job.csv", keep_default_na=False, na_values={"iteration": [""]}, dtype={"iteration": "Int64"}
        )
        if (d / "job.csv").exists()
        else None
    )
    return Result(summary, spans, devices, memory, scenario or {}, requests=requests, waits=waits, job=job)
