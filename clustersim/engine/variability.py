"""Device-level compute variability: straggler GPUs (constant or random per op),
node-group speed factors, and random per-op noise on every GPU.

All become one multiplicative factor per compute op, fixed before the run from the
scenario and ``simulation.seed`` (a generator owned by this call — no global RNG), so the
same scenario and seed always give the same times.
"""

from __future__ import annotations

import numpy as np

from ..hardware.node_groups import device_factors
from ..program import Program, is_gpu_work


def compute_scales(job, program: Program) -> list[float] | None:
    """Per-op duration factors (index = op id) of a :class:`~clustersim.resolve.Job`'s
    Program, or None when every factor is 1."""
    per_device = device_factors(job.cluster, program.num_devices)
    noise, seed = job.simulation.compute_noise, job.simulation.seed
    noisy = [s for s in job.cluster.stragglers if s.noise is not None]
    if noise is None and not noisy and (per_device == 1.0).all():
        return None
    devices = np.array([op.device for op in program.ops], dtype=int)
    factors = per_device[devices]
    if noise is not None:
        factors = factors * _draw(noise, np.random.default_rng(seed), len(devices))
    for k, straggler in enumerate(job.cluster.stragglers):
        if straggler.noise is not None:  # its own stream per entry: adding one never reshuffles another
            mine = np.isin(devices, straggler.gpus)
            factors[mine] *= _draw(straggler.noise, np.random.default_rng([seed, k + 1]), int(mine.sum()))
    compute = np.array([is_gpu_work(op) for op in program.ops])
    return np.where(compute, factors, 1.0).tolist()


def _draw(noise, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` per-op factors of mean 1 (see NoiseSpec)."""
    if noise.sigma == 0:
        return np.ones(n)
    if noise.distribution == "lognormal":
        return rng.lognormal(-(noise.sigma**2) / 2, noise.sigma, n)
    return np.maximum(rng.normal(1.0, noise.sigma, n), 0.05)
