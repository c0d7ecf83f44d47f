"""Metric definitions, computed from the spans DataFrame alone (see docs/metrics.md).

* iteration window k: from the first start to the last end of GPU spans of iteration k;
  the reported iteration time is the last simulated iteration's (steady state);
* flush-free schedules overlap iterations: the reported window is the period between the
  ends of iterations k − 1 and k, for the last k before the final drain
  (:func:`flush_free_iteration`, :func:`training_window`);
* busy time of a lane in a window: total length of its spans clipped to the window
  (spans on one lane never overlap);
* exposed communication fraction: time inside the iteration when a device's compute
  lane is idle while one of its communication lanes is busy, / iteration time, averaged
  over devices; split by what the communication is for (:data:`COMM_OF_LANE`): tensor,
  context, expert, pipeline or data parallelism, each instant counted once, for the
  first of them (in that order) whose lane is busy;
* bubble fraction of a device: the time its compute lane is idle with no communication
  lane busy either — it waits for work from another GPU (a pipeline neighbour, a slower
  peer) — / iteration time, in the reported iteration: 1 − compute − exposed
  communication; of a stage: the mean over its devices; reported as mean and max over
  stages.

All come from one per-GPU :func:`device_breakdown` of the iteration.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def gpu_spans(spans: pd.DataFrame) -> pd.DataFrame:
    return spans[spans["lane"] != "link"]


def iteration_window(spans: pd.DataFrame, iteration: int | None = None) -> tuple[float, float]:
    """(start, end) of an iteration (default: the last one) over all GPU spans."""
    g = gpu_spans(spans)
    k = int(g["iteration"].max()) if iteration is None else iteration
    it = g[g["iteration"] == k]
    return float(it["start_s"].min()), float(it["end_s"].max())


def flush_free_iteration(iterations: int, m: int, p: int) -> int | None:
    """The iteration k whose period (end of k − 1 → end of k) a flush-free schedule reports.

    Of the run's N = m × ``iterations`` micro-batches the last p − 1 finish in the final
    drain: the later stages have stopped, so a window there shows a bubble (and, on
    uneven stages, a period) that the steady state does not have. With three or more
    iterations k is the last iteration before the final one whose micro-batches all
    finish before the drain: (k + 1)·m − 1 ≤ N − p. With one iteration it is 0 (that
    whole iteration); with two it is 1, the drain included (for m ≥ p − 1 the drain is at
    most the iteration's last p − 1 micro-batches). None where no period is free of the
    drain and the reported iteration would lie wholly inside it: m < p − 1 and fewer
    than :func:`min_flush_free_iterations`."""
    if iterations <= 2:
        return iterations - 1 if iterations == 1 or m >= p - 1 else None
    k = min(iterations - 2, (iterations * m - p + 1) // m - 1)
    return k if k >= 1 else None


def min_flush_free_iterations(m: int, p: int) -> int:
    """The fewest iterations whose run has a period before the final drain: 2 + ⌈(p − 1)/m⌉."""
    return 2 + -(-(p - 1) // m)


def training_window(spans: pd.DataFrame, iterations: int, flush: bool, m: int, p: int) -> tuple[float, float]:
    """The reported iteration of a training run: the last iteration's window, or for a
    flush-free schedule over several iterations the period of :func:`flush_free_iteration`
    (``m`` micro-batches per iteration, ``p`` stages)."""
    if flush or iterations == 1:
        return iteration_window(spans)
    k = flush_free_iteration(iterations, m, p)
    if k is None:
        raise ValueError(
            f"{iterations} iterations of {m} micro-batches on {p} stages all end in the final drain; "
            f"simulate at least {min_flush_free_iterations(m, p)}"
        )
    return iteration_window(spans, k - 1)[1], iteration_window(spans, k)[1]


def busy_time(starts: np.ndarray, ends: np.ndarray, t0: float, t1: float) -> float:
    """Union length of intervals clipped to [t0, t1]."""
    s = np.clip(starts, t0, t1)
    e = np.clip(ends, t0, t1)
    keep = e > s
    s, e = s[keep], e[keep]
    if len(s) == 0:
        return 0.0
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    # each interval adds only what reaches past every earlier interval's end
    reach = np.maximum.accumulate(e)
    prev = np.r_[s[0], reach[:-1]]
    return float(np.clip(e - np.maximum(s, prev), 0.0, None).sum())


#: where a GPU's time inside the iteration goes (fractions summing to 1)
PARTS = ("compute", "exposed_comm", "bubble", "idle")

#: the parallelism a communication lane serves; exposed time is attributed in this order
#: (the first kind busy at an instant takes it), other lanes count in exposed_comm only
COMM_KINDS = ("tp", "cp", "ep", "pp", "dp")
COMM_OF_LANE = {
    "tp": "tp",
    "tp send": "tp",  # TP overlap's userbuffers transfers (clustersim.compilers.pipeline.tp_overlap)
    "tp recv": "tp",
    "cp": "cp",
    "cp send": "cp",  # ring attention's K/V transfers (clustersim.compilers.pipeline.context_parallel)
    "cp recv": "cp",
    "ep": "ep",
    "send": "pp",
    "recv": "pp",
    "comm": "dp",
    "gather": "dp",
    "gather copy": "dp",  # FSDP2's all-gather copy-in stream (clustersim.compilers.pipeline.fsdp2)
    "replicate": "dp",  # HSDP's all-reduce stream
    "push": "dp",
    "pull": "dp",
}


def _groups(df: pd.DataFrame, keys: list[str]):
    """``(key, row positions)`` of each group of ``df`` by ``keys``, in order of first
    appearance — the positions index NumPy columns, so no DataFrame is built per group."""
    return df.groupby(keys if len(keys) > 1 else keys[0], sort=False).indices.items()


def device_breakdown(spans: pd.DataFrame, window: tuple[float, float] | None = None) -> pd.DataFrame:
    """One row per GPU, the fractions of :data:`PARTS` inside ``window`` (default: the
    reported iteration): ``compute`` — compute-lane busy; ``exposed_comm`` — a
    communication lane busy while compute is idle, and its split ``exposed_<kind>`` over
    :data:`COMM_KINDS`; ``bubble`` — neither, before the GPU's last span ends; ``idle`` —
    after it. ``bubble + idle`` is the GPU's bubble fraction."""
    t0, t1 = window if window is not None else iteration_window(spans)
    length = t1 - t0
    g = gpu_spans(spans)
    starts, ends = g["start_s"].to_numpy(), g["end_s"].to_numpy()
    lanes = g["lane"].astype(str)
    on_compute = (lanes == "compute").to_numpy()
    comm = lanes.map(COMM_OF_LANE).to_numpy()  # (mapped once, compared per kind)
    kind_of = {k: comm == k for k in COMM_KINDS}
    columns = ["device", *PARTS, *(f"exposed_{k}" for k in COMM_KINDS)]
    rows = []
    for dev, at in _groups(g, ["device"]):
        if length <= 0:  # an empty iteration has no idle time
            rows.append((dev, 1.0, 0.0, 0.0, 0.0, *(0.0 for _ in COMM_KINDS)))
            continue
        s, e, comp = starts[at], ends[at], on_compute[at]
        # busy sums may exceed the window by float rounding (a GPU busy all the time)
        compute = min(busy_time(s[comp], e[comp], t0, t1), length)
        union = min(max(busy_time(s, e, t0, t1), compute), length)
        idle = t1 - min(max(float(e.max()), t0), t1)
        bubble = max(length - union - idle, 0.0)
        exposed, covered, upto = [], comp.copy(), compute
        for k in COMM_KINDS:  # what kind k adds to the time already covered
            covered |= kind_of[k][at]
            reach = min(max(busy_time(s[covered], e[covered], t0, t1), upto), union)
            exposed.append((reach - upto) / length)
            upto = reach
        row = (compute / length, (union - compute) / length, bubble / length, idle / length)
        rows.append((dev, *row, *exposed))
    return pd.DataFrame(rows, columns=columns)


#: the suffix of a compute op that holds the lane for interference, not kernel work (TE's SM
#: margin beside TP overlap's userbuffers, :mod:`clustersim.compilers.pipeline.tp_overlap`)
INTERFERENCE_SUFFIX = " interference"


def interference_fraction(spans: pd.DataFrame, window: tuple[float, float]) -> float:
    """Per GPU, the compute-lane time inside ``window`` spent on interference ops (named
    ``… interference``: a GEMM's slowdown from the SMs its overlapped communication holds),
    / the window's length; mean over GPUs (0 where none ran). A part of ``compute``."""
    t0, t1 = window
    g = gpu_spans(spans)
    n = g["device"].nunique()
    hit = g[(g["lane"] == "compute") & g["name"].astype(str).str.endswith(INTERFERENCE_SUFFIX)]
    if not n or hit.empty or t1 <= t0:
        return 0.0
    busy = sum(
        busy_time(d["start_s"].to_numpy(), d["end_s"].to_numpy(), t0, t1) for _, d in hit.groupby("device")
    )
    return busy / (t1 - t0) / n


def lane_utilization(spans: pd.DataFrame, window: tuple[float, float]) -> pd.DataFrame:
    """Time-weighted busy fraction of every (device, lane), links included, in ``window``."""
    t0, t1 = window
    starts, ends, nbytes = spans["start_s"].to_numpy(), spans["end_s"].to_numpy(), spans["bytes"].to_numpy()
    rows = []
    for (dev, lane), at in _groups(spans, ["device", "lane"]):
        busy = busy_time(starts[at], ends[at], t0, t1)
        rows.append((dev, lane, busy, busy / (t1 - t0) if t1 > t0 else 0.0, int(nbytes[at].sum())))
    return pd.DataFrame(rows, columns=["device", "lane", "busy_s", "busy_fraction", "bytes"])
