"""Rank ↔ device mapping of a TP × CP × PP × DP plan.

Megatron-Core's order ``tp-cp-ep-dp-pp`` (``parallel_state.initialize_model_parallel``,
``order="tp-cp-ep-dp-pp"``): tensor-parallel ranks vary fastest (so a TP group sits inside
one node), then context-parallel, then data-parallel, then pipeline stage::

    device = tp_rank + tp × (cp_rank + cp × (dp_rank + dp × stage))

The compilers see the cp × dp ranks of one (stage, tp rank) as its *replicas*, numbered
``r = cp_rank + cp × dp_rank`` (with cp = 1, r is the data-parallel rank): every one runs
the stage's passes — a CP rank on its share of each sequence — and the gradient reduction
spans all of them, as Megatron reduces gradients over the data-parallel group *with*
context parallelism (``get_data_parallel_group(with_context_parallel=True)``).
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
    cp: int = 1

    @classmethod
    def of(cls, sc) -> Plan:
        """The parallel plan of scenario ``sc``."""
        par = sc.parallel
        return cls(tp=par.tp, pp=par.pp, dp=sc.dp, gpus_per_node=sc.cluster.gpus_per_node, cp=par.cp)

    @property
    def replicas(self) -> int:
        """Devices per (stage, tp rank): cp × dp (module docstring)."""
        return self.cp * self.dp

    @property
    def num_devices(self) -> int:
        return self.tp * self.pp * self.replicas

    def device(self, stage: int, dp_rank: int = 0, tp_rank: int = 0) -> int:
        """The device index of (stage, replica ``dp_rank`` = cp_rank + cp × dp rank, tp_rank)."""
        return tp_rank + self.tp * (dp_rank + self.replicas * stage)

    def coords(self, device: int) -> tuple[int, int, int]:
        """(stage, replica, tp_rank) of a device index (the replica is the dp rank when cp = 1)."""
        tp_rank = device % self.tp
        rest = device // self.tp
        return rest // self.replicas, rest % self.replicas, tp_rank

    def cp_ring(self, stage: int, replica: int, tp_rank: int = 0) -> tuple[int, ...]:
        """The CP group of a device, in ring order (cp rank 0 … cp−1): the devices holding the
        other shares of its sequences."""
        base = replica - replica % self.cp
        return tuple(self.device(stage, base + c, tp_rank) for c in range(self.cp))

    def node(self, device: int) -> int:
        """The server (node) a device sits in."""
        return device // self.gpus_per_node

    def dp_group(self, stage: int, tp_rank: int = 0) -> tuple[int, ...]:
        """Devices holding replicas of the same (stage, tp shard): a gradient all-reduce group
        (the data-parallel ranks and, with cp > 1, their context-parallel ranks)."""
        return tuple(self.device(stage, r, tp_rank) for r in range(self.replicas))
