"""Datasheet numbers of the catalog GPUs beyond the three the cost model reads.

One row per catalog GPU in ``clustersim/data/gpu_datasheets.csv``: dense 16-bit and FP8
tensor peaks, memory as marketed and as the driver reports it, HBM bandwidth and the
scale-up link (NVLink / Infinity Fabric) per direction, with the source of the numbers.
:mod:`.gpus` holds the entries the simulator runs on; a test keeps the two in agreement.

Memory: vendors' "80 GB" is the HBM's binary capacity — nvidia-smi shows 81920 MiB
(A100) and 81559 MiB (H100, after the driver's reservation). ``memory_usable_bytes`` is
that driver-reported total, the figure the memory ledger compares against (what a
framework's allocator can hand out, less its CUDA context): the catalog's
``memory_bytes`` is this figure wherever it is recorded.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..errors import ScenarioError

DATASHEETS_CSV = Path(__file__).resolve().parent.parent / "data" / "gpu_datasheets.csv"


@dataclass(frozen=True)
class Datasheet:
    """One GPU's published numbers. Units: FLOP/s, bytes, bytes/s; ``fp8_flops`` is 0
    where the GPU has no FP8 tensor cores, ``memory_usable_bytes`` 0 where unrecorded."""

    gpu: str
    dense16_flops: float
    fp8_flops: float
    memory_marketed_bytes: int
    memory_usable_bytes: int
    hbm_bandwidth: float
    scale_up: str
    scale_up_bandwidth: float
    spec_source: str
    memory_source: str
    verification: str


def _number(text: str, scale: float) -> float:
    return float(text) * scale if text else 0.0


@cache
def datasheets() -> dict[str, Datasheet]:
    """Catalog GPU name → its datasheet row (read once)."""
    with DATASHEETS_CSV.open() as fh:
        rows = list(csv.DictReader(fh))
    return {
        r["gpu"]: Datasheet(
            gpu=r["gpu"],
            dense16_flops=_number(r["bf16_fp16_dense_tflops"], 1e12),
            fp8_flops=_number(r["fp8_dense_tflops"], 1e12),
            memory_marketed_bytes=int(_number(r["memory_marketed_GB"], 1e9)),
            memory_usable_bytes=int(_number(r["memory_usable_bytes"], 1.0)),
            hbm_bandwidth=_number(r["hbm_TBps"], 1e12),
            scale_up=r["scale_up"],
            scale_up_bandwidth=_number(r["scale_up_GBps_per_dir"], 1e9),
            spec_source=r["spec_source"],
            memory_source=r["memory_usable_source"],
            verification=r["verification"],
        )
        for r in rows
    }


def datasheet(gpu: str) -> Datasheet:
    """The datasheet of ``gpu``; a ScenarioError on ``cluster.gpu`` listing known names."""
    sheets = datasheets()
    if gpu not in sheets:
        raise ScenarioError("cluster.gpu", gpu, f"GPUs with a datasheet: {', '.join(sorted(sheets))}")
    return sheets[gpu]
