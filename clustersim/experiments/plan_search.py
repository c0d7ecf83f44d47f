"""``search(base, gpus)``: which parallel plan should I run?

1. enumerate every valid plan for the GPU count(s) (:mod:`.plans`);
2. prune the plans whose estimated peak memory per GPU exceeds the GPU's capacity
   (:func:`.memory.tightest_fit`; each GPU against its own memory) — before simulating anything
   — and estimate each one's simulation time (:mod:`clustersim.resolve.estimate`); with
   progress shown, the plan count and the estimate are printed before the simulations start;
3. simulate the rest as one sweep (any executor; resumable with ``out``);
4. rank by the objective: ``throughput`` (samples/s, or tokens/s where the summary has
   it), ``time`` to train on ``budget`` samples/tokens, or ``cost`` (GPU-hours × price);
5. explain the winners: iteration time split into bubble and exposed communication,
   memory headroom, and where the groups land on nodes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import ScenarioError
from ..progress import elapsed_text
from ..resolve import resolve
from ..resolve.estimate import estimate
from ..scenario import Scenario, load_scenario
from ..scenario.loader import apply_overrides
from . import grid as grids
from .memory import tightest_fit
from .plans import label, placement, plan_space
from .progress import Progress
from .store import save_table
from .sweeper import base_raw, run_sweep

GIB = 2**30
OBJECTIVES = ("throughput", "time", "cost")


class SearchResult:
    """Every plan considered, ranked. ``table`` has one row per plan: its knobs, ``status``
    (``ok``, ``pruned``, ``oom``, ``error``, ``invalid``), estimated and simulated memory,
    the summary metrics, ``throughput``, the objective's column and ``rank`` (1 = best)."""

    def __init__(self, table: pd.DataFrame, objective: str, unit: str, wall_s: float):
        self.table, self.objective, self.unit, self.wall_s = table, objective, unit, wall_s

    @property
    def ranked(self) -> pd.DataFrame:
        """The simulated plans that fit, best first."""
        return self.table[self.table["rank"].notna()].sort_values("rank")

    @property
    def pruned(self) -> pd.DataFrame:
        """Plans dropped before simulation because they cannot fit in memory."""
        return self.table[self.table["status"] == "pruned"]

    @property
    def best(self) -> dict[str, Any]:
        """The winning plan's row (raises if no plan fits)."""
        if self.ranked.empty:
            raise ScenarioError("search", "no plan", "no plan fits in memory and simulates; see .table")
        return self.ranked.iloc[0].to_dict()

    def top(self, n: int = 5) -> pd.DataFrame:
        return self.ranked.head(n)

    def explain(self, n: int = 5) -> str:
        """The top ``n`` plans as a table, why the winner wins, and what was pruned."""
        from .report import explain

        return explain(self, n)

    def plot(self, ax=None):
        """Throughput vs peak memory with the Pareto front (see :mod:`.plots`)."""
        from .plots import plot_pareto

        return plot_pareto(self.ranked, ax=ax)

    def __repr__(self) -> str:
        return self.explain()


def _candidates(
    sc: Scenario,
    raw: dict[str, Any],
    counts: Sequence[int],
    knobs: dict[str, Any],
    memory_fraction: float,
    progress: bool | str | None = None,
) -> list[dict[str, Any]]:
    """One row per candidate plan: knobs, placement, memory estimate, pruned or not, and
    the estimated wall seconds of its simulation (``est_sim_s``,
    :mod:`clustersim.resolve.estimate`)."""
    rows = []
    plans = [(n, plan) for n in counts for plan in plan_space(sc, n, **knobs)]
    with Progress(len(plans), progress, "checking plans") as bar:
        for n, plan in plans:
            rows.append(_candidate(raw, n, plan, memory_fraction))
            bar.update()
    return rows


def _candidate(raw: dict[str, Any], n: int, plan: dict[str, Any], memory_fraction: float) -> dict[str, Any]:
    row: dict[str, Any] = {"gpus": n, "plan": label(plan), "run_id": grids.run_id(plan), **plan}
    try:
        cand = Scenario(apply_overrides(raw, plan))
    except ScenarioError as exc:
        return {**row, "status": "invalid", "error": str(exc)}
    job = resolve(cand)
    est, cap = tightest_fit(job)
    p = cand.parallel
    row.update(placement(p.tp, p.pp, cand.dp, cand.cluster.gpus_per_node))
    fits = est <= cap * memory_fraction
    row.update(
        est_memory_gib=est / GIB,
        capacity_gib=cap / GIB,
        est_sim_s=estimate(job).seconds,
        status="to-run" if fits else "pruned",
        error="" if fits else f"estimated {est / GIB:.1f} GiB > {cap * memory_fraction / GIB:.1f} GiB",
    )
    return row


def _plan_line(rows: list[dict[str, Any]], workers: int | None) -> str:
    """``search: 1,656 plans — 1,200 to simulate, 400 pruned, 56 invalid; ~12 min of
    simulation on 2 workers``: what the search is about to do."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    n = workers or os.cpu_count() or 1
    total = sum(r["est_sim_s"] for r in rows if r["status"] == "to-run")
    parts = ", ".join(f"{c:,} {'to simulate' if s == 'to-run' else s}" for s, c in counts.items())
    return f"search: {len(rows):,} plans — {parts}; ~{elapsed_text(total / n)} of simulation on {n} workers"


def search(
    base: Scenario | str | Path | Mapping[str, Any],
    gpus: int | Sequence[int] | None = None,
    *,
    objective: str = "throughput",
    budget: float | None = None,
    price_per_gpu_hour: float = 1.0,
    micro_batches: Sequence[int] | None = None,
    schedules: Sequence[str] | None = None,
    vary: Mapping[str, Sequence[Any]] | None = None,
    memory_fraction: float = 1.0,
    executor: Any = "local",
    workers: int | None = None,
    scheduler: str | None = None,
    out: str | Path | None = None,
    progress: bool | None = None,
    timeout: float | None = None,
) -> SearchResult:
    """Search the parallel plans of ``base`` on ``gpus`` GPUs (default: its cluster's) and
    rank them by ``objective``. ``budget`` (samples, or tokens when the model has a
    sequence length) is needed for ``time`` and gives ``cost`` a total; ``cost`` is
    GPU-hours × ``price_per_gpu_hour``. ``micro_batches``, ``schedules`` and ``vary``
    (dotted key → values) narrow or widen the space; ``memory_fraction`` < 1 keeps a
    safety margin. ``executor``/``workers``/``timeout`` are as for :func:`sweep`; with ``out`` the
    simulations are journaled as they finish (a rerun resumes) and the ranked table of
    every plan is written there at the end.
    """
    if objective not in OBJECTIVES:
        raise ScenarioError("objective", objective, f"known objectives: {', '.join(OBJECTIVES)}")
    if objective == "time" and budget is None:
        raise ScenarioError(
            "budget", budget, "objective 'time' needs a budget of samples (or tokens) to train on"
        )
    if not 0 < memory_fraction <= 1:
        raise ScenarioError("memory_fraction", memory_fraction, "expected a fraction in (0, 1]")
    t0 = time.perf_counter()
    raw = base_raw(base)
    sc = load_scenario(raw)
    if vary:
        grids.check_axes(raw, vary)
        vary = grids.as_axes(vary, "vary")
    counts = [sc.num_gpus] if gpus is None else [gpus] if isinstance(gpus, int) else list(gpus)
    knobs = {"micro_batches": micro_batches, "schedules": schedules, "vary": vary}
    rows = _candidates(sc, raw, counts, knobs, memory_fraction, progress)
    if progress or (progress is None and sys.stderr.isatty()):
        print(f"clustersim: {_plan_line(rows, workers)}", file=sys.stderr, flush=True)
    to_run = [{k: r[k] for k in r if "." in k} for r in rows if r["status"] == "to-run"]
    sims = run_sweep(
        raw,
        to_run,
        executor=executor,
        workers=workers,
        out=out,
        scheduler=scheduler,
        progress=progress,
        desc="plans",
        timeout=timeout,
    )
    table = _merge(rows, sims)
    table, unit = _rank(table, objective, budget, price_per_gpu_hour)
    if out is not None:  # the full ranked table replaces the simulated rows; the journal stays for resuming
        save_table(table, out)
    return SearchResult(table, objective, unit, time.perf_counter() - t0)


def _merge(rows: list[dict[str, Any]], sims: pd.DataFrame) -> pd.DataFrame:
    by_id = {r["run_id"]: r for r in sims.to_dict("records")} if len(sims) else {}
    out = []
    for row in rows:
        sim = by_id.get(row["run_id"])
        if sim is not None:
            status = sim["status"]
            if status == "ok" and sim.get("oom"):
                status = "oom"  # the estimate let it through but the simulation did not fit
            row = {
                **{k: v for k, v in sim.items() if k != "base_id"},
                **row,
                "status": status,
                "error": sim.get("error", ""),
            }
        out.append(row)
    return pd.DataFrame(out)


def _rank(
    table: pd.DataFrame, objective: str, budget: float | None, price: float
) -> tuple[pd.DataFrame, str]:
    """Add throughput / time / cost / headroom / rank columns; return (sorted table, unit)."""
    tokens = "tokens_per_s" in table.columns and table["tokens_per_s"].notna().any()
    unit = "tokens" if tokens else "samples"
    ok = table["status"] == "ok"
    if "samples_per_s" not in table.columns:  # nothing simulated
        table["throughput"] = float("nan")
    else:
        table["throughput"] = table["tokens_per_s" if tokens else "samples_per_s"].where(ok)
    if "peak_memory_gib" in table.columns:
        table["memory_headroom_gib"] = table["capacity_gib"] - table["peak_memory_gib"]
    gpu_hours_per_unit = table["gpus"] / 3600 / table["throughput"]
    if budget is not None:
        table["time_to_train_s"] = budget / table["throughput"]
    table["cost"] = gpu_hours_per_unit * price * (budget if budget is not None else 1e6)
    key = {"throughput": "throughput", "time": "time_to_train_s", "cost": "cost"}[objective]
    table["rank"] = table[key].where(ok).rank(method="first", ascending=objective != "throughput")
    # ranked plans first, then the ones that ran but failed, then pruned, then invalid
    order = table["rank"].fillna(len(table) + table["status"].map(_STATUS_ORDER).fillna(1))
    return table.iloc[order.argsort(kind="stable")].reset_index(drop=True), unit


_STATUS_ORDER = {"oom": 1, "error": 1, "pruned": 2, "invalid": 3}
