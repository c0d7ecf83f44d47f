"""A GPU's power from its SM and HBM activity, capped at its TDP (docs/energy.md).

Each row of ``clustersim/data/gpu_power.csv`` gives a GPU's TDP (datasheet), its idle
power (public ``nvidia-smi`` readings at 0 MiB, 0 %) and the HBM's energy per bit moved,
each with its source. Above idle, the dynamic power is

    P − P_idle = min(TDP − P_idle,  (TDP − P_idle) · a_sm  +  P_mem · a_hbm)

* ``a_sm`` — tensor activity: the FLOP/s a compute op achieves over the GPU's best
  16-bit GEMM rate (its datasheet peak × the calibrated ``matmul_max``, one calibration
  per GPU). A GEMM at that rate draws the TDP: large GEMMs on A100 and H100 run at the
  power limit, which sets their clocks (H. He, "Strangely, matrix multiplications on GPUs
  run faster when given 'predictable' data", 2024; A. Ujeniya, FAU NHR blog, 2025: SGEMM
  and DGEMM power on A40, A100 and H100 at their caps);
* ``a_hbm`` — HBM activity: the rest of a compute op's time is memory-bound kernels at the
  HBM's full bandwidth (a_hbm = 1 − a_sm), and a communication op streams twice its bytes
  through HBM (read the input, write the output) at its own rate; host time on the
  compute lane (``framework …``, ``launch …`` ops) adds nothing;
* ``P_mem`` — a memory-bound kernel's power at full bandwidth. No kernel-level
  measurement of it is shipped, so it is bracketed: ``memory="limit"`` (the default)
  takes the GPU to its power limit as a GEMM does (all SMs streaming), and
  ``memory="dram"`` takes only the DRAM's own energy per bit × 8 × the peak bandwidth —
  a lower bound (the SMs', L2's and crossbar's share is not in it). Reports give both.

Concurrent ops on one GPU (compute beside NCCL) add, and the sum is capped at the TDP.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from ..errors import ScenarioError
from ..hardware.gpus import GPUS
from ..workload.cost_model import efficiency_for

POWER_CSV = Path(__file__).resolve().parent.parent / "data" / "gpu_power.csv"


@dataclass(frozen=True)
class GPUPower:
    """One GPU's power model (module doc); watts and FLOP/s."""

    gpu: str
    tdp_w: float
    idle_w: float
    mem_w: float  # P_mem: a memory-bound kernel's dynamic power at full HBM bandwidth
    gemm_flops: float  # the best 16-bit GEMM rate: a_sm = 1
    hbm_bandwidth: float

    @property
    def dynamic_w(self) -> float:
        return self.tdp_w - self.idle_w

    def compute_w(self, flops, seconds):
        """Dynamic power of compute ops doing ``flops`` in ``seconds`` (arrays or numbers)."""
        busy = np.asarray(seconds) > 0
        rate = np.divide(flops, seconds, where=busy, out=np.zeros(np.shape(flops)))
        a_sm = np.clip(rate / self.gemm_flops, 0.0, 1.0)
        return self.dynamic_w * a_sm + self.mem_w * (1.0 - a_sm)

    def transfer_w(self, nbytes, seconds):
        """Dynamic power of communication ops moving ``nbytes`` in ``seconds``."""
        busy = np.asarray(seconds) > 0
        rate = np.divide(np.multiply(nbytes, 2.0), seconds, where=busy, out=np.zeros(np.shape(nbytes)))
        return self.mem_w * np.minimum(1.0, rate / self.hbm_bandwidth)


#: the two brackets of a memory-bound kernel's power (module doc)
MEMORY_BOUNDS = ("limit", "dram")


@cache
def _rows() -> dict[str, dict[str, str]]:
    with open(POWER_CSV, newline="") as fh:
        return {row["gpu"]: row for row in csv.DictReader(fh)}


def gpu_power(gpu: str, memory: str = "limit") -> GPUPower:
    """The power model of catalog GPU ``gpu`` with ``memory`` one of
    :data:`MEMORY_BOUNDS`; a ScenarioError naming the GPUs with a power row if it has none."""
    row = _rows().get(gpu)
    if row is None:
        raise ScenarioError(
            "cluster.gpu", gpu, f"no power row in {POWER_CSV.name} for this GPU; rows: {', '.join(_rows())}"
        )
    if memory not in MEMORY_BOUNDS:
        raise ValueError(f"memory must be one of {MEMORY_BOUNDS}, not {memory!r}")
    spec = GPUS[gpu]
    tdp, idle = float(row["tdp_w"]), float(row["idle_w"])
    dram = float(row["hbm_pj_per_bit"]) * 1e-12 * 8 * spec.hbm_bandwidth
    return GPUPower(
        gpu=gpu,
        tdp_w=tdp,
        idle_w=idle,
        mem_w=tdp - idle if memory == "limit" else dram,
        gemm_flops=spec.peak_flops * efficiency_for(gpu).matmul_max,
        hbm_bandwidth=spec.hbm_bandwidth,
    )


def check_power_rows(cluster: dict) -> None:
    """A ScenarioError unless every GPU type of ``cluster`` (a resolved ClusterSpec dict,
    node groups included) has a power row."""
    for gpu in {cluster["gpu"], *(g["gpu"] for g in cluster.get("node_groups") or [] if g.get("gpu"))}:
        gpu_power(gpu)
