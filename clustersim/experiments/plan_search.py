"""``search(base, gpus)``: which parallel plan should I run?

1. enumerate every plan for the GPU count(s) (:mod:`.plans`: tp, cp, ep, pp, dp,
   micro-batch, schedule and its chunks, ZeRO, recompute, sequence parallelism, overlap
   options) and load each one — the loader's rules refuse what cannot run (``invalid``);
2. estimate every plan at analytical speed (:mod:`.plan_estimate`: iteration time by
   the schedule's order timed stage by stage, peak memory by that order) and prune the plans whose peak memory
   per GPU exceeds the GPU's capacity — before simulating anything;
3. simulate the ``top_k`` best by the estimate as one sweep (any executor; resumable with
   ``out``); with progress shown, the plan count and the simulations' wall-time estimate
   (:mod:`clustersim.resolve.estimate`) are printed before they start. ``time_budget``
   bounds the whole search: plans not reached in it are ``unexplored``, a simulation past
   it times out. ``top_k=None`` is the search before the estimate: its space (no ep, cp,
   TP overlap or new schedules unless asked for), every plan that fits simulated, its
   memory by the exact ledger replay (:func:`.memory.tightest_fit`);
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..compilers import check_job
from ..errors import ScenarioError
from ..progress import elapsed_text
from ..resolve import resolve
from ..resolve.estimate import estimate
from ..scenario import Scenario, load_scenario
from ..scenario.loader import apply_overrides
from . import grid as grids
from .memory import tightest_fit
from .plan_estimate import Estimator
from .plans import label, placement, plan_candidates
from .progress import Progress
from .store import save_table
from .sweeper import base_raw, run_sweep

GIB = 2**30
OBJECTIVES = ("throughput", "time", "cost")


class SearchResult:
    """Every plan considered, ranked. ``table`` has one row per plan: its knobs, ``status``
    (``ok``, ``pruned``, ``oom``, ``error``, ``invalid``; with the estimate also
    ``estimated`` — fits, not among the top-k — and ``unexplored`` — past the time budget),
    estimated and simulated memory, the estimate (``est_iteration_s``, ``est_throughput``,
    ``est_rank``), the summary metrics, ``throughput``, the objective's column and ``rank``
    (1 = best simulated)."""

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

    @property
    def estimate_gap(self) -> float | None:
        """How far the estimate's best plan simulates from the best simulated plan: 1 −
        its simulated objective / the best's (0: the estimate's top-1 is the DES-confirmed
        best); None without an estimate or when that plan did not simulate ok."""
        t = self.table
        if "est_rank" not in t.columns or self.ranked.empty:
            return None
        top = t[t["est_rank"] == t["est_rank"].min()].iloc[0]
        if top["status"] != "ok":
            return None
        key = {"throughput": "throughput", "time": "time_to_train_s", "cost": "cost"}[self.objective]
        best = self.ranked.iloc[0][key]
        return 1 - top[key] / best if self.objective == "throughput" else 1 - best / top[key]

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


class _SeenJobs:
    """The jobs of the plans met so far, by :func:`~clustersim.resolve.job.job_identity`:
    the text part hashed, the costs compared by value only among equal texts."""

    def __init__(self) -> None:
        self._costs: dict[str, list] = {}

    def first(self, identity: tuple) -> bool:
        """Whether no earlier plan had this job (and note it)."""
        text, costs = identity
        met = self._costs.setdefault(text, [])
        if any(c == costs for c in met):
            return False
        met.append(costs)
        return True


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
    rows, seen = [], _SeenJobs()
    plans = [(n, plan) for n in counts for plan in plan_candidates(sc, n, **knobs)]
    with Progress(len(plans), progress, "checking plans") as bar:
        for n, plan in plans:
            row, identity = _candidate(raw, n, plan, memory_fraction)
            if identity is None or seen.first(identity):  # (a later plan of the same job is that plan)
                rows.append(row)
            bar.update()
    return rows


def _loaded(raw: dict[str, Any], n: int, plan: dict[str, Any]) -> tuple[dict[str, Any], Scenario | None]:
    """A plan's row (knobs, and its placement once it loads) and its scenario — ``None``, with
    the row ``invalid``, where the loader refuses it."""
    row: dict[str, Any] = {"gpus": n, "plan": label(plan), "run_id": grids.run_id(plan), **plan}
    try:
        cand = Scenario(apply_overrides(raw, plan))
    except ScenarioError as exc:
        return _invalid(row, exc), None
    p = cand.parallel
    row.update(placement(p.tp, p.pp, cand.dp, cand.cluster.gpus_per_node))
    return row, cand


def _invalid(row: dict[str, Any], exc: ScenarioError) -> dict[str, Any]:
    """``row`` refused before it is estimated or run: by the loader, or by its compiler's
    check on the resolved job (:func:`clustersim.compilers.check_job`)."""
    return {**row, "status": "invalid", "error": str(exc)}


def _fit(row: dict[str, Any], memory: float, capacity: float, memory_fraction: float, **estimates) -> None:
    """Fill in a loaded plan's memory columns, its ``estimates`` and whether it fits
    (``to-run``) or is ``pruned``."""
    fits = memory <= capacity * memory_fraction
    row.update(
        est_memory_gib=memory / GIB,
        capacity_gib=capacity / GIB,
        **estimates,
        status="to-run" if fits else "pruned",
        error=""
        if fits
        else f"estimated {memory / GIB:.1f} GiB > {capacity * memory_fraction / GIB:.1f} GiB",
    )


def _candidate(
    raw: dict[str, Any], n: int, plan: dict[str, Any], memory_fraction: float
) -> tuple[dict[str, Any], tuple | None]:
    """A plan's row and its job's identity (None where it does not load or its compiler refuses it)."""
    row, cand = _loaded(raw, n, plan)
    if cand is None:
        return row, None
    job = resolve(cand)
    try:
        check_job(job)
    except ScenarioError as exc:
        return _invalid(row, exc), None
    est, cap = tightest_fit(job)
    _fit(row, est, cap, memory_fraction, est_sim_s=estimate(job).seconds)
    return row, job.identity


def _estimated(
    sc: Scenario,
    raw: dict[str, Any],
    counts: Sequence[int],
    knobs: dict[str, Any],
    memory_fraction: float,
    progress: bool | str | None,
    deadline: float,
) -> list[dict[str, Any]]:
    """One row per candidate plan with its estimate (:mod:`.plan_estimate`): knobs,
    placement, estimated memory, iteration time and throughput, pruned or not; plans not
    reached before ``deadline`` (``time.perf_counter``) are ``unexplored``."""
    rows, est, seen = [], Estimator(), _SeenJobs()
    plans = [(n, plan) for n in counts for plan in plan_candidates(sc, n, **knobs)]
    tokens = sc.model.kind == "transformer"
    with Progress(len(plans), progress, "estimating plans") as bar:
        for n, plan in plans:
            bar.update()
            if time.perf_counter() > deadline:
                row = {"gpus": n, "plan": label(plan), "run_id": grids.run_id(plan), **plan}
                rows.append({**row, "status": "unexplored", "error": "past the time budget"})
                continue
            row, cand = _loaded(raw, n, plan)
            if cand is not None:
                try:
                    est.check(cand, plan)
                except ScenarioError as exc:
                    row, cand = _invalid(row, exc), None
            if cand is None:
                rows.append(row)
                continue
            if not seen.first(est.identity(cand, plan)):  # e.g. selective recompute under flash
                continue
            rows.append(row)
            e = est.estimate(cand, plan)
            per_sample = cand.model.seq_len if tokens else 1
            _fit(
                row,
                e.memory_bytes,
                e.capacity_bytes,
                memory_fraction,
                est_iteration_s=e.iteration_s,
                est_bubble_s=e.bubble_s,
                est_comm_s=e.comm_s,
                est_throughput=cand.training.global_batch * per_sample / e.iteration_s,
            )
    return rows


def _top_k(rows: list[dict[str, Any]], raw: dict[str, Any], objective: str, top_k: int) -> None:
    """Rank the plans that fit by the estimated objective (``est_rank``); the best
    ``top_k`` stay ``to-run`` (with their simulations' wall-time estimate), the rest
    become ``estimated``."""
    fit = [r for r in rows if r["status"] == "to-run"]
    if objective == "cost":
        fit.sort(key=lambda r: r["gpus"] / r["est_throughput"])
    else:  # throughput, or time to train a budget: the same order
        fit.sort(key=lambda r: -r["est_throughput"])
    for i, r in enumerate(fit):
        r["est_rank"] = i + 1
        if i >= top_k:
            r["status"] = "estimated"
            continue
        r["est_sim_s"] = estimate(
            resolve(Scenario(apply_overrides(raw, {k: r[k] for k in r if "." in k})))
        ).seconds


def _plan_line(rows: list[dict[str, Any]], workers: int | None, elapsed: float = 0.0) -> str:
    """``search: 1,656 plans — 1,200 to simulate, 400 pruned, 56 invalid; ~12 min of
    simulation on 2 workers``: what the search is about to do."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    n = workers or os.cpu_count() or 1
    total = sum(r["est_sim_s"] for r in rows if r["status"] == "to-run")
    parts = ", ".join(f"{c:,} {'to simulate' if s == 'to-run' else s}" for s, c in counts.items())
    if "estimated" in counts:
        parts = f"estimated in {elapsed_text(elapsed)}: " + parts
    return f"search: {len(rows):,} plans — {parts}; ~{elapsed_text(total / n)} of simulation on {n} workers"


@dataclass(frozen=True)
class SearchSpace:
    """What :func:`search` tries beyond the plans' own knobs: ``micro_batches``,
    ``schedules`` and ``vary`` (dotted key → values) narrow or widen the space (None: the
    defaults of :func:`.plans.plan_candidates`); ``memory_fraction`` < 1 keeps a safety
    margin of each GPU's memory."""

    micro_batches: Sequence[int] | None = None
    schedules: Sequence[str] | None = None
    vary: Mapping[str, Sequence[Any]] | None = None
    memory_fraction: float = 1.0


@dataclass(frozen=True)
class Execution:
    """Where and how the simulations of a :func:`search` run, as for :func:`.sweeper.sweep`:
    ``executor`` (``"local"``, ``"dask"`` or an Executor), ``workers``, the Dask
    ``scheduler``, ``progress`` (None: shown on a terminal) and the per-run ``timeout`` (s)."""

    executor: Any = "local"
    workers: int | None = None
    scheduler: str | None = None
    progress: bool | None = None
    timeout: float | None = None


def search(
    base: Scenario | str | Path | Mapping[str, Any],
    gpus: int | Sequence[int] | None = None,
    *,
    objective: str = "throughput",
    budget: float | None = None,
    price_per_gpu_hour: float = 1.0,
    space: SearchSpace = SearchSpace(),
    execution: Execution = Execution(),
    out: str | Path | None = None,
    top_k: int | None = 5,
    time_budget: float | None = None,
) -> SearchResult:
    """Search the parallel plans of ``base`` on ``gpus`` GPUs (default: its cluster's) and
    rank them by ``objective``. ``budget`` (samples, or tokens when the model has a
    sequence length) is needed for ``time`` and gives ``cost`` a total; ``cost`` is
    GPU-hours × ``price_per_gpu_hour``. ``space`` (:class:`SearchSpace`) narrows or widens
    the plans tried and keeps a memory margin; ``execution`` (:class:`Execution`) says
    where the simulations run; with ``out`` the
    simulations are journaled as they finish (a rerun resumes) and the ranked table of
    every plan is written there at the end. ``top_k``: how many of the estimate's best
    plans to simulate (None: the search before the estimate — its space, ``plans.plan_space(…,
    classic=True)``: no ep, cp, TP overlap or this wave's schedules unless asked for by
    the space's ``schedules``/``vary``; every plan that fits simulated, pruned by the exact memory
    replay); ``time_budget``: wall seconds for the whole search
    (module docstring).
    """
    memory_fraction, vary, progress = space.memory_fraction, space.vary, execution.progress
    if objective not in OBJECTIVES:
        raise ScenarioError("objective", objective, f"known objectives: {', '.join(OBJECTIVES)}")
    if objective == "time" and budget is None:
        raise ScenarioError(
            "budget", budget, "objective 'time' needs a budget of samples (or tokens) to train on"
        )
    if not 0 < memory_fraction <= 1:
        raise ScenarioError("memory_fraction", memory_fraction, "expected a fraction in (0, 1]")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
        raise ScenarioError("top_k", top_k, "expected a whole number of plans ≥ 0, or None for all")
    if time_budget is not None and not time_budget > 0:
        raise ScenarioError("time_budget", time_budget, "expected seconds > 0")
    t0 = time.perf_counter()
    raw = base_raw(base)
    sc = load_scenario(raw)
    if vary:
        grids.check_axes(raw, vary)
        vary = grids.as_axes(vary, "vary")
    counts = [sc.num_gpus] if gpus is None else [gpus] if isinstance(gpus, int) else list(gpus)
    knobs = {"micro_batches": space.micro_batches, "schedules": space.schedules, "vary": vary}
    deadline = t0 + (time_budget if time_budget is not None else float("inf"))
    if top_k is None:  # the search before the estimate: its space, its exact memory replay
        rows = _candidates(sc, raw, counts, {**knobs, "classic": True}, memory_fraction, progress)
    else:
        rows = _estimated(sc, raw, counts, knobs, memory_fraction, progress, deadline)
        _top_k(rows, raw, objective, top_k)
    if not rows:
        raise _no_plans(sc, counts)
    if progress or (progress is None and sys.stderr.isatty()):
        line = _plan_line(rows, execution.workers, time.perf_counter() - t0)
        print(f"clustersim: {line}", file=sys.stderr, flush=True)
    to_run = [{k: r[k] for k in r if "." in k} for r in rows if r["status"] == "to-run"]
    timeout = execution.timeout
    if time_budget is not None:  # what is left of the budget bounds each simulation
        left = deadline - time.perf_counter()
        to_run = to_run if left > 0 else []
        if to_run and execution.executor == "local":  # (a per-run limit exists on local workers only)
            timeout = left if timeout is None else min(timeout, left)
    sims = run_sweep(
        raw,
        to_run,
        executor=execution.executor,
        workers=execution.workers,
        out=out,
        scheduler=execution.scheduler,
        progress=progress,
        desc="plans",
        timeout=timeout,
    )
    table = _merge(rows, sims)
    table, unit = _rank(table, objective, budget, price_per_gpu_hour)
    if out is not None:  # the full ranked table replaces the simulated rows; the journal stays for resuming
        save_table(table, out)
    return SearchResult(table, objective, unit, time.perf_counter() - t0)


def _no_plans(sc: Scenario, counts: list[int]) -> ScenarioError:
    """The error of a search space without a single plan: what the plans must satisfy and
    what to change (an empty table has nothing to rank)."""
    tr = sc.training
    return ScenarioError(
        "gpus",
        counts[0] if len(counts) == 1 else counts,
        f"no parallel plan splits this job onto {' or '.join(f'{n:,}' for n in counts)} GPUs: "
        f"training.global_batch = {tr.global_batch} must be a multiple of micro_batch × dp "
        "(dp = GPUs / (tp × cp × pp)), and tp must split the model (heads, vocabulary) within a node; "
        "accepted: fewer GPUs, a larger training.global_batch, or more micro_batches/schedules "
        "in the search space",
    )


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
    if "est_rank" in table.columns:  # the estimated plans by their estimate
        order = order + table["est_rank"].fillna(0).where(table["rank"].isna(), 0) / (len(table) + 1)
    return table.iloc[order.argsort(kind="stable")].reset_index(drop=True), unit


_STATUS_ORDER = {
    "oom": 1,
    "error": 1,
    "timeout": 1,
    "estimated": 1.5,
    "pruned": 2,
    "unexplored": 2.5,
    "invalid": 3,
}
