"""Peak memory per GPU of a scenario, estimated WITHOUT simulating — to prune a search.

:func:`estimate_peak_memory` replays the engine's memory ledger over the compiled
Program (:meth:`~clustersim.program.Program.memory_peaks`), folded to one GPU per stage
where folding is exact: every device starts with its static bytes (weights, gradients,
optimizer state, buffers, a second weight copy — whatever the compiler put in
``Program.static_memory``); each op allocates ``mem_alloc`` when it starts and frees
``mem_free`` when it ends. A GPU's passes run one after another, so its ops' Program order
is their time order and the replay's peak is the ledger's peak, for every schedule and
partition — without running the engine.
"""

from __future__ import annotations

from ..compilers import check_job, compile_job
from ..hardware.node_groups import device_memory
from ..resolve import Job, resolve
from ..scenario import Scenario


def estimate_peak_memory(sc: Scenario) -> int:
    """Peak bytes on the fullest GPU of scenario ``sc``, as the simulation would report."""
    return max(device_peak_memory(sc))


def device_peak_memory(sc: Scenario | Job) -> list[int]:
    """Peak bytes of every device (index = device; a folded twin shows 0: see its
    representative), of a scenario or its checked Job (:func:`clustersim.compilers.check_job`)."""
    job = sc if isinstance(sc, Job) else check_job(resolve(sc))
    return [peak for peak, _ in compile_job(job, fold=True).memory_peaks()]


def tightest_fit(sc: Scenario | Job) -> tuple[int, int]:
    """(estimated peak bytes, memory capacity) of the device fullest relative to its own
    GPU's memory — on a uniform cluster the fullest GPU; with ``node_groups`` a small GPU
    may be tighter than a fuller big one."""
    peaks = device_peak_memory(sc)
    caps = device_memory(sc.cluster, len(peaks), sc.num_gpus)
    worst = max(range(len(peaks)), key=lambda d: (peaks[d] / caps[d], peaks[d]))
    return peaks[worst], caps[worst]
