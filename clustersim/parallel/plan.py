"""Rank ↔ device mapping of a TP × PP × DP plan, and its expert-parallel groups.

Megatron-LM's order: tensor-parallel ranks vary fastest (so a TP group sits inside one
node), then data-parallel, then pipeline stage::

    device = tp_rank + tp × (dp_rank + dp × stage)

MoE layers regroup the same GPUs (Megatron-Core's "MoE parallel folding",
``megatron/core/parallel_state.py``, ``initialize_model_parallel``: a second
``RankGenerator`` with ``tp = expert_tensor_parallel_size``, ``ep =
expert_model_parallel_size``, ``dp = expert_data_parallel_size``, order ``tp-ep-dp-pp``,
where ``expert_data_parallel_size = world_size // (etp × ep × pp)`` and the world size must
divide by ``etp × ep × pp``). Within one pipeline stage, the attention side's index
``L = tp_rank + tp × dp_rank`` is read in the expert order::

    L = etp_rank + etp × (ep_rank + ep × edp_rank),    edp = tp × dp / (etp × ep)

so with ``etp = tp`` (Megatron-Core's default) an expert-parallel group is ``ep``
consecutive data-parallel replicas of one TP rank: EP is carved out of DP.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Plan:
    """Degrees of parallelism and the device numbering that follows from them."""

    tp: int
    pp: int
    dp: int
    gpus_per_node: int
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
            ep=par.ep,
            etp=par.etp or 0,
        )

    @property
    def expert_tp(self) -> int:
        """The expert-tensor-parallel size (tp unless set)."""
        return self.etp or self.tp

    @property
    def edp(self) -> int:
        """The expert-data-parallel size: GPUs of a stage holding the same expert shard."""
        return self.tp * self.dp // (self.expert_tp * self.ep)

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

    def expert_coords(self, device: int) -> tuple[int, int, int, int]:
        """(stage, edp_rank, ep_rank, etp_rank) of a device in the expert layout (module doc)."""
        per_stage = self.tp * self.dp
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
        etp, base = self.expert_tp, stage * self.tp * self.dp

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
    base = stage * plan.tp * plan.dp
    devices = range(base, base + plan.tp * plan.dp)
    return tuple(dict.fromkeys(plan.expert_group(d, kind) for d in devices))
