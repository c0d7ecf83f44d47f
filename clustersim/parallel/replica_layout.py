"""Device numbering of a pipeline whose stages have their own replication (``parallel.stage_replicas``).

Stage s holds r_s GPUs, numbered consecutively (stage 0 on devices 0..r_0−1, stage 1 on
the next r_1, …); micro-batch j runs on replica ``j % r_s`` of stage s
(:mod:`clustersim.compilers.replicated`).
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

import numpy as np


class ReplicaLayout:
    """Device numbering of a pipeline with ``replicas[s]`` GPUs on stage s (tp = 1).

    Offers the part of :class:`~clustersim.parallel.plan.Plan`'s interface that
    :func:`clustersim.compilers.pipeline.passes.emit_pass` and result building use (``device``, ``coords``, ``node``,
    ``tp``, ``pp``, ``num_devices``)."""

    tp = 1

    def __init__(self, replicas: list[int] | tuple[int, ...], gpus_per_node: int):
        self.replicas = tuple(replicas)
        self.pp = len(self.replicas)
        self.gpus_per_node = gpus_per_node
        self.first = (0, *accumulate(self.replicas))  # first device of each stage, and the total

    @property
    def num_devices(self) -> int:
        return self.first[-1]

    def device(self, stage: int, replica: int = 0, tp_rank: int = 0) -> int:
        """The device of ``replica`` of ``stage``."""
        return self.first[stage] + replica

    def coords(self, device: int) -> tuple[int, int, int]:
        """(stage, replica, tp_rank = 0) of a device."""
        stage = bisect_right(self.first, device) - 1
        return stage, device - self.first[stage], 0

    def coords_of(self, devices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`coords` of every device in the array ``devices``."""
        stage = np.searchsorted(self.first, devices, side="right") - 1
        return stage, devices - np.asarray(self.first)[stage], np.zeros_like(devices)

    def node(self, device: int) -> int:
        """The server a device sits in (elementwise for an array of devices)."""
        return device // self.gpus_per_node

    def replica_of(self, stage: int, j: int) -> int:
        """The replica of ``stage`` that runs (run-wide) micro-batch ``j``: round robin."""
        return j % self.replicas[stage]

    def group(self, stage: int) -> tuple[int, ...]:
        """The stage's replicas: its gradient all-reduce group."""
        return tuple(range(self.first[stage], self.first[stage + 1]))
