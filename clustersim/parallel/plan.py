"""Rank ↔ device mapping of a TP × CP × PP × DP plan, and its expert-parallel groups.

Megatron-Core's order ``tp-cp-ep-dp-pp`` (``parallel_state.initialize_model_parallel``,
``order="tp-cp-ep-dp-pp"``): tensor-parallel ranks vary fastest (so a TP group sits inside
one node), then context-parallel, then data-parallel, then pipeline stage::

    device = tp_rank + tp × (cp_rank + cp × (dp_rank + dp × stage))

The compilers see the cp × dp ranks of one (stage, tp rank) as its *replicas*, numbered
``r = cp_rank + cp × dp_rank`` (with cp = 1, r is the data-parallel rank): every one runs
the stage's passes — a CP rank on its share of each sequence — and the gradient reduction
spans all of them, as Megatron reduces gradients over the data-parallel group *with*
context parallelism (``get_data_parallel_group(with_context_parallel=True)``).

MoE layers regroup the same GPUs (Megatron-Core's "MoE parallel folding",
``megatron/core/parallel_state.py``, ``initialize_model_parallel``: a second
``RankGenerator`` with ``tp = expert_tensor_parallel_size``, ``ep =
expert_model_parallel_size``, ``dp = expert_data_parallel_size``, ``cp = 1``, where
``expert_data_parallel_size = world_size // (etp × ep × pp)`` and the world size must
divide by ``etp × ep × pp``). Within one pipeline stage, the attention side's index
``L = tp_rank + tp × r`` (r the replica above: CP folds into the expert-data-parallel
side) is read in the expert order::

    L = etp_rank + etp × (ep_rank + ep × edp_rank),    edp = tp × cp × dp / (etp × ep)

so with ``etp = tp`` (Megatron-Core's default) an expert-parallel group is ``ep``
consecutive data-parallel replicas of one TP rank: EP is carved out of DP (and, with
cp > 1, out of the CP ranks first: an EP group whose ``ep`` divides cp lies in one CP group).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class Plan:
    """Degrees of parallelism and the device numbering that follows from them."""

    tp: int
    pp: int
    dp: int
    gpus_per_node: int
    cp: int = 1
    #: expert-parallel size and expert-tensor-parallel size (0: tp), module doc
    ep: int = 1
    etp: int = 0

    @classmethod
    def of(cls, sc) -> Plan:
        """The parallel plan of scenario ``sc``."""
        par = sc.parallel
        return cls(
            tp=par.tp,
            pp=par.pp,
            dp=sc.dp,
            gpus_per_node=sc.cluster.gpus_per_node,
            cp=par.cp,
            ep=par.ep,
            etp=par.etp or 0,
        )

    @property
    def replicas(self) -> int:
        """Devices per (stage, tp rank): cp × dp (module docstring)."""
        return self.cp * self.dp

    @property
    def expert_tp(self) -> int:
        """The expert-tensor-parallel size (tp unless set)."""
        return self.etp or self.tp

    @property
    def edp(self) -> int:
        """The expert-data-parallel size: GPUs of a stage holding the same expert shard."""
        return self.tp * self.replicas // (self.expert_tp * self.ep)

    @property
    def num_devices(self) -> int:
        return self.tp * self.pp * self.replicas

    def device(self, stage: int, dp_rank: int = 0, tp_rank: int = 0) -> int:
        """The device index of (stage, replica ``dp_rank`` = cp_rank + cp × dp rank, tp_rank)."""
        return tp_rank + self.tp * (dp_rank + self.replicas * stage)

    def representatives(self, stages):
        """The simulated GPU whose row stands for each device in a folded run, given the
        devices' ``stages`` (an array): its stage's first GPU."""
        return self.device(stages, 0, 0)

    def twin_pairs(self, a: int, b: int) -> tuple[tuple[int, int], ...]:
        """(device of stage ``a``, device of stage ``b``) at every (replica, tp rank) but
        (0, 0): the twins folding leaves out of a transfer between the two stages'
        representatives, in (replica, tp rank) order."""
        offsets = (tt + self.tp * rr for rr in range(self.replicas) for tt in range(self.tp))
        first_a, first_b = self.device(a), self.device(b)
        next(offsets)  # (0, 0): the representatives themselves
        return tuple((first_a + k, first_b + k) for k in offsets)

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

    def coords_of(self, devices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`coords` of every device in the array ``devices``: (stages, replicas, tp ranks)."""
        rest = devices // self.tp
        return rest // self.replicas, rest % self.replicas, devices % self.tp

    def node(self, device: int) -> int:
        """The server (node) a device sits in (elementwise for an array of devices)."""
        return device // self.gpus_per_node

    def dp_group(self, stage: int, tp_rank: int = 0) -> tuple[int, ...]:
        """Devices holding replicas of the same (stage, tp shard): a gradient all-reduce group
        (the data-parallel ranks and, with cp > 1, their context-parallel ranks)."""
        # device(stage, r, tp_rank) for r in 0 .. replicas − 1: a step of tp (built at C speed)
        return tuple(
            range(self.device(stage, 0, tp_rank), self.device(stage, self.replicas, tp_rank), self.tp)
        )

    def expert_coords(self, device: int) -> tuple[int, int, int, int]:
        """(stage, edp_rank, ep_rank, etp_rank) of a device in the expert layout (module doc)."""
        per_stage = self.tp * self.replicas
        stage, local = divmod(device, per_stage)
        etp = self.expert_tp
        return stage, local // (etp * self.ep), (local // etp) % self.ep, local % etp

    def expert_rank(self, device: int) -> int:
        """The expert-parallel rank of a device: which slice of the experts it holds."""
        return self.expert_coords(device)[2]

    def expert_group(self, device: int, kind: str) -> tuple[int, ...]:
        """The devices of ``device``'s expert group of ``kind``: ``ep`` (same stage, edp
        and etp rank), ``etp`` (same stage, edp and ep rank), ``tp_ep`` (same stage and edp
        rank) or ``edp`` (same stage, ep and etp rank: the expert gradients' data-parallel
        group)."""
        stage, d, e, t = self.expert_coords(device)
        etp, base = self.expert_tp, stage * self.tp * self.replicas

        def at(d_, e_, t_):
            return base + t_ + etp * (e_ + self.ep * d_)

        if kind == "ep":
            return tuple(at(d, i, t) for i in range(self.ep))
        if kind == "etp":
            return tuple(at(d, e, i) for i in range(etp))
        if kind == "tp_ep":
            return tuple(at(d, i // etp, i % etp) for i in range(self.ep * etp))
        if kind == "edp":
            return tuple(at(i, e, t) for i in range(self.edp))
        raise ValueError(f"unknown expert group kind {kind!r}; known: ep, etp, tp_ep, edp")

    def expert_groups(self, stage: int, kind: str) -> tuple[tuple[int, ...], ...]:
        """Every expert group of ``kind`` in pipeline ``stage``, in order of first device."""
        return _stage_groups(self, stage, kind)


@lru_cache(maxsize=1024)
def _stage_groups(plan: Plan, stage: int, kind: str) -> tuple[tuple[int, ...], ...]:
    base = stage * plan.tp * plan.replicas
    devices = range(base, base + plan.tp * plan.replicas)
    return tuple(dict.fromkeys(plan.expert_group(d, kind) for d in devices))
