"""The serving engine's own CPU time per step (``generation.host_overhead``; off by default).

vLLM's engine spends CPU time on every step besides the GPU's: scheduling the batch,
preparing its input tensors, the sampler, and processing the outputs (detokenizing, stop
checks). Vidur profiled it for vLLM on an A100 server at batch sizes 8–64 (TP 1, Llama-2-7B)
and adds the sum to every batch's time; ``clustersim/data/serving_host_overhead.csv``
holds those rows with their source. A step of b sequences costs their sum interpolated
linearly in b between the rows, and beyond the first and last rows along their segments.

The step lasts that much longer: its token times move by it, and the GPUs idle while the
host works (placed at the step's end). Off by default: vLLM's later engines overlap much of
this work with the GPU (asynchronous output processing from v0.6.0, the V1 engine's
separate scheduler process), and no public per-step profile of those was found.
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

from ..errors import ScenarioError

HOST_OVERHEAD_CSV = Path(__file__).resolve().parent.parent / "data" / "serving_host_overhead.csv"
#: the columns whose sum is a step's CPU time (Vidur's ``_get_cpu_overhead``)
PARTS = ("schedule_ms", "sampler_ms", "prepare_inputs_ms", "process_outputs_ms", "ray_comm_ms")


@cache
def profile() -> tuple[tuple[int, float], ...]:
    """(batch size, CPU seconds a step) of every row, by batch size."""
    with HOST_OVERHEAD_CSV.open() as fh:
        rows = [(int(r["batch_size"]), sum(float(r[p]) for p in PARTS) * 1e-3) for r in csv.DictReader(fh)]
    return tuple(sorted(rows))


def host_overhead_s(seqs: int) -> float:
    """CPU seconds of a step of ``seqs`` sequences (module doc)."""
    rows = profile()
    i = next((k for k in range(1, len(rows) - 1) if seqs <= rows[k][0]), len(rows) - 1)
    (b0, t0), (b1, t1) = rows[i - 1], rows[i]
    return t0 + (t1 - t0) * (seqs - b0) / (b1 - b0)


def check_host_overhead(sc) -> None:
    """Refuse the overhead where its profile does not apply: one A100 GPU a replica."""
    par, gpu = sc.parallel, sc.cluster.gpu
    if not sc.generation.host_overhead:
        return
    if par.tp * par.pp > 1 or not str(gpu).startswith("A100"):
        raise ScenarioError(
            "generation.host_overhead",
            True,
            f"vLLM's per-step CPU time is profiled with one A100 a replica (Vidur's rows); this job "
            f"runs tp {par.tp} × pp {par.pp} on {gpu}; accepted there: false",
        )
