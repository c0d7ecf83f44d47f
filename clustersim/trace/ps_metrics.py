"""Parameter-server metrics, from the spans alone (definitions in docs/metrics.md).

* A worker's iteration i ends when its last push of iteration i has arrived at the
  server; its *period* is the mean time between the ends of its first and its last
  iteration ((T(I−1) − T(0)) / (I − 1); with one iteration, T(0) − its first op's start).
* Throughput: every worker contributes its batch share per period, so samples/s =
  Σ_w (global_batch / workers) / period_w; ``iteration_time_s`` = global_batch / that,
  the harmonic mean of the periods (every period alike in sync mode).
* Staleness of a gradient (worker w, key, iteration i): how many updates of that key
  (server, tensor) the server applied between the read (the start of the pull that sent
  w its parameters for iteration i) and the start of the update that applies w's
  gradient; an update counts when it ends in (read, apply start]. A sync update counts
  once and applies every worker's gradient to the version they all read: staleness 0.
  In async mode w's own previous update is always in its read; with staleness bound s
  the others' updates in between are of their iterations i − s … i + s, so at most
  (2s + 1)·(n − 1) for n workers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..program import APPLY, PULL, PUSH, UPDATE, server_lane_worker

STALENESS_COLUMNS = ["worker", "server", "tensor", "iteration", "staleness"]


def worker_periods(spans: pd.DataFrame) -> pd.Series:
    """Per worker device (``gpu{w}``): its period in seconds (module docstring)."""
    pushes = spans[spans["lane"] == PUSH]
    ends = pushes.groupby(["device", "iteration"])["end_s"].max()
    out = {}
    for dev, per_it in ends.groupby(level="device"):
        t = per_it.droplevel("device").sort_index()
        if len(t) > 1:
            out[dev] = (t.iloc[-1] - t.iloc[0]) / (len(t) - 1)
        else:
            out[dev] = t.iloc[0] - float(spans.loc[spans["device"] == dev, "start_s"].min())
    return pd.Series(out, name="period_s")


def harmonic_period(periods: pd.Series) -> float:
    """The harmonic mean of the workers' periods: the PS iteration time
    (global_batch / samples per second)."""
    return float(len(periods) / np.sum(1.0 / periods.to_numpy()))


def gradient_staleness(spans: pd.DataFrame) -> pd.DataFrame:
    """One row per (worker, key, iteration): its staleness (module docstring)."""
    lane = spans["lane"].astype(str)
    names = lane.unique()
    reader = {
        ln: server_lane_worker(ln, PULL) for ln in names
    }  # a server's pull lane → the worker it sends to
    applier = {ln: server_lane_worker(ln, APPLY) for ln in names}  # an async update lane → whose gradients
    reads = spans[lane.map(reader).notna()]
    updates = spans[lane.map(applier).notna() | (lane == UPDATE)]
    reads_of = {key: df for key, df in reads.groupby(["device", "stage"], sort=False)}
    rows = []
    for (server, tensor), ups in updates.groupby(["device", "stage"], sort=False):
        ends = np.sort(ups["end_s"].to_numpy())
        sync = ups[ups["lane"] == UPDATE].set_index("iteration")["start_s"]
        own = {
            (applier[ln], it): (s, e)
            for ln, it, s, e in ups.loc[
                ups["lane"] != UPDATE, ["lane", "iteration", "start_s", "end_s"]
            ].itertuples(index=False)
        }
        for ln, it, read in reads_of[server, tensor][["lane", "iteration", "start_s"]].itertuples(
            index=False
        ):
            w = reader[ln]
            start, end = (sync[it], None) if it in sync.index else own[w, it]
            n = np.searchsorted(ends, start, "right") - np.searchsorted(ends, read, "right")
            if end is not None and read < end <= start:  # a zero-length update ends where it starts
                n -= 1
            rows.append((f"gpu{w}", server, int(tensor), int(it), int(n)))
    return pd.DataFrame(rows, columns=STALENESS_COLUMNS)


def ps_summary(spans: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """Summary entries (staleness mean and max) and per-worker rows (period, staleness)."""
    st = gradient_staleness(spans)
    per = st.groupby("worker")["staleness"].agg(["mean", "max"])
    table = pd.DataFrame(
        {
            "period_s": worker_periods(spans),
            "staleness_updates_mean": per["mean"],
            "staleness_updates_max": per["max"],
        }
    )
    # named for their unit: server updates, not the iterations parameter_server.staleness bounds
    return {
        "staleness_updates_mean": float(st["staleness"].mean()),
        "staleness_updates_max": int(st["staleness"].max()),
    }, table
