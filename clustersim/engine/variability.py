"""Device-level compute variability: straggler GPUs, node-group speed factors, random noise.

All become one multiplicative factor per compute op, fixed before the run from the
scenario and ``simulation.seed`` (a generator owned by this call — no global RNG), so the
same scenario and seed always give the same times.
"""

from __future__ import annotations

import numpy as np

from ..program import COMPUTE, Program


def device_factors(cluster, num_devices: int) -> np.ndarray:
    """Per-device compute time factors: straggler slowdowns ÷ node-group speed factors."""
    from ..hardware.node_groups import device_speeds

    per_device = 1.0 / np.array(device_speeds(cluster)[:num_devices], dtype=float)
    for straggler in cluster.stragglers:
        for g in straggler.gpus:
            if g < num_devices:
                per_device[g] *= straggler.slowdown
    return per_device


def compute_scales(scenario, program: Program) -> list[float] | None:
    """Per-op duration factors (index = op id), or None when every factor is 1."""
    per_device = device_factors(scenario.cluster, program.num_devices)
    noise = scenario.simulation.compute_noise
    if noise is None and (per_device == 1.0).all():
        return None
    factors = per_device[[op.device for op in program.ops]]
    if noise is not None and noise.sigma > 0:
        rng = np.random.default_rng(scenario.simulation.seed)
        if noise.distribution == "lognormal":
            draw = rng.lognormal(-noise.sigma**2 / 2, noise.sigma, len(program.ops))
        else:
            draw = np.maximum(rng.normal(1.0, noise.sigma, len(program.ops)), 0.05)
        factors = factors * draw
    compute = np.array([op.kind == COMPUTE for op in program.ops])
    return np.where(compute, factors, 1.0).tolist()
