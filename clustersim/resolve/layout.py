"""Where each device of a job sits: the protocol the uniform Plan and the stage-replica
layout share.

A uniform TP × PP × DP job is laid out by :class:`~clustersim.parallel.plan.Plan`; a job
with ``parallel.stage_replicas`` by :class:`~clustersim.parallel.replica_layout.ReplicaLayout`
(stage s has its own r_s GPUs, tp = 1). Compilers, result building and the memory columns
read either through :class:`Layout`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Layout(Protocol):
    """Device numbering of a job: ``coords(dev) -> (stage, dp_rank, tp_rank)`` (with stage
    replicas, dp_rank is the device's replica index within its stage), the server a device
    sits in (elementwise for an array of devices), and how many devices there are."""

    tp: int
    pp: int

    @property
    def num_devices(self) -> int: ...

    def device(self, stage: int, dp_rank: int = 0, tp_rank: int = 0) -> int: ...

    def coords(self, device: int) -> tuple[int, int, int]: ...

    def coords_of(self, devices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`coords` of an array of devices, as three arrays."""
        ...

    def node(self, device: int) -> int: ...
