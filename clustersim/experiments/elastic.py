"""Elastic re-layout: the best plan at each level of available GPUs, the cost of switching
between them, and the run's goodput against a fixed layout (docs/rlhf.md, "Elastic").

Availability is a timeline of (time, GPUs) rows — from t on, that many GPUs until the next
row — and the run ends at ``horizon_s``; or it is drawn from the fleet's failure rates
(:func:`clustersim.faults.availability.availability_from_failures`). For each level the plan search
(:func:`.plan_search.search`) picks the best plan on that many GPUs. Where the level
changes, the job switches: each GPU of the new plan needs the training state (weights and
optimizer states, the checkpoint's bytes per parameter) of its (stage, TP rank); it keeps
what its old role holds and receives the rest over the fabric from a surviving holder
(:func:`clustersim.rlhf.layout.weight_moves`; GPUs 0 … n − 1 survive a shrink to n). If
some part of the state has no surviving holder, the job restores the checkpoint instead
(its bytes over ``restore_bandwidth``). Either way it then pays ``warmup_s`` (process
groups, compilation, the first iteration). A switch longer than its interval takes the
whole interval. The fixed layout runs the best plan of the lowest level throughout, never
switching; goodput is samples trained over the horizon.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import pandas as pd

from ..compilers import check_job
from ..errors import ScenarioError, shorten
from ..faults.availability import availability_from_failures
from ..faults.replan import migration_time
from ..faults.state import rank_checkpoint_bytes
from ..reader import read_text
from ..resolve import resolve
from ..rlhf.layout import Layout, held, overlap, param_units, training_layout, weight_moves
from ..scenario import load_scenario
from ..workload.resolve import resolve_transformer
from .plan_search import Execution, search
from .sweeper import base_raw

FIELD = "availability"


def read_availability(source: str | Path | list[tuple[float, int]]) -> list[tuple[float, int]]:
    """The (time s, GPUs) rows of a CSV file (header ``time_s,gpus``) or a list: the first
    at t = 0, times increasing, GPUs whole numbers ≥ 1; refused naming ``availability``."""
    if isinstance(source, (str, Path)):
        reader = csv.reader(io.StringIO(read_text(str(source), FIELD)))
        header = next(reader, None)
        if header is None or [c.strip() for c in header] != ["time_s", "gpus"]:
            raise ScenarioError(FIELD, str(source), "expected the header time_s,gpus")
        try:
            rows = [(float(t), int(g)) for t, g in reader]
        except ValueError as exc:
            raise ScenarioError(
                FIELD, str(source), f"line {reader.line_num}: {shorten(str(exc), 120)}"
            ) from None
    else:
        try:
            rows = [(float(t), int(g)) for t, g in source]
        except (TypeError, ValueError) as exc:
            raise ScenarioError(FIELD, shorten(repr(source), 120), f"(time s, GPUs) pairs: {exc}") from None
    if not rows or rows[0][0] != 0.0:
        raise ScenarioError(FIELD, rows[:1], "the first row must be at time 0")
    for (t0, _), (t1, _) in zip(rows, rows[1:]):
        if not t1 > t0 or not math.isfinite(t1):
            raise ScenarioError(FIELD, t1, f"times must increase and be finite (after {t0})")
    if any(g < 1 or g > 10_000_000 for _, g in rows):
        raise ScenarioError(FIELD, [g for _, g in rows], "GPU counts from 1 to 10,000,000")
    return rows


@dataclass(frozen=True)
class Level:
    """The best plan on ``gpus`` GPUs: its overrides, its throughput and its checked Job."""

    gpus: int
    overrides: dict
    samples_per_s: float
    job: object


def best_level(raw: dict, gpus: int, top_k: int) -> Level:
    """The search's best plan of ``raw`` on ``gpus`` GPUs (ranked by throughput)."""
    best = search(raw, gpus=gpus, top_k=top_k, execution=Execution(workers=1, progress=False)).best
    over = {k: v for k, v in best.items() if "." in k and not (isinstance(v, float) and math.isnan(v))}
    sc = load_scenario(raw, over)
    rate = sc.training.global_batch / best["iteration_time_s"]
    return Level(gpus, over, rate, check_job(resolve(sc)))


def switch_cost(base, old: Level, new: Level, restore_bandwidth: float) -> tuple[float, float, str]:
    """(seconds, bytes, how) of switching from ``old`` to ``new`` (module doc; without
    warm-up): ``reshard`` over the fabric, or ``restore`` from the checkpoint."""
    cfg = resolve_transformer(base.model)
    sizes = param_units(cfg)
    checkpoint = float(rank_checkpoint_bytes(old.job).sum())
    per_param = checkpoint / sum(sizes)
    was = training_layout(old.job.plan)
    keep = [i for i, g in enumerate(was.gpus) if g < new.gpus]
    alive = Layout(tuple(was.gpus[i] for i in keep), tuple(was.roles[i] for i in keep), was.tp, was.pp)
    now = training_layout(new.job.plan)
    roles = set(alive.roles)
    for need in set(now.roles):
        if sum((overlap(sizes, now, need, alive, r) for r in roles), Fraction(0)) != held(sizes, now, need):
            return checkpoint / restore_bandwidth, checkpoint, "restore"
    moves = weight_moves(sizes, alive, now, 1, base.cluster.gpus_per_node)
    priced = [(s, d, int(b * Fraction(per_param))) for s, d, b in moves]
    nodes = -(-max(old.gpus, new.gpus) // base.cluster.gpus_per_node)
    return migration_time(base, nodes, priced), float(sum(b for _, _, b in priced)), "reshard"


@dataclass(frozen=True)
class ElasticResult:
    """``timeline``: one row per switch and per stretch of training (start_s, end_s, gpus,
    kind ``switch``/``run``, plan, seconds of cost, bytes, samples); ``summary``: the
    elastic and the fixed layout's goodput (samples/s) and the switches' count and cost."""

    timeline: pd.DataFrame
    summary: dict


def elastic(
    base,
    availability,
    horizon_s: float,
    restore_bandwidth: float,
    warmup_s: float = 0.0,
    top_k: int = 1,
    choose=best_level,
):
    """Run ``base`` (a training scenario) elastically over ``availability`` until ``horizon_s``
    (module doc); returns an :class:`ElasticResult`. ``availability``: (time, GPUs) pairs, a
    CSV file, or ``{"failures": {...}, "seed": s}`` — drawn over the horizon from those
    ``recovery.failures`` fields (absent: ``base``'s own) with seed ``s`` (absent: theirs).
    ``choose(raw, gpus, top_k)`` picks each level's :class:`Level` (default: the plan
    search's best)."""
    if isinstance(availability, dict):
        if not set(availability) <= {"failures", "seed"}:
            raise ScenarioError(
                FIELD, sorted(availability), "drawn availability takes the keys failures, seed"
            )
        availability = availability_from_failures(base, horizon_s, **availability)
    rows = read_availability(availability)
    if not (math.isfinite(horizon_s) and horizon_s > rows[-1][0]):
        raise ScenarioError("horizon_s", horizon_s, f"finite seconds after the last row ({rows[-1][0]})")
    for name, value in (("restore_bandwidth", restore_bandwidth), ("warmup_s", warmup_s)):
        if not (math.isfinite(value) and value >= 0) or (name == "restore_bandwidth" and value == 0):
            raise ScenarioError(name, value, "a finite number ≥ 0 (bandwidth > 0)")
    raw = base_raw(base)
    sc = load_scenario(raw)
    levels = {g: choose(raw, g, top_k) for g in sorted({g for _, g in rows})}
    ends = [t for t, _ in rows[1:]] + [horizon_s]
    out, prev = [], None
    for (start, gpus), end in zip(rows, ends):
        level = levels[gpus]
        if prev is not None and prev.gpus != gpus:
            secs, nbytes, how = switch_cost(sc, prev, level, restore_bandwidth)
            cost = secs + warmup_s
            stop = min(end, start + cost)
            out.append((start, stop, gpus, "switch", how, cost, nbytes, 0.0))
            start = stop
        if end > start:
            out.append(
                (start, end, gpus, "run", _label(level), 0.0, 0.0, level.samples_per_s * (end - start))
            )
        prev = level
    cols = ["start_s", "end_s", "gpus", "kind", "plan", "cost_s", "bytes", "samples"]
    timeline = pd.DataFrame(out, columns=cols)
    fixed = levels[min(levels)]
    switches = timeline[timeline["kind"] == "switch"]
    summary = {
        "goodput_samples_per_s": float(timeline["samples"].sum()) / horizon_s,
        # (as the elastic sum is formed, so one level without a switch is the same float)
        "fixed_goodput_samples_per_s": fixed.samples_per_s * horizon_s / horizon_s,
        "fixed_gpus": fixed.gpus,
        "switches": len(switches),
        "switch_cost_s": float(switches["cost_s"].sum()),
        "levels": {g: (lv.samples_per_s, _label(lv)) for g, lv in levels.items()},
    }
    return ElasticResult(timeline, summary)


def _label(level: Level) -> str:
    """``tp2·pp1·dp4`` of a level's plan."""
    p = level.job.plan
    return f"tp{p.tp}·pp{p.pp}·dp{p.dp}"
