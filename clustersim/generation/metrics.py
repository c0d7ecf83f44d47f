"""What a generation run reports: per request and per step tables, and the summary.

Per request (``res.requests``): ``arrival_s``, ``first_token_s``, ``end_s``, ``ttft_s``
(first token − arrival), ``tpot_s`` (time per output token after the first: (end − first
token) / (output − 1); None for one-token outputs), ``latency_s`` (end − arrival),
``preemptions``. The inter-token latencies (ITL) are every gap between a request's
consecutive tokens. Percentiles interpolate linearly between order statistics (numpy's
default), as the inference mode's do.

Per step (``res.steps``): start, end, sequences, prefill tokens, decode sequences, KV blocks
in use (as scheduled) and their fraction of the cache, preemptions, bytes swapped — the
batch size and KV occupancy over time.

Memory (``res.memory``, ``res.devices``): every GPU holds its stage's weights and, from each
step's start, the KV blocks in use times its stage's bytes per block; ``peak_memory_bytes``
per GPU is the highest of that timeline (the forward's working buffers are not counted).
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pandas as pd

from .kv_cache import KVCache
from .scheduler import Sequence, StepRecord

PERCENTILES = (50, 90, 99)


def request_table(done: list[Sequence]) -> pd.DataFrame:
    """One row per request (module doc)."""
    rows = []
    for s in done:
        r, first, end = s.req, s.token_times[0], s.token_times[-1]
        rows.append(
            {
                "request": r.index,
                "arrival_s": r.arrival,
                "prompt_len": r.prompt,
                "output_len": r.output,
                "first_token_s": first,
                "end_s": end,
                "ttft_s": first - r.arrival,
                "tpot_s": (end - first) / (r.output - 1) if r.output > 1 else None,
                "latency_s": end - r.arrival,
                "preemptions": s.preemptions,
            }
        )
    return pd.DataFrame(rows)


def step_table(steps: list[StepRecord], cache: KVCache) -> pd.DataFrame:
    """One row per step (module doc)."""
    df = pd.DataFrame([s.__dict__ for s in steps], columns=[f.name for f in fields(StepRecord)])
    df["kv_utilization"] = df["kv_blocks_used"] / cache.blocks
    return df


def _spread(name: str, values) -> dict:
    """``name``'s mean and percentiles over ``values`` (None where there are none)."""
    v = np.asarray([x for x in values if x is not None and not pd.isna(x)], dtype=float)
    out = {f"{name}_mean_s": float(v.mean()) if v.size else None}
    for p in PERCENTILES:
        out[f"{name}_p{p}_s"] = float(np.percentile(v, p)) if v.size else None
    return out


def summary_of(done: list[Sequence], requests: pd.DataFrame, steps: pd.DataFrame, cache: KVCache) -> dict:
    """The run's headline numbers: latencies' means and percentiles, throughput, KV use."""
    makespan = float(requests["end_s"].max())
    gaps = [b - a for s in done for a, b in zip(s.token_times, s.token_times[1:])]
    out_tokens = int(requests["output_len"].sum())
    busy = (steps["end_s"] - steps["start_s"]).to_numpy()
    out = {
        "iteration_time_s": makespan,
        "requests": len(requests),
        "requests_per_s": len(requests) / makespan,
        "output_tokens_per_s": out_tokens / makespan,
        "total_tokens_per_s": (out_tokens + int(requests["prompt_len"].sum())) / makespan,
        "steps": len(steps),
        "batch_size_mean": float(np.average(steps["seqs"], weights=busy)),
        "batch_size_max": int(steps["seqs"].max()),
        "kv_blocks": cache.blocks,
        "kv_block_size": cache.block_size,
        "kv_utilization_mean": float(np.average(steps["kv_utilization"], weights=busy)),
        "kv_utilization_max": float(steps["kv_utilization"].max()),
        "preemptions": int(requests["preemptions"].sum()),
    }
    for name, col in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("latency", "latency_s")):
        out.update(_spread(name, requests[col]))
    out.update(_spread("itl", gaps))
    return out


def memory_tables(job, cache: KVCache, steps: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(``res.memory``, ``res.devices``) of a generation run (module doc)."""
    plan, rows, devices = job.plan, [], []
    starts, used = steps["start_s"].to_numpy(), steps["kv_blocks_used"].to_numpy()
    for dev in range(plan.num_devices):
        stage, _, tp_rank = plan.coords(dev)
        weights = job.chunk_costs[stage].weight_bytes
        held = weights + used * cache.stage_bytes[stage]
        rows += [(f"gpu{dev}", float(t), int(b)) for t, b in zip(starts, held)]
        devices.append(
            {
                "device": f"gpu{dev}",
                "stage": stage,
                "tp_rank": tp_rank,
                "peak_memory_bytes": float(held.max(initial=weights)),  # weights only if idle
            }
        )
    return pd.DataFrame(rows, columns=["device", "time_s", "allocated_bytes"]), pd.DataFrame(devices)
