"""Default ``cluster.comm_compute_slowdown`` per GPU type: compute slowed while communication
kernels share the SMs.

NCCL runs a collective as one thread block per channel, each holding an SM for the
collective's whole duration, and Transformer Engine's userbuffers reserve ``num_sm`` SMs
for their communication kernels (default 16 for the ``pipeline`` and ``bulk`` methods,
``transformer_engine/pytorch/module/base.py``, ``initialize_ub``). A compute-bound GEMM
sharing the GPU then runs on the remaining SMs, so the one rule used for every GPU is

    slowdown = SMs / (SMs − 16)

with the SM (CU) counts below from the vendors' architecture documents. It is a floor:
HBM and L2 traffic of the collective and wave-quantisation tails add to it. Measured for
comparison: overlapped training kernels on A100, H100, MI250 and MI210 ran 18.9 % slower
on average, 40 % at most (Lee et al. 2025, "Characterizing Compute-Communication Overlap in
GPU-Accelerated Distributed Deep Learning", arXiv:2507.03114); the rule gives 17.4 % for
A100 and 13.8 % for H100. A profile applies the default only where it overlaps something
(:mod:`clustersim.scenario.frameworks`); a stated value always wins.
"""

from __future__ import annotations

#: SMs a communication kernel set holds: TE userbuffers' default ``num_sm`` (16); NCCL's
#: ring kernels take one SM per channel and use a comparable count on NVSwitch systems
COMM_SMS = 16

#: GPU (the ``cluster.gpu`` word) → (SMs or CUs, source)
SM_COUNTS: dict[str, tuple[int, str]] = {
    "V100-SXM2-32GB": (80, "NVIDIA Tesla V100 architecture whitepaper: 80 SMs"),
    "A100-SXM4-40GB": (108, "NVIDIA A100 Tensor Core GPU architecture whitepaper: 108 SMs"),
    "A100-SXM4-80GB": (108, "NVIDIA A100 Tensor Core GPU architecture whitepaper: 108 SMs"),
    "H100-SXM5-80GB": (132, "NVIDIA H100 Tensor Core GPU architecture whitepaper: 132 SMs (SXM5)"),
    "H200-SXM-141GB": (132, "NVIDIA H200: the H100 SXM5 die (132 SMs) with HBM3e"),
    "H800-SXM5-80GB": (132, "NVIDIA H800 SXM5: the H100 SXM5 die (132 SMs), reduced NVLink"),
    "B200-SXM-180GB": (148, "NVIDIA Blackwell B200: 148 SMs over its two dies"),
    "GB200-186GB": (148, "NVIDIA GB200: its B200-class GPUs, 148 SMs each"),
    "MI300X-192GB": (304, "AMD CDNA 3 white paper: MI300X, 304 compute units"),
    "T4-16GB": (40, "NVIDIA Turing T4: 40 SMs"),
}


def default_slowdown(gpu: str) -> float | None:
    """The rule's slowdown for ``gpu`` (module doc), or None for a GPU not in the table."""
    if gpu not in SM_COUNTS:
        return None
    sms = SM_COUNTS[gpu][0]
    return sms / (sms - COMM_SMS)


def custom_slowdown(gpu: object) -> float | None:
    """The rule's slowdown for a custom GPU mapping (``cluster.gpu: {…, sms: N}``), or None
    without a valid SM count (validation reports a bad one)."""
    sms = gpu.get("sms") if isinstance(gpu, dict) else None
    if isinstance(sms, int) and not isinstance(sms, bool) and sms > COMM_SMS:
        return sms / (sms - COMM_SMS)
    return None
