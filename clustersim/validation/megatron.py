"""Megatron-LM 2021 (Narayanan et al., SC21) Table 1: predicted vs published TFLOP/s per GPU.

Each row of ``megatron_weak_scaling.csv`` becomes a scenario (:func:`megatron_scenario`,
also shipped as ``scenarios/validation/megatron-2021-*.yaml``): DGX-A100 nodes (the
``dgx_a100`` cluster preset), the row's TP/PP/DP and global batch, s = 2048, fp16 mixed
precision, full activation recompute, the 1F1B schedule (the interleaved schedule Megatron
used for some rows is not registered in clustersim; 1F1B is used for every row).

Fidelity: one iteration (no warm-up effects exist in the simulator), ``analytical``
network (route latency + bytes / bottleneck bandwidth; agrees with ``packet`` on an idle
network) and ``granularity: layer``: every TP all-reduce is its own collective and pays its
own NCCL protocol latency (``granularity: stage`` sums a pass's collectives into one and pays
it once — 3–4 % more TFLOP/s on the TP rows since collectives follow NCCL's protocols). Predicted TFLOP/s uses Megatron's own count, eq. (3): 96·B·s·l·h²(1 + s/(6h) +
V/(16lh)) FLOPs per iteration (recompute included) / (iteration time × GPUs).
"""

from __future__ import annotations

import time

from ..simulate import simulate
from ..workload.transformer import megatron_flops
from .data import read_table

#: The unpublished micro-batch size, ONE rule for every row, stated up front: the largest
#: b in {1, 2, 4, 8} that leaves at least 4·pp micro-batches per replica per iteration
#: (Megatron §3.3.2 / Fig. 12: throughput rises with b until the pipeline bubble
#: (p − 1)/m grows; m ≥ 4p keeps the 1F1B bubble under ~20 %).
MICRO_BATCH_RULE = "largest b in {1, 2, 4, 8} with m = B / (b·dp) ≥ 4·pp and B divisible by b·dp"


def micro_batch(global_batch: int, dp: int, pp: int) -> int:
    """:data:`MICRO_BATCH_RULE` applied to one row."""
    best = 1
    for b in (1, 2, 4, 8):
        if global_batch % (b * dp) == 0 and global_batch // (b * dp) >= 4 * pp:
            best = b
    return best


def preset_name(params_b: float) -> str:
    """The model preset of a Table 1 row (``gpt-1.7b`` … ``gpt-1t``)."""
    return "gpt-1t" if params_b >= 1000 else f"gpt-{params_b:g}b"


def megatron_rows() -> list[dict]:
    """Table 1 rows with numeric fields parsed."""
    rows = []
    for r in read_table("megatron_weak_scaling"):
        rows.append(
            {
                "params_b": float(r["params_b"]),
                "heads": int(r["heads"]),
                "hidden": int(r["hidden"]),
                "layers": int(r["layers"]),
                "tp": int(r["tp"]),
                "pp": int(r["pp"]),
                "dp": int(r["dp_derived"]),
                "gpus": int(r["gpus"]),
                "global_batch": int(r["global_batch"]),
                "seq_len": int(r["seq_len"]),
                "vocab": int(r["vocab"]),
                "tflops_per_gpu": float(r["tflops_per_gpu"]),
                "source": r["source"],
            }
        )
    return rows


def megatron_scenario(row: dict, network: str = "analytical", granularity: str = "layer") -> dict:
    """The scenario dict of one Table 1 row (see module doc)."""
    b = micro_batch(row["global_batch"], row["dp"], row["pp"])
    return {
        "name": f"megatron-2021-{preset_name(row['params_b'])}",
        "cluster": {"preset": "dgx_a100", "nodes": row["gpus"] // 8},
        "model": {"preset": preset_name(row["params_b"]), "seq_len": row["seq_len"]},
        "training": {
            "global_batch": row["global_batch"],
            "micro_batch": b,
            "precision": "fp16",
            "recompute": "full",
            "optimizer": "adam",
            "framework": "megatron_2021",
        },
        "parallel": {"tp": row["tp"], "pp": row["pp"], "dp": row["dp"], "schedule": "1f1b"},
        "simulation": {
            "iterations": 1,
            "network": network,
            "granularity": granularity,
            "collective_model": "analytical",
        },
    }


def predicted_tflops(row: dict, iteration_time_s: float) -> float:
    """Megatron's eq. (3) FLOPs per GPU per second, in TFLOP/s."""
    f = megatron_flops(row["global_batch"], row["seq_len"], row["layers"], row["hidden"], row["vocab"])
    return f / iteration_time_s / row["gpus"] / 1e12


def run_rows(
    rows: list[dict] | None = None, network: str = "analytical", granularity: str = "layer", progress=None
) -> list[dict]:
    """Simulate each row; return published vs predicted TFLOP/s, error and memory."""
    out = []
    for row in rows if rows is not None else megatron_rows():
        sc = megatron_scenario(row, network, granularity)
        t0 = time.perf_counter()
        res = simulate(sc)
        pred = predicted_tflops(row, res.summary["iteration_time_s"])
        out.append(
            {
                "model": preset_name(row["params_b"]),
                "gpus": row["gpus"],
                "tp": row["tp"],
                "pp": row["pp"],
                "dp": row["dp"],
                "batch": row["global_batch"],
                "micro_batch": sc["training"]["micro_batch"],
                "published": row["tflops_per_gpu"],
                "predicted": pred,
                "error": pred / row["tflops_per_gpu"] - 1,
                "iteration_s": res.summary["iteration_time_s"],
                "peak_memory_gib": res.summary["peak_memory_gib"],
                "oom": res.summary["oom"],
                "wall_s": time.perf_counter() - t0,
                "events": res.summary["sim_events"],
            }
        )
        if progress:
            progress(out[-1])
    return out
