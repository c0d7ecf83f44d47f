"""Per-request results of an inference run (``training.mode: inference``).

From the recorded spans alone: request q (served by replica r = q mod dp as its request
j = q div dp) *arrives* when its op on the ``arrival`` lane ends, *starts* when its first
forward segment on the first stage starts, and *ends* when its last forward segment on
the last stage ends. ``queue_s`` = start − arrival, ``latency_s`` = end − arrival.

Summary metrics (docs/inference.md): ``requests``; ``requests_per_s`` = requests /
makespan (time from t = 0, the first arrival, to the last request's end — the run's
``iteration_time_s``); ``steady_requests_per_s`` = (requests − 1) / (last end − first
end), the completion rate once the pipeline is full (None for one request);
``latency_mean_s``, ``latency_p50_s``, ``latency_p99_s`` (linear interpolation between
order statistics, numpy's default), ``latency_max_s``, and ``first_request_latency_s``
(request 0: the latency of an empty pipeline).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..program import ARRIVAL_LANE

REQUEST_COLUMNS = ["request", "replica", "arrival_s", "start_s", "end_s", "queue_s", "latency_s"]


def split_requests(spans: pd.DataFrame, layout) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the per-request table, the spans without the arrival lane). ``layout`` maps a
    device index to (stage, dp_rank, tp_rank) with ``coords`` and knows ``pp`` and ``dp``."""
    is_arrival = spans["lane"] == ARRIVAL_LANE
    arrivals, rest = spans[is_arrival], spans[~is_arrival]
    gpu = rest[rest["phase"] == "F"]
    coords = {f"gpu{d}": layout.coords(d) for d in range(layout.num_devices)}
    stage = gpu["device"].map(lambda d: coords[d][0])
    replica = gpu["device"].map(lambda d: coords[d][1])
    first = gpu[stage == 0].assign(replica=replica).groupby(["replica", "microbatch"])["start_s"].min()
    last = (
        gpu[stage == layout.pp - 1].assign(replica=replica).groupby(["replica", "microbatch"])["end_s"].max()
    )
    arr = arrivals.assign(replica=arrivals["device"].map(lambda d: coords[d][1])).set_index(
        ["replica", "microbatch"]
    )["end_s"]
    table = pd.DataFrame({"arrival_s": arr, "start_s": first, "end_s": last}).reset_index()
    table.insert(0, "request", table["microbatch"] * layout.dp + table["replica"])
    table["queue_s"] = table["start_s"] - table["arrival_s"]
    table["latency_s"] = table["end_s"] - table["arrival_s"]
    table = table.sort_values("request", kind="stable").reset_index(drop=True)
    return table[REQUEST_COLUMNS], rest.reset_index(drop=True)


def request_metrics(table: pd.DataFrame) -> dict:
    """The inference summary entries (module docstring) of a request table."""
    lat = table["latency_s"].to_numpy()
    ends = table["end_s"].to_numpy()
    n, makespan = len(table), float(ends.max())
    spread = float(ends.max() - ends.min())
    return {
        "requests": n,
        "requests_per_s": n / makespan if makespan > 0 else float("inf"),
        "steady_requests_per_s": (n - 1) / spread if n > 1 and spread > 0 else None,
        "latency_mean_s": float(lat.mean()),
        "latency_p50_s": float(np.percentile(lat, 50)),
        "latency_p99_s": float(np.percentile(lat, 99)),
        "latency_max_s": float(lat.max()),
        "first_request_latency_s": float(lat[0]),
    }
