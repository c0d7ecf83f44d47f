"""The device memory a training process holds outside PyTorch's allocator: the CUDA
context and NCCL's communicator buffers.

Neither is in a framework's memory report (``torch.cuda.max_memory_allocated``), yet both
take from the GPU's capacity for the whole run. Each number is a measurement in
``clustersim/data/gpu_runtime_memory.csv``:

* **the process** — the CUDA context and NCCL's initialisation: 484 MiB on one GPU with
  no peer (NVIDIA/nccl #2366);
* **a communicator** that has run a collective — its per-channel buffers (NCCL_BUFFSIZE,
  4 MiB per channel and peer for the Simple protocol, plus LL / LL128 buffers; the
  memory grows with the channels, not with the ranks beyond a ring's two peers): 544 MB
  for a group of two, 688 MB for more (4 A100, NVIDIA/nccl #964);
* **an all-to-all communicator** — connected to every peer on every channel: 3.28 GB over
  8 H100 (NVIDIA/nccl #1685).

A GPU of a TP × CP × PP × DP (× EP) plan uses one communicator per parallel group it
communicates over (:func:`communicators`): its TP group, its CP ring, its data-parallel
group (dp · cp: gradients reduce over the CP ranks too), its pipeline group, and with
expert parallelism its EP group (all-to-all) and its expert-data-parallel group. The
A100 rows stand for every GPU type (H100's NVLink runs more channels, so it holds more:
the reserve is a lower bound there). Megatron-Core creates further groups (embedding,
model-parallel, the DP group without CP) that carry little or no traffic; under NCCL's
lazy connection (NCCL_RUNTIME_CONNECT, on by default since 2.22) they hold little, and
are not counted.
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

RUNTIME_CSV = Path(__file__).resolve().parent.parent / "data" / "gpu_runtime_memory.csv"
UNIT_BYTES = {"MiB": 2**20, "MB": 10**6, "GB": 10**9}


@cache
def _rows() -> dict[tuple[str, str], float]:
    """(item, group) → bytes, from ``gpu_runtime_memory.csv`` (read once)."""
    with RUNTIME_CSV.open() as fh:
        return {
            (r["item"], r["group"]): float(r["value"]) * UNIT_BYTES[r["unit"]] for r in csv.DictReader(fh)
        }


def communicators(plan) -> list[tuple[str, int]]:
    """(kind, size) of each communicator a GPU of ``plan`` (a
    :class:`~clustersim.parallel.plan.Plan`) runs collectives or sends over: ``"group"``
    for a ring / point-to-point group, ``"all_to_all"`` for the expert-parallel group."""
    groups = [("group", plan.tp), ("group", plan.cp), ("group", plan.dp * plan.cp), ("group", plan.pp)]
    if plan.ep > 1:
        groups += [("all_to_all", plan.ep), ("group", plan.edp)]
    return [(kind, n) for kind, n in groups if n > 1]


def communicator_bytes(kind: str, size: int) -> float:
    """Device bytes NCCL holds for one communicator of ``size`` ranks that has run its
    collectives (module doc); an all-to-all communicator connects every pair."""
    rows = _rows()
    if kind == "all_to_all":
        return rows[("all_to_all", "8")]
    return rows[("communicator", "2" if size == 2 else "3+")]


def reserve_bytes(groups: list[tuple[str, int]]) -> int:
    """Bytes a GPU holds outside the framework's allocator for the whole run: the process
    (CUDA context, NCCL init) and a communicator for each (kind, size) of ``groups`` with
    more than one rank."""
    return int(_rows()[("process", "")] + sum(communicator_bytes(k, n) for k, n in groups if n > 1))


def runtime_reserve(plan) -> int:
    """:func:`reserve_bytes` of a GPU of ``plan``, over its :func:`communicators`."""
    return reserve_bytes(communicators(plan))
