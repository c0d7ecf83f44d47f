"""Device-level compute variability: straggler GPUs and random per-op noise.

Both become one multiplicative factor per compute op, fixed before the run from the
scenario and ``simulation.seed`` (a generator owned by this call — no global RNG), so the
same scenario and seed always give the same times.
"""

from __future__ import annotations

import numpy as np

from ..program import ARRIVAL_LANE, COMPUTE, Program


def compute_scales(scenario, program: Program) -> list[float] | None:
    """Per-op duration factors (index = op id), or None when every factor is 1."""
    per_device = np.ones(program.num_devices)
    for straggler in scenario.cluster.stragglers:
        for g in straggler.gpus:
            if g < program.num_devices:
                per_device[g] *= straggler.slowdown
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
    compute = np.array([op.kind == COMPUTE and op.lane != ARRIVAL_LANE for op in program.ops])
    return np.where(compute, factors, 1.0).tolist()
