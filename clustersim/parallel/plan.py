"""Rank ↔ device mapping of a TP × PP × DP plan.

Megatron-LM's order: tensor-parallel ranks vary fastest (so a TP group sits inside one
node), then data-parallel, then pipeline stage::

    device = tp_rank + tp × (dp_rank + dp × stage)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    """Degrees of parallelism and the device numbering that follows from them."""

    tp: int
    pp: int
    dp: int
    gpus_per_node: int

    @classmethod
    def of(cls, sc) -> Plan:
        """The parallel plan of scenario ``sc``."""
        return cls(tp=sc.parallel.tp, pp=sc.parallel.pp, dp=sc.dp, gpus_per_node=sc.cluster.gpus_per_node)

    @property
    def num_devices(self) -> int:
        return self.tp * self.pp * self.dp

    def device(self, stage: int, dp_rank: int = 0, tp_rank: int = 0) -> int:
        """The device index of (stage, dp_rank, tp_rank)."""
        return tp_rank + self.tp * (dp_rank + self.dp * stage)

    def coords(self, device: int) -> tuple[int, int, int]:
        """(stage, dp_rank, tp_rank) of a device index."""
        tp_rank = device % self.tp
        rest = device // self.tp
        return rest // self.dp, rest % self.dp, tp_rank

    def node(self, device: int) -> int:
        """The server (node) a device sits in."""
        return device // self.gpus_per_node

    def dp_group(self, stage: int, tp_rank: int = 0) -> tuple[int, ...]:
        """Devices holding replicas of the same (stage, tp shard): a gradient all-reduce group."""
        return tuple(self.device(stage, r, tp_rank) for r in range(self.dp))
