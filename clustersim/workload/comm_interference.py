"""What a NCCL collective overlapped with compute costs the kernels beside it: SMs and HBM.

NCCL runs a collective as one CTA per channel (``enqueue.cc``: the kernel's grid is its
channel count), each holding an SM for the whole call. On an 8-GPU NVSwitch node NCCL opens
24 ring channels on A100 and H100 (rows of ``data/interference_measurements.csv``,
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
  bytes per rank over its time (:func:`hbm_rate`), so the kernel takes
  ``HBM / (HBM − R)`` × its time.

:func:`beside` prices one kernel as ``(SM-limited seconds, memory-bound seconds)``; a compute
op carries its kernels' sums with the GPU's HBM bandwidth (:attr:`clustersim.program.Op.beside`)
and the engine times it at the ``R`` of the collectives running on its GPU
(:func:`beside_factor`). Applied where a profile's default interference is on, the cluster
is an NVSwitch node and the GPU has a CTA row (:func:`nccl_ctas_for`); a stated
``cluster.comm_compute_slowdown`` and the other cases keep the scalar SM rule.
"""

from __future__ import annotations

from ..hardware.interference import default_slowdown, nccl_ctas
from .cost_model import CostModel, gemm_batch
from .gemm_interference import untold_slowdown
from .ops import Work

#: bus bytes per rank of a collective of ``S`` bytes over ``n`` ranks, as a multiple of
#: (n − 1)/n · S (nccl-tests' busbw factors); kinds not named move ``S``
BUS_FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}

#: a kernel keeps at least this share of HBM: the bound on the summed rate of the
#: collectives beside it (each reads and writes at most twice its link bandwidth)
MIN_HBM_SHARE = 0.5


def nccl_ctas_for(cluster, gpu: str) -> int:
    """NCCL CTAs the kernels of catalog GPU ``gpu`` beside a collective are priced with on
    ``cluster`` (a :class:`~clustersim.scenario.cluster_spec.ClusterSpec`), or 0 where the
    scalar SM rule stays: interference off or stated (not the GPU's default), not an NVSwitch
    node, or no CTA row for the GPU."""
    slowdown = cluster.comm_compute_slowdown
    if slowdown == 1.0 or slowdown != default_slowdown(gpu) or cluster.intra_node.kind != "nvswitch":
        return 0
    return nccl_ctas(gpu) or 0


def beside(cm: CostModel, work: Work, seconds: float, ctas: int) -> tuple[float, float]:
    """(SM-limited seconds, memory-bound seconds) of one kernel of ``seconds`` (``work``,
    priced by ``cm``) beside a collective holding ``ctas`` SMs (module doc)."""
    sms = cm.eff.sms
    if work.gemm is None and work.attention is None:
        return seconds, seconds
    if work.gemm is not None and min(work.gemm) > 0:
        return seconds * (untold_slowdown(cm.eff, work.gemm, gemm_batch(work), ctas) or 1.0), 0.0
    return seconds * sms / (sms - ctas), 0.0


def hbm_rate(kind: str, ranks: int, nbytes: float, seconds: float) -> float:
    """HBM bytes per second a collective moves on each rank: it reads what it sends and
    writes what it receives, 2 × its bus bytes over ``seconds`` (0 for no time)."""
    if seconds <= 0 or ranks <= 1:
        return 0.0
    share = BUS_FACTOR[kind] * (ranks - 1) / ranks if kind in BUS_FACTOR else 1.0
    return 2.0 * share * nbytes / seconds


def beside_factor(carried: tuple[float, float, float], duration: float, rate: float) -> float:
    """How many times longer a compute op of ``duration`` s takes beside collectives moving
    ``rate`` HBM bytes/s on its GPU; ``carried`` = (SM-limited s, memory-bound s, HBM B/s)."""
    sm_s, mem_s, hbm = carried
    share = max(1.0 - rate / hbm, MIN_HBM_SHARE)
    return (sm_s + mem_s * (1.0 / share - 1.0)) / duration
