"""Per-GPU power over time from a run's spans, and its energy (docs/energy.md).

Every GPU draws its idle power all the time; each of its ops adds its dynamic power
(:mod:`.gpu_power`) from its start to its end; the sum is capped at the TDP. The result
is piecewise constant, so its energy is exact: Σ watts × duration of each piece.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .gpu_power import GPUPower

#: compute-lane ops that are host time (the framework's work, kernel launches and the
#: stream's wait for the host: clustersim.workload.pass_costs, .segments): no kernel runs
HOST_OPS = ("framework", "launch")


class PowerTrace:
    """One GPU's piecewise-constant power inside ``window``: ``edges`` (n + 1 times) and
    ``watts`` (n levels)."""

    def __init__(self, edges: np.ndarray, watts: np.ndarray):
        self.edges, self.watts = edges, watts

    @classmethod
    def idle(cls, gp: GPUPower, window: tuple[float, float]) -> PowerTrace:
        return cls(np.array(window, dtype=float), np.array([gp.idle_w]))

    @classmethod
    def of_spans(cls, spans: pd.DataFrame, gp: GPUPower, window: tuple[float, float]) -> PowerTrace:
        """The trace of one GPU's ``spans`` (its compute and communication ops)."""
        t0, t1 = window
        s = np.clip(spans["start_s"].to_numpy(float), t0, t1)
        e = np.clip(spans["end_s"].to_numpy(float), t0, t1)
        dur = spans["end_s"].to_numpy(float) - spans["start_s"].to_numpy(float)
        compute = (spans["lane"] == "compute").to_numpy()
        host = spans["name"].astype(str).str.startswith(HOST_OPS).to_numpy()  # the GPU waits
        flops, nbytes = spans["flops"].to_numpy(float), spans["bytes"].to_numpy(float)
        dyn = np.where(host, 0.0, np.where(compute, gp.compute_w(flops, dur), gp.transfer_w(nbytes, dur)))
        times = np.concatenate([s, e, [t0, t1]])
        steps = np.concatenate([dyn, -dyn, [0.0, 0.0]])
        order = np.argsort(times, kind="stable")
        times, level = times[order], np.cumsum(steps[order])
        edges = np.unique(times)
        # the level after every instant: the cumulative sum at that instant's last event
        idx = np.searchsorted(times, edges, side="right") - 1
        last = np.clip(level[idx][:-1], 0.0, gp.dynamic_w)  # (float rounding may dip below 0)
        return cls(edges, gp.idle_w + last)

    def energy_j(self) -> float:
        return float(np.sum(self.watts * np.diff(self.edges)))

    def binned(self, t0: float, t1: float, bins: int) -> np.ndarray:
        """Mean watts in each of ``bins`` equal bins of [t0, t1] (inside the trace)."""
        cum = np.concatenate([[0.0], np.cumsum(self.watts * np.diff(self.edges))])
        at = np.interp(np.linspace(t0, t1, bins + 1), self.edges, cum)
        return np.diff(at) / ((t1 - t0) / bins)
