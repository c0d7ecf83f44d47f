"""The Result of a simulation: spans, per-device table, memory timeline, summary.

Everything here is computed from the recorded spans and memory samples — never from
engine internals — so a saved and reloaded result draws and reports the same.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import metrics
from ..record import SPAN_FIELDS


class Result:
    """What happened in one simulation. See DESIGN §3 for the fields.

    Attributes:
        summary: dict of headline metrics (iteration_time_s, samples_per_s, bubble_fraction, …).
        spans: DataFrame, one row per activity (GPU ops and link busy periods).
        devices: DataFrame, one row per GPU (stage, ranks, busy/bubble fractions, memory, oom).
        memory: DataFrame of (device, time_s, allocated_bytes) after every change.
        scenario: the resolved scenario dict (every default filled).
        requests: inference only (else None): one row per request — request, replica,
            arrival_s, start_s, end_s, queue_s, latency_s (see docs/inference.md).
        waits: DataFrame, who waited for whom (:mod:`clustersim.trace.waits`), built on first use.
        job: DataFrame of the job timeline (one row per iteration, checkpoint, failure,
            restart, migration; docs/faults.md) when the scenario has ``faults`` or
            ``recovery``; None otherwise.
        jobs: a multi-job scenario only (else None): each job's own Result by job name
            (docs/multi_job.md).
        steps: a generation run only (else None): one row per step — its batch, tokens and
            KV blocks in use (docs/generation.md).
        fleet: failures drawn at rates only (``recovery.failures``, else None): the
            job-level model (:class:`clustersim.faults.renewal.FleetJob`) that
            ``clustersim.faults.interval_study.goodput_curve`` varies (docs/fleet.md).
    """

    def __init__(
        self,
        summary: dict[str, Any],
        spans: pd.DataFrame,
        devices: pd.DataFrame,
        memory: pd.DataFrame,
        scenario: dict[str, Any],
        requests: pd.DataFrame | None = None,
        waits: pd.DataFrame | Callable[[], pd.DataFrame] | None = None,
        job: pd.DataFrame | None = None,
        jobs: dict[str, Result] | None = None,
        steps: pd.DataFrame | None = None,
    ):
        self.summary, self.spans, self.devices, self.memory, self.scenario = (
            summary,
            spans,
            devices,
            memory,
            scenario,
        )
        self.requests = requests
        self.job = job
        self.jobs = jobs
        self.steps = steps
        self.fleet = None
        self._waits = waits

    @property
    def waits(self) -> pd.DataFrame:
        """Every op that started later than its lane was free, and the op and GPU it waited
        for (a dependency, or the last member of a collective); see :mod:`clustersim.trace.waits`."""
        if callable(self._waits):
            self._waits = self._waits()
        if self._waits is None:
            from .waits import COLUMNS

            self._waits = pd.DataFrame(columns=COLUMNS)
        return self._waits

    def utilization(self, window: tuple[float, float] | None = None) -> pd.DataFrame:
        """Busy fraction of every GPU lane and link over ``window`` (default: the whole run)."""
        if window is None:
            window = (0.0, float(self.spans["end_s"].max()))
        return metrics.lane_utilization(self.spans, window)

    def plot_gantt(
        self, ax=None, devices=None, window=None, links: bool = False, aggregate: bool | None = None
    ):
        """Gantt timeline: one row per GPU lane (and per busy link with ``links=True``);
        one row pair per stage where that would not fit 14 in, unless ``devices`` picks a
        subset or ``aggregate=False``. ``window`` = (t0, t1) seconds zooms in. Returns the Figure."""
        from ..viz.gantt import plot_gantt

        return plot_gantt(
            self.spans,
            ax=ax,
            devices=devices,
            window=window,
            links=links,
            aggregate=aggregate,
            title=self.scenario.get("name", ""),
            device_table=self.devices,
        )

    def plot_utilization(self, ax=None, window=None, bins: int = 60, top_links: int = 8):
        """Busy fraction over time (binned) of every GPU's compute lane (per stage above 8
        GPUs) and of the ``top_links`` busiest links, plus those links' overall busy bars."""
        from ..viz.utilization import plot_utilization

        return plot_utilization(
            self.spans, ax=ax, window=window, device_table=self.devices, bins=bins, top_links=top_links
        )

    def plot_heatmap(self, ax=None, window=None, lane: str = "compute", links: bool = False, bins: int = 400):
        """Busy-fraction heatmap: one row per GPU (``lane``) or per busy link, one column per
        time bin — the view for large clusters."""
        from ..viz.aggregate import plot_heatmap

        return plot_heatmap(
            self.spans, ax=ax, window=window, lane=lane, device_table=self.devices, bins=bins, links=links
        )

    def plot_memory(self, ax=None, window=None):
        """Allocated memory over time per GPU with the capacity (dashed)."""
        from ..viz.memory import plot_memory

        return plot_memory(self.memory, self.devices, ax=ax, window=window, end_s=self._end())

    def plot_breakdown(self, ax=None):
        """Per stage, a stacked bar of compute / exposed communication / bubble / idle in the
        reported iteration (definitions in clustersim/viz/breakdown.py)."""
        from ..viz.breakdown import plot_breakdown

        return plot_breakdown(
            self.spans,
            self.devices,
            ax=ax,
            title=f"{self.scenario.get('name', '')}: where each stage's iteration goes",
        )

    def plot_generation(self):
        """Sequences a step and KV cache in use over time, of a generation run (``res.steps``)."""
        from ..viz.generation import plot_generation

        return plot_generation(self.steps)

    def plot_job(self, ax=None):
        """The job timeline of a run with faults or recovery (``res.job``): useful
        iterations, lost work, checkpoints, restarts, re-plans and a tick per fault."""
        from ..viz.job import plot_job

        if self.job is None:
            raise ValueError(
                "plot_job: this run has no job timeline (its scenario has no faults or recovery)"
            )
        if "component" in self.job.columns:  # failures drawn at rates: one row per failure
            from ..viz.fleet import plot_failures

            return plot_failures(self.job, ax=ax)
        return plot_job({self.scenario.get("name") or "job": self.job}, ax=ax)

    def power(self, bins: int = 60, window=None) -> pd.DataFrame:
        """Each GPU's mean power in ``bins`` bins of ``window`` (default: the whole run):
        columns ``time_s`` (bin centre), ``device``, ``watts`` (docs/energy.md)."""
        from ..energy import gpu_traces

        if window is None:
            window = (0.0, self._end())
        folded = str(self.summary.get("folded", "")).startswith("yes")
        traces = gpu_traces(self.spans, self.devices, window, folded)
        centers = window[0] + (np.arange(bins) + 0.5) * (window[1] - window[0]) / bins
        return pd.DataFrame(
            [
                (t, dev, w)
                for dev, tr in traces.items()
                for t, w in zip(centers, tr.binned(window[0], window[1], bins))
            ],
            columns=["time_s", "device", "watts"],
        )

    def plot_power(self, bins: int = 60, window=None, ax=None):
        """Power over time: each GPU's (or each stage's mean) with its TDP, and the GPUs'
        total (docs/energy.md)."""
        from ..energy import gpu_power
        from ..viz.power import plot_power

        tdp = {g: gpu_power(g).tdp_w for g in self.devices["gpu"].unique()}
        return plot_power(self.power(bins, window), self.devices, tdp, ax=ax)

    def breakdown(self) -> pd.DataFrame:
        """The numbers behind :meth:`plot_breakdown`: per stage, compute / exposed_comm /
        bubble / idle fractions of the reported iteration (they sum to 1)."""
        from ..viz.breakdown import stage_breakdown

        return stage_breakdown(self.spans, self.devices)

    def to_chrome_trace(self, path: str | Path, stage=None) -> Path:
        """Write a Chrome/Perfetto trace (open it in ui.perfetto.dev): a process per node, a
        track per GPU lane and link, flow arrows send → recv, memory and link counters
        (``stage``: a :class:`clustersim.output.Staging` it joins, as a bundle's file)."""
        from .chrome import write_chrome_trace

        return write_chrome_trace(
            self.spans, Path(path), devices=self.devices, memory=self.memory, stage=stage
        )

    def save(self, directory: str | Path, plots: bool = True) -> Path:
        """Write the result bundle into ``directory`` (see :func:`clustersim.trace.bundle.save_result`);
        ``cs.load_result(directory)`` reads it back."""
        from .bundle import save_result

        return save_result(self, directory, plots=plots)

    def _end(self) -> float:
        return float(self.spans["end_s"].max()) if len(self.spans) else 0.0

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"Result(iteration_time_s={s['iteration_time_s']:.6g}, bubble_fraction={s['bubble_fraction']:.4f}, "
            f"num_gpus={s['num_gpus']}, oom={s['oom']})"
        )


#: the Op attribute behind each span column of a Program op (its times are the recorder's)
_OP_ATTR = {f: "nbytes" if f == "bytes" else f for f in SPAN_FIELDS if f not in ("start_s", "end_s")}


def spans_frame(program, recorder) -> pd.DataFrame:
    """The spans DataFrame: executed Program ops (their static fields joined with the
    recorded times) plus the fabric's link spans, sorted by start time, then device, then
    lane (stable).

    Built column by column — one list per field, the order computed once on the arrays
    and every column taken by it — with the dtypes a frame built row by row infers."""
    if not recorder.ops and not recorder.spans:
        return pd.DataFrame.from_records([], columns=list(SPAN_FIELDS))
    cols = _op_columns(program, recorder.ops)
    for field, values in zip(SPAN_FIELDS, zip(*recorder.spans)):
        cols[field] += values
    arrays = {field: _column(values) for field, values in cols.items()}
    order = np.lexsort((_ranks(arrays["lane"]), _ranks(arrays["device"]), arrays["start_s"]))
    return pd.DataFrame({field: a[order] for field, a in arrays.items()})


def _op_columns(program, records) -> dict[str, list]:
    """Per span field (in :data:`SPAN_FIELDS` order), the values of the executed ops
    ``records`` ((op id, start, end) each)."""
    ops = program.ops
    ids, starts, ends = (list(c) for c in zip(*records)) if records else ([], [], [])
    run = ops if len(ids) == len(ops) else [ops[i] for i in ids]  # (all ran: the ids are 0 … n − 1)
    times = {"start_s": starts, "end_s": ends}
    cols = {f: times[f] if f in times else list(map(attrgetter(_OP_ATTR[f]), run)) for f in SPAN_FIELDS}
    cols["device"] = list(map(program.device_names.__getitem__, cols["device"]))
    return cols


def _column(values: list):
    """``values`` as an array of the dtype pandas infers for the list: NumPy's own where
    that is int64 or float64 (plain numbers, the common case, converted in C), else
    pandas' inference itself (strings, mixed kinds)."""
    if values and not isinstance(values[0], str):
        a = np.asarray(values)
        if a.dtype in (np.int64, np.float64):
            return a
    return pd.Series(values).array


def _ranks(values: np.ndarray) -> np.ndarray:
    """Each value's rank among the sorted distinct values (the sort key pandas uses)."""
    return pd.factorize(values, sort=True)[0]
