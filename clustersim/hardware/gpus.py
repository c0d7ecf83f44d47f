"""GPU catalog: memory, peak dense bf16/fp16 tensor FLOP/s and HBM bandwidth per model.

Built from the rows of ``gpu_datasheets.csv`` (:mod:`.datasheets`), in table order: a new
GPU is a new row there, nothing here. Each :class:`GPUSpec` keeps its row's ``spec_source``.
Memory is what the driver reports as total (nvidia-smi / rocm-smi, the row's
``memory_usable_bytes``): a vendor's "80 GB" is 80 GiB of HBM less a small reservation,
not 80·10⁹ bytes; GPUs without a recorded driver total keep the marketed decimal figure.
The compute cost model and the memory ledger read this catalog through :func:`get_gpu`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..plugins import Plugin, Registry
from .datasheets import Datasheet, datasheets


@dataclass(frozen=True, kw_only=True)
class GPUSpec(Plugin):
    """One GPU model, a data plugin (no factory, no options). Units: ``memory_bytes`` bytes,
    ``peak_flops`` dense bf16/fp16 tensor FLOP/s, ``hbm_bandwidth`` bytes/s; ``source``
    says where they come from."""

    memory_bytes: int
    peak_flops: float
    hbm_bandwidth: float
    source: str = ""


def spec_of(sheet: Datasheet) -> GPUSpec:
    """The catalog entry of a datasheet row; its one-line description is its numbers."""
    m, peak, hbm = sheet.memory_bytes, sheet.dense16_flops, sheet.hbm_bandwidth
    line = f"{m / 2**30:.0f} GiB, {peak / 1e12:.0f} TFLOP/s bf16, {hbm / 1e12:.2f} TB/s HBM"
    return GPUSpec(
        sheet.gpu, line, memory_bytes=m, peak_flops=peak, hbm_bandwidth=hbm, source=sheet.spec_source
    )


#: GPU name (the ``cluster.gpu`` word) → spec, one per datasheet row
GPUS: Registry[GPUSpec] = Registry("GPU", "cluster.gpu")
for _sheet in datasheets().values():
    GPUS.add(spec_of(_sheet))


def get_gpu(name: str) -> GPUSpec:
    """The spec of GPU ``name``; a ScenarioError on ``cluster.gpu`` listing known names."""
    return GPUS.lookup(name)
