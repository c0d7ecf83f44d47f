"""Reading a result bundle back, every file checked before anything is drawn from it.

A bundle comes from disk, so it may be damaged (a run killed mid-save, a file edited by
hand) or foreign (some other folder). Each file must be a regular file — not a symbolic
link or a device, which could point anywhere or never end — and parse as what
:func:`~clustersim.trace.bundle.save_result` writes: ``summary.json`` a JSON object whose numbers are finite and ≥ 0,
``scenario.resolved.yaml`` bounded YAML (:mod:`clustersim.reader`), the span,
device and memory tables with their columns and types, and span times finite with
``start_s ≤ end_s``. Anything else is one :class:`OutputError` naming the folder, the file
and the problem.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import OutputError, ScenarioError, short_repr, shorten
from ..reader import decode, parse_yaml
from ..record import SPAN_FIELDS

#: columns the pictures and metrics read from the device and memory tables
DEVICE_COLUMNS = ("device",)
MEMORY_DTYPES = {"device": str, "time_s": float, "allocated_bytes": "int64"}


@contextlib.contextmanager
def _reading(directory: Path, name: str) -> Iterator[None]:
    """Turn whatever reading ``name`` raises into an OutputError naming it."""
    try:
        yield
    except OutputError:
        raise
    except (ScenarioError, OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
        detail = exc.expected if isinstance(exc, ScenarioError) else str(exc) or type(exc).__name__
        raise OutputError(
            f"{directory}: not a readable clustersim result bundle: {name}: {shorten(detail.splitlines()[0])}"
        ) from None


def _file(directory: Path, name: str, required: bool = False) -> Path | None:
    """``directory/name`` if it is a regular file (not a link), None if absent."""
    path = directory / name
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise OutputError(
            f"{directory}: {name} is not a regular file (a link or a device); refusing to read it"
        )
    if not path.exists():
        if required:
            raise OutputError(f"{directory}: not a readable clustersim result bundle: {name} is missing")
        return None
    return path


def _table(directory: Path, stem: str, columns, **csv_options) -> pd.DataFrame:
    """The ``stem`` table (Parquet preferred, as saved), which must hold ``columns``."""
    path = _file(directory, f"{stem}.parquet") or _file(directory, f"{stem}.csv", required=True)
    with _reading(directory, path.name):
        df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path, **csv_options)
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise ValueError(f"lacks the columns {', '.join(missing)}")
        return df


def _optional_csv(directory: Path, name: str, **kwargs) -> pd.DataFrame | None:
    path = _file(directory, name)
    if path is None:
        return None
    with _reading(directory, name):
        return pd.read_csv(path, **kwargs)


def read_bundle(directory: Path) -> dict[str, Any]:
    """The parts of the bundle in ``directory`` as :class:`~clustersim.trace.result.Result`
    takes them, each file checked (see the module docstring)."""
    from .bundle import SPAN_DTYPES

    if not directory.is_dir() or not (directory / "summary.json").exists():
        raise OutputError(
            f"{directory}: not a clustersim result bundle (no summary.json); "
            "write one with res.save(dir) or `clustersim run SCENARIO --out DIR`"
        )
    with _reading(directory, "summary.json"):
        summary = json.loads(decode(_file(directory, "summary.json").read_bytes(), "summary.json", "bundle"))
        if not isinstance(summary, dict):
            raise ValueError("expected a JSON object of metrics")
        for key, value in summary.items():  # a run's figures are finite and ≥ 0
            # (an int past int64 compares below inf but is no figure a run writes: no float holds it)
            top = 2**63 if isinstance(value, int) else math.inf
            if isinstance(value, float | int) and not isinstance(value, bool) and not 0 <= value < top:
                raise ValueError(f"{key} = {short_repr(value)} is not a figure a run writes (finite, ≥ 0)")
    spans = _table(directory, "spans", SPAN_FIELDS, keep_default_na=False, dtype=SPAN_DTYPES)
    with _reading(directory, "spans"):
        spans = spans[list(SPAN_FIELDS)].astype(SPAN_DTYPES)
        times = spans[["start_s", "end_s"]].to_numpy()
        if not np.isfinite(times).all() or (times[:, 1] < times[:, 0]).any():
            raise ValueError("span times must be finite with start_s ≤ end_s")
    devices = _table(directory, "devices", DEVICE_COLUMNS)
    memory = _table(directory, "memory", tuple(MEMORY_DTYPES), keep_default_na=False, dtype=MEMORY_DTYPES)
    scenario: Any = {}
    scenario_path = _file(directory, "scenario.resolved.yaml")
    if scenario_path is not None:
        with _reading(directory, scenario_path.name):
            text = decode(scenario_path.read_bytes(), scenario_path.name, "bundle")
            scenario = parse_yaml(text, scenario_path.name, str(scenario_path)) or {}
            if not isinstance(scenario, dict):
                raise ValueError("expected a mapping (the resolved scenario)")
    job = _optional_csv(
        directory,
        "job.csv",
        keep_default_na=False,
        na_values={"iteration": [""]},
        dtype={"iteration": "Int64"},
    )
    return {
        "summary": summary,
        "spans": spans,
        "devices": devices,
        "memory": memory,
        "scenario": scenario,
        "requests": _optional_csv(directory, "requests.csv"),
        "waits": _optional_csv(directory, "waits.csv", keep_default_na=False),
        "job": job,
        "steps": _optional_csv(directory, "steps.csv"),
    }
