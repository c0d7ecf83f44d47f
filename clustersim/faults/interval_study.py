"""Goodput against the checkpoint interval, with the Young/Daly optimum (docs/fleet.md).

Each interval runs the same seeds (common random numbers: the curve's differences are
not the seeds'), and reports the mean goodput fraction with its standard error. The
**confidence band** of the best interval is every interval whose mean lies within
``z`` standard errors (of the two means' difference) of the best mean: where the
checkpoint stop δ ≪ MTBF, Young's √(2·δ·MTBF) should fall inside it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from .fleet import young_daly
from .renewal import FleetJob, simulate


def goodput_curve(fj: FleetJob, intervals_s, seeds: int = 50, seed: int = 0) -> pd.DataFrame:
    """One row per checkpoint interval (seconds of work): ``interval_s``,
    ``goodput_mean``, ``goodput_se`` over ``seeds`` jobs (seed, seed+1, …), and
    ``failures_mean``. ``fj`` is a :class:`FleetJob` (``res.fleet`` of a rate run)."""
    rows, per_seed = [], []
    for tau in intervals_s:
        job = dataclasses.replace(fj, interval_s=float(tau))
        outs = [simulate(job, seed + i) for i in range(seeds)]
        g = np.array([o.goodput_fraction for o in outs])
        per_seed.append(g)
        se = float(g.std(ddof=1) / math.sqrt(seeds)) if seeds > 1 else 0.0
        rows.append((float(tau), float(g.mean()), se, float(np.mean([o.failures for o in outs]))))
    df = pd.DataFrame(rows, columns=["interval_s", "goodput_mean", "goodput_se", "failures_mean"])
    df.attrs["per_seed"] = np.array(per_seed)
    return df


def best_band(curve: pd.DataFrame, z: float = 2.0) -> tuple[float, float]:
    """(lowest, highest) interval whose mean goodput is within ``z`` standard errors of the
    paired difference from the best interval's (module doc)."""
    g = curve.attrs["per_seed"]
    best = int(np.argmax(g.mean(axis=1)))
    diff = g[best] - g  # paired over the same seeds
    n = g.shape[1]
    se = diff.std(axis=1, ddof=1) / math.sqrt(n) if n > 1 else np.zeros(len(g))
    inside = curve["interval_s"][diff.mean(axis=1) <= z * se]
    return float(inside.min()), float(inside.max())


def young_daly_interval(fj: FleetJob) -> float:
    """√(2·δ·M) of ``fj``: its checkpoint stop δ and job MTBF M = 1 / Σ rates."""
    return young_daly(fj.stop_s, 1.0 / sum(fj.rates.values()))
