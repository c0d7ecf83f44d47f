"""Default ``cluster.comm_compute_slowdown`` per GPU type: compute slowed while communication
kernels share the SMs.

NCCL runs a collective as one thread block per channel, each holding an SM for the
collective's whole duration, and Transformer Engine's userbuffers reserve ``num_sm`` SMs
for their communication kernels (default 16 for the ``pipeline`` and ``bulk`` methods,
``transformer_engine/pytorch/module/base.py``, ``initialize_ub``). A compute-bound GEMM
sharing the GPU then runs on the remaining SMs, so the one rule used for every GPU is

    slowdown = SMs / (SMs − 16)

with the SM (CU) counts of ``gpu_datasheets.csv`` (its ``sms`` column, each with its
source: the vendors' architecture documents). It is a floor:
HBM and L2 traffic of the collective and wave-quantisation tails add to it. Measured for
comparison: overlapped training kernels on A100, H100, MI250 and MI210 ran 18.9 % slower
on average, 40 % at most (Lee et al. 2025, "Characterizing Compute-Communication Overlap in
GPU-Accelerated Distributed Deep Learning", arXiv:2507.03114); the rule gives 17.4 % for
A100 and 13.8 % for H100. A profile applies the default only where it overlaps something
(:mod:`clustersim.scenario.frameworks`); a stated value always wins. The engine applies it
while a NCCL collective runs; TP overlap applies it to the GEMMs TE launches with an SM
margin (``pipeline``, ``bulk``; not ``ring_exchange``, whose copy-engine transfers hold no
SMs) as their own ``interference`` ops (:mod:`clustersim.workload.tp_overlap`), priced
there per GEMM shape by the wave model over SMs − ``num_sm``
(:mod:`clustersim.workload.gemm_interference`, ``data/interference_measurements.csv``);
this rule is the fallback where a GPU has no SM count, and the engine's rate while a NCCL
collective runs (docs/overlap.md).
"""

from __future__ import annotations

from .datasheets import datasheets

#: SMs a communication kernel set holds: TE userbuffers' default ``num_sm`` (16); NCCL's
#: ring kernels take one SM per channel and use a comparable count on NVSwitch systems
COMM_SMS = 16


def slowdown_of(sms: int) -> float | None:
    """The rule's slowdown on a GPU of ``sms`` SMs (module doc); None with no more SMs than
    a communication kernel set holds."""
    return sms / (sms - COMM_SMS) if sms > COMM_SMS else None


def default_slowdown(gpu: str) -> float | None:
    """The rule's slowdown for catalog GPU ``gpu`` from its datasheet row's SM count, or
    None for a GPU not in the catalog."""
    sheet = datasheets().get(gpu)
    return None if sheet is None else slowdown_of(sheet.sms)


def custom_slowdown(gpu: object) -> float | None:
    """The rule's slowdown for a custom GPU mapping (``cluster.gpu: {…, sms: N}``), or None
    without a valid SM count (validation reports a bad one)."""
    sms = gpu.get("sms") if isinstance(gpu, dict) else None
    valid = isinstance(sms, int) and not isinstance(sms, bool)
    return slowdown_of(sms) if valid else None
