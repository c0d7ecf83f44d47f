"""Shared builders for test scenarios."""

from __future__ import annotations

import pytest


def synthetic(
    p: int = 4,
    m: int = 8,
    f: float = 1e-3,
    b: float = 2e-3,
    *,
    layers_per_stage: int = 1,
    schedule: str = "1f1b",
    activation: float = 0,
    params: float = 0,
    optimizer: float = 0.0,
    bandwidth: float = 1e11,
    latency: float = 0.0,
    iterations: int = 1,
    dp: int = 1,
    network: str = "direct",
    gpus_per_node: int | None = None,
) -> dict:
    """A synthetic pipeline scenario dict: p stages of ``f``/``b`` seconds per micro-batch."""
    L = p * layers_per_stage
    n = p * dp
    return {
        "name": f"synthetic-p{p}-m{m}-{schedule}",
        "cluster": {
            "nodes": 1,
            "gpus_per_node": gpus_per_node or n,
            "gpu": "A100-SXM4-80GB",
            "intra_node": {"bandwidth": bandwidth, "latency": latency},
        },
        "model": {
            "kind": "synthetic",
            "layers": L,
            "forward": f / layers_per_stage,
            "backward": b / layers_per_stage,
            "activation": activation,
            "params": params,
            "optimizer": optimizer,
        },
        "training": {"global_batch": m * dp, "micro_batch": 1},
        "parallel": {"pp": p, "dp": dp, "schedule": schedule},
        "simulation": {"iterations": iterations, "network": network},
    }


@pytest.fixture
def make_synthetic():
    return synthetic
