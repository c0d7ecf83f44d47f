"""What a NCCL collective overlapped with compute costs the kernels beside it: SMs and HBM.

NCCL runs a collective as one CTA per channel (``enqueue.cc``: the kernel's grid is its
channel count), each holding an SM for the whole call. On an 8-GPU NVSwitch node NCCL opens
24 ring channels on A100 and H100, 16 on H800, 32 on B200 (rows of
``data/interference_measurements.csv``, H200 and the other NVLink5 parts transferred,
:func:`~clustersim.hardware.interference.nccl_ctas`); a call runs all of them once it has
24 × 512 threads × 64 B = 768 KiB (channels are dropped only while ``nBytes < nChannels ·
nThreads · NCCL_SIMPLE_THREAD_THRESHOLD``) — a gradient bucket or a token all-to-all has
far more. A kernel beside it:

* a GEMM keeps the grid cuBLAS sized for every SM and runs it in waves of SMs − CTAs
  (:func:`.gemm_interference.untold_slowdown`);
* any other compute-bound kernel (fused attention: batch × heads × query tiles, many waves)
  runs at the SM share, SMs / (SMs − CTAs);
* a memory-bound kernel keeps its rate on the SMs left but loses the HBM bandwidth the
  collective uses: NCCL reads what it sends and writes what it receives, ``R`` = 2 × its bus
  bytes per rank over its time, so the kernel takes
  ``HBM / (HBM − R)`` × its time.

:func:`beside` prices one kernel as ``(SM-limited seconds, memory-bound seconds)``; a compute
op carries its kernels' sums with the GPU's HBM bandwidth, the SM-limited ones per kind of
collective — NCCL's CTAs, and DeepEP's ``Buffer.num_sms`` where the ``flex`` dispatcher runs
(:attr:`clustersim.program.Op.beside`) — and the engine times it at the kinds and the ``R``
of the collectives running on its GPU
(:func:`~clustersim.hardware.interference.beside_factor`, at the rate of
:func:`~clustersim.hardware.interference.hbm_rate`). Applied where a profile's default
interference is on, the cluster is an NVSwitch node and the GPU has a CTA row
(:func:`~clustersim.hardware.interference.nccl_ctas_for`); a stated
``cluster.comm_compute_slowdown`` and the other cases keep the scalar SM rule.

The other way round, DeepEP's own kernels are slowed by the SMs they are left: a dispatch or
combine on ``Buffer.num_sms`` SMs moves at most those SMs' copy rate
(:mod:`clustersim.hardware.comm_sms`), which :func:`held_rate` gives its collective where
the kernels beside it are priced so (``deepep_sms``); the engine stretches the collective's
fabric time by it (``interference_comm_s``).
"""

from __future__ import annotations

from ..hardware.comm_sms import sm_rate
from .cost_model import CostModel, gemm_batch
from .gemm_interference import untold_slowdown
from .ops import Work


def beside(cm: CostModel, work: Work, seconds: float, ctas: int) -> tuple[float, float]:
    """(SM-limited seconds, memory-bound seconds) of one kernel of ``seconds`` (``work``,
    priced by ``cm``) beside a collective holding ``ctas`` SMs (module doc)."""
    sms = cm.eff.sms
    if work.gemm is None and work.attention is None:
        return seconds, seconds
    if work.gemm is not None and min(work.gemm) > 0:
        return seconds * (untold_slowdown(cm.eff, work.gemm, gemm_batch(work), ctas) or 1.0), 0.0
    return seconds * sms / (sms - ctas), 0.0


def held_rate(cm: CostModel, comm, backward: bool = False) -> float:
    """Bytes/s the SMs a DeepEP dispatch or combine (``comm``, a :class:`~.ops.TPComm`
    holding ``comm.sms``) can copy on ``cm``'s GPU, where the kernels beside it are priced
    kernel by kernel (``cm.deepep_sms``); 0.0 elsewhere (NCCL's, interference off). The
    backward of a dispatch is a combine and the other way round; Megatron-Core's
    ``fused_a2a`` dispatches the BF16 hidden states (DeepEP's ``dispatch_bf16`` rows)."""
    if not (comm.sms and cm.deepep_sms):
        return 0.0
    dispatch = ("dispatch" in comm.name) != backward
    return sm_rate(cm.gpu.name, "deepep", "dispatch_bf16" if dispatch else "combine") * comm.sms
