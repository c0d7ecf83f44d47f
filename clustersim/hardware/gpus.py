"""GPU catalog: memory, peak dense bf16/fp16 tensor FLOP/s and HBM bandwidth per model.

Numbers come from ``hardware_specs.csv`` (copied to ``tests/data/``), whose ``source``
column names the datasheet or spec page; each :class:`GPUSpec` keeps that source. Memory
is what the driver reports as total (nvidia-smi / rocm-smi, ``gpu_datasheets.csv``'s
``memory_usable_bytes``): a vendor's "80 GB" is 80 GiB of HBM less a small reservation,
not 80·10⁹ bytes; GPUs without a recorded driver total keep the marketed decimal figure.
The compute cost model and the memory ledger read this catalog through :func:`get_gpu`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..plugins import Plugin, Registry


@dataclass(frozen=True, kw_only=True)
class GPUSpec(Plugin):
    """One GPU model, a data plugin (no factory, no options). Units: ``memory_bytes`` bytes,
    ``peak_flops`` dense bf16/fp16 tensor FLOP/s, ``hbm_bandwidth`` bytes/s; ``source``
    says where they come from."""

    memory_bytes: int
    peak_flops: float
    hbm_bandwidth: float
    source: str = ""


def _gpu(name: str, memory_bytes: int, peak_flops: float, hbm_bandwidth: float, source: str) -> GPUSpec:
    """A catalog row; its one-line description is its numbers."""
    line = f"{memory_bytes / 2**30:.0f} GiB, {peak_flops / 1e12:.0f} TFLOP/s bf16, {hbm_bandwidth / 1e12:.2f} TB/s HBM"
    return GPUSpec(
        name,
        line,
        memory_bytes=memory_bytes,
        peak_flops=peak_flops,
        hbm_bandwidth=hbm_bandwidth,
        source=source,
    )


MIB = 2**20

_A100 = "NVIDIA A100 datasheet / Ampere whitepaper via glennklockwood.com (hardware_specs.csv)"
_HOPPER = "NVIDIA Hopper whitepaper via glennklockwood.com (hardware_specs.csv)"

#: GPU name (the ``cluster.gpu`` word) → spec
GPUS: Registry[GPUSpec] = Registry("GPU", "cluster.gpu")
for _spec in (
    _gpu(
        "V100-SXM2-32GB",
        32 * 10**9,
        125e12,
        900e9,
        "NVIDIA V100 datasheet: 125 TFLOP/s tensor, 900 GB/s (hardware_specs.csv, UNVERIFIED)",
    ),
    _gpu("A100-SXM4-40GB", 40960 * MIB, 312e12, 1555e9, _A100),
    _gpu("A100-SXM4-80GB", 81920 * MIB, 312e12, 2039e9, _A100),
    _gpu("H100-SXM5-80GB", 81559 * MIB, 989.4e12, 3350e9, _HOPPER),
    _gpu(
        "H200-SXM-141GB",
        143771 * MIB,
        989.4e12,
        4800e9,
        "H200 spec pages (same GH100 compute as H100; 141 GB HBM3e, 4.8 TB/s) (hardware_specs.csv)",
    ),
    # Hopper/Blackwell/CDNA3 entries: numbers and sources in gpu_datasheets.csv
    _gpu(
        "H800-SXM5-80GB",
        81559 * MIB,
        989.4e12,
        3350e9,
        "H100 SXM5 silicon with 8 NVLink4 links (gpu_datasheets.csv, SECONDARY)",
    ),
    _gpu(
        "B200-SXM-180GB",
        183359 * MIB,
        2250e12,
        8000e9,
        "ml-engineering accelerator tables / NVIDIA HGX B200 (gpu_datasheets.csv, SECONDARY)",
    ),
    _gpu(
        "GB200-186GB",
        189471 * MIB,
        2500e12,
        8000e9,
        "ml-engineering accelerator tables, per B200 chip of a GB200 (gpu_datasheets.csv, SECONDARY)",
    ),
    _gpu(
        "MI300X-192GB",
        196288 * MIB,
        1307.4e12,
        5300e9,
        "AMD MI300X spec as quoted by alpharomercoma/MI300X-vs-H200 (gpu_datasheets.csv, SECONDARY)",
    ),
    # edge and inference accelerators (inference pipelines, docs/inference.md); not in hardware_specs.csv
    _gpu(
        "T4-16GB",
        16 * 10**9,
        65e12,
        320e9,
        "NVIDIA T4 datasheet: 65 TFLOP/s mixed-precision FP16/FP32 tensor, 16 GB GDDR6, 320 GB/s "
        "(TechPowerUp T4 page: 65.13 TFLOP/s FP16, 320.0 GB/s)",
    ),
):
    GPUS.add(_spec)


def get_gpu(name: str) -> GPUSpec:
    """The spec of GPU ``name``; a ScenarioError on ``cluster.gpu`` listing known names."""
    return GPUS.lookup(name)
