"""Kernels of a published nsys profile of a whole training step, priced as the step runs them.

``data/published_profile_kernels.csv`` holds per-kernel averages read from a public nsys
report of Llama-3.1-70B on 64 × H100 (TP 1, CP 2, micro-batch 1, sequence 8192; Megatron-Core
with Megatron-FSDP, and Automodel FSDP2): Transformer Engine's RMSNorm, cuDNN fused attention
and FlashAttention-2, each the average over every call of a step. Context parallelism over two
GPUs in p2p (ring) form runs two attention kernels per layer and direction: the local causal
one over the GPU's 4096 tokens and a full one of those queries over the peer's 2048 keys
(TE's load-balanced chunks, half the pairs each) — the row's average is theirs.

In that step NCCL's all-gathers and reduce-scatters run beside most kernels (the report: 62–88
% of the GEMM time overlapped), so a kernel's measured average lies between its price alone
and its price with every call beside NCCL's CTAs (:func:`.comm_interference.beside`):
``check`` rows must, within :data:`BAND`. ``context`` rows are kept with what the model says
of them, not asserted (Transformer Engine's RMSNorm: the model prices it 18 % fast forward and
42 % fast backward, beyond what the HBM NCCL takes explains — two rows of one shape, 0.5 % of
the step's kernel time; not fitted).
"""

from __future__ import annotations

import csv

from ..hardware.interference import nccl_ctas
from ..workload.attention import FLASH_BACKWARD_FACTOR, flash_forward_flops
from ..workload.comm_interference import beside
from ..workload.cost_model import CostModel
from ..workload.kernel_impls import IMPLS
from ..workload.memory_model import DTYPE_BYTES
from ..workload.ops import AttentionShape, Work
from .data import DATA
from .verdict import Verdict

#: a check row's measured average over (price alone, price beside NCCL's CTAs): at least
#: 0.95 × alone, at most 1.10 × beside (the trace's own scatter: two runs, two stacks)
BAND = (0.95, 1.10)


def profile_rows() -> list[dict[str, str]]:
    """The rows of ``published_profile_kernels.csv``."""
    with (DATA / "published_profile_kernels.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def _kernels(row: dict[str, str]) -> list[Work]:
    """The kernels one call of ``row`` averages over (module doc)."""
    if row["kernel"].startswith("rmsnorm"):
        fwd, bwd = IMPLS["norm"][row["impl"]].bytes(DTYPE_BYTES[row["dtype"]])
        n = int(row["tokens"]) * int(row["hidden"])
        return [Work(0.0, b * n, memory_kind=k) for b, k in (bwd if row["kernel"].endswith("bwd") else fwd)]
    heads, d, local = int(row["heads"]), int(row["head_dim"]), int(row["seq_len"]) // int(row["cp"])
    back = row["kernel"].endswith("bwd")
    factor = FLASH_BACKWARD_FACTOR if back else 1.0
    causal = Work(
        factor * flash_forward_flops(1, local, heads, d, True),
        0.0,
        attention=AttentionShape(d, local, True, back, row["impl"]),
    )
    full = Work(
        factor * 4.0 * heads * d * local * (local // 2),
        0.0,
        attention=AttentionShape(d, local // 2, False, back, row["impl"]),
    )
    return [causal, full]


def priced_us(row: dict[str, str]) -> tuple[float, float]:
    """(alone, beside NCCL's CTAs) µs of one average call of ``row``."""
    cm = CostModel.for_gpu(row["gpu"])
    ctas = nccl_ctas(row["gpu"]) or 0
    works = _kernels(row)
    alone = [cm.time(w) for w in works]
    near = [beside(cm, w, t, ctas)[0] for w, t in zip(works, alone)]
    return 1e6 * sum(alone) / len(works), 1e6 * sum(near) / len(works)


def within_band(row: dict[str, str]) -> bool:
    """Whether the measured average of ``row`` lies in :data:`BAND` of its two prices."""
    alone, near = priced_us(row)
    return BAND[0] * alone <= float(row["avg_us"]) <= BAND[1] * near


def profile_table() -> tuple[str, Verdict]:
    """The rows with both prices; the verdict over the ``check`` rows (:data:`BAND`)."""
    lines = [
        "| kernel | impl | role | measured µs | alone µs | beside NCCL µs |",
        "|---|---|---|---|---|---|",
    ]
    failed, checked = [], 0
    for row in profile_rows():
        alone, near = priced_us(row)
        lines.append(
            f"| {row['kernel']} | {row['impl']} | {row['role']} | {float(row['avg_us']):.1f} "
            f"| {alone:.1f} | {near:.1f} |"
        )
        if row["role"] == "check":
            checked += 1
            if not within_band(row):
                failed.append(
                    f"{row['kernel']} {row['impl']}: {row['avg_us']} µs outside {alone:.0f}–{near:.0f}"
                )
    detail = f"{checked} kernels within {BAND[0]} × alone … {BAND[1]} × beside NCCL"
    return "\n".join(lines), Verdict("published step profile", not failed, "; ".join(failed) or detail)
