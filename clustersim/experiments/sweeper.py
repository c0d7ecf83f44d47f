"""``sweep(base, grid)``: simulate every combination of a grid, one row per run.

The base scenario plus one override dict per run (from :mod:`.grid`) are submitted to an
executor (:mod:`.executors`); rows are stored as they finish (:mod:`.store`), so a sweep
that is killed keeps what it finished and a restart with the same ``out`` skips those
runs. The returned DataFrame is in grid order (first axis slowest), whatever order the
runs finished in, so it is the same on any executor and any number of workers.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, wait
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import ClusterSimError, ScenarioError
from ..resolve import Job
from ..resolve.estimate import estimate
from ..scenario import Scenario, load_scenario
from ..scenario.loader import read_yaml
from ..simulate import checked
from . import grid as grids
from .executors import InProcessExecutor, make_executor
from .progress import Progress
from .runner import run_one
from .store import RunStore, frame, normalize


def base_raw(base: Scenario | str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """The raw (unresolved) dict of a base scenario, validated once (loaded, and checked
    by its compiler: :func:`clustersim.simulate.checked`). Overrides apply to this dict, so
    ``dp: auto`` stays auto when ``pp`` is swept."""
    return checked_base(base)[0]


def checked_base(base: Scenario | str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """(:func:`base_raw`, what :func:`~clustersim.simulate.checked` made of it: the checked
    Job of a plain job)."""
    if isinstance(base, Scenario):
        return dict(base._raw), checked(base)  # the user's own fields, before defaults were filled in
    raw = read_yaml(base) if isinstance(base, (str, Path)) else dict(base)
    return raw, checked(load_scenario(raw))


def announce(job: Any, runs: int) -> str:
    """``sweep: 12 runs; the base run ~… each`` — the count and the estimate of the base's
    checked ``job`` (:mod:`clustersim.resolve.estimate`; a multi-job or fault scenario has none)."""
    if not isinstance(job, Job):
        return f"sweep: {runs:,} runs"
    return f"sweep: {runs:,} runs; the base run is estimated at {estimate(job).line()} each"


def sweep(
    base: Scenario | str | Path | Mapping[str, Any],
    grid: Mapping[str, Sequence[Any]] | None = None,
    zip: Mapping[str, Sequence[Any]] | None = None,
    executor: Any = "local",
    workers: int | None = None,
    out: str | Path | None = None,
    *,
    scheduler: str | None = None,
    progress: bool | None = None,
    timeout: float | None = None,
    max_runs: int | None = None,
) -> pd.DataFrame:
    """Simulate ``base`` under every combination of ``grid`` (crossed) and ``zip`` (advanced
    together); return one row per run: the swept values, ``status``/``error``, the summary.

    ``base`` is a Scenario, a scenario path or dict, or a sweep file (``sweep: {base:,
    grid:, zip:}``) whose axes are merged under the ones given here. ``executor`` is
    ``"local"`` (processes; ``workers=1`` in-process), ``"dask"`` (with ``scheduler`` =
    ``"tcp://host:8786"`` or a local Dask cluster), a ``distributed.Client`` or any
    ``concurrent.futures.Executor``. With ``out`` (``.csv`` or ``.parquet``) rows are saved
    as runs finish and a rerun resumes. ``timeout`` (seconds, local executor only) stops
    a run that takes longer; its row has ``status = "timeout"`` and the others go on.
    Bad axes raise ScenarioError before any run, and so does a grid of more than
    ``max_runs`` runs (default :data:`~.grid.MAX_RUNS`; counted before it is expanded); with ``progress`` on, the count and
    the base run's estimate are the first line.
    """
    if isinstance(base, (str, Path)) and grids.is_sweep_file(base):
        base, file_grid, file_zip = grids.load_sweep_file(base)
        grid = {**file_grid, **(grid or {})}
        zip = {**file_zip, **(zip or {})} or None
    runs = grids.count(grid, zip)
    grids.check_count(runs, grids.MAX_RUNS if max_runs is None else max_runs)
    raw, job = checked_base(base)
    grids.check_axes(raw, grid, zip)
    _check_timeout(timeout, executor)  # every refusal before the first line of output
    if progress is not False:
        print(announce(job, runs), file=sys.stderr)
    return run_sweep(
        raw,
        grids.expand(grid, zip),
        executor=executor,
        workers=workers,
        out=out,
        scheduler=scheduler,
        progress=progress,
        timeout=timeout,
    )


def run_sweep(
    raw: dict[str, Any],
    runs: list[dict[str, Any]],
    executor: Any = "local",
    workers: int | None = None,
    out: str | Path | None = None,
    scheduler: str | None = None,
    progress: bool | None = None,
    desc: str = "runs",
    timeout: float | None = None,
) -> pd.DataFrame:
    """Run a list of override dicts against the raw base dict; the engine of :func:`sweep`
    and :func:`~clustersim.experiments.search.search`."""
    _check_timeout(timeout, executor)
    b_id = grids.base_id(raw)
    ids = [grids.run_id(o) for o in runs]
    unique = dict(zip(ids, runs))  # a run listed twice runs once
    store = RunStore(out, b_id)
    done = store.load()
    todo = [(i, o) for i, o in unique.items() if i not in done]
    lost = 0
    try:
        with Progress(len(unique), progress, desc, done=len(unique) - len(todo)) as bar:
            if todo:
                with make_executor(executor, workers, scheduler, runs=len(todo)) as ex:
                    lost = _drain(ex, raw, todo, (b_id, timeout), store, bar)
    finally:
        store.write(ids)
    if lost:
        raise ClusterSimError(
            f"{lost} runs were lost because the executor broke (a worker died); "
            f"{len(store.rows)} rows are saved — run the same sweep again to finish it"
        )
    columns = _columns(runs, [store.rows[i] for i in ids])
    return frame((store.rows[i] for i in ids), columns)


def _window(ex) -> int:
    """How many runs to keep submitted at once: enough to keep every worker busy, few
    enough that Ctrl-C or a crash leaves little half-done (in-process: one at a time)."""
    if isinstance(ex, InProcessExecutor):
        return 1
    workers = getattr(ex, "_max_workers", None)
    return 2 * workers if workers else 512


def _check_timeout(timeout: float | None, executor: Any) -> None:
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < 1e9:
        raise ScenarioError("timeout", timeout, "expected seconds > 0 (e.g. 600) or None for no limit")
    if executor != "local":  # the limit is a signal in each local worker (see runner)
        raise ScenarioError(
            "timeout", timeout, "needs executor='local' (a per-run time limit in each worker)"
        )


def _drain(ex, raw, todo, run: tuple[str, float | None], store: RunStore, bar: Progress) -> int:
    """Submit the runs (a window at a time), store rows as they complete; return how many
    were lost to a broken executor. ``run`` is (base id, per-run time limit)."""
    b_id, timeout = run
    queue = iter(todo)
    pending: dict[Any, tuple[str, dict[str, Any]]] = {}
    window, lost = _window(ex), 0

    def refill() -> None:
        for rid, overrides in queue:
            ids = {"run_id": rid, "base_id": b_id}
            pending[ex.submit(run_one, raw, overrides, ids, timeout)] = (rid, overrides)
            if len(pending) >= window:
                return

    try:
        refill()
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                rid, overrides = pending.pop(fut)
                exc = fut.exception()
                if isinstance(exc, BrokenExecutor):
                    lost += 1
                    continue
                if exc is not None:  # raised outside run_one (e.g. transport); still a row
                    row = {
                        **overrides,
                        "status": "error",
                        "error": f"{type(exc).__name__}: {exc}",
                        "run_id": rid,
                        "base_id": b_id,
                    }
                else:
                    row = fut.result()
                store.add(normalize(row))
                bar.update()
            if not lost:
                refill()
    finally:
        for fut in pending:
            fut.cancel()
    return lost + sum(1 for _ in queue)


def _columns(runs: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[str]:
    """Swept keys first (grid order), then status/error, then the summary, then ids."""
    cols: list[str] = []
    for o in runs:
        cols += [k for k in o if k not in cols]
    cols += [c for c in ("status", "error") if c not in cols]
    for row in rows:
        cols += [k for k in row if k not in cols and k not in ("run_id", "base_id")]
    return cols + ["run_id", "base_id"]
