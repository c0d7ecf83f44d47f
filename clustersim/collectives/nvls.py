"""NVLS: NCCL's in-switch reduction on an NVSwitch with NVLink SHARP (``NCCL_ALGO=NVLS``;
NCCL ``src/device/all_reduce.h`` ``runRing``'s NVLS sibling, multimem ``ld_reduce`` /
``st``), one host (HGX/DGX H100, H200, H800, B200; an NVL72 rack).

The switch does the arithmetic. An all-reduce of S bytes over the m GPUs of a host, cut into
k chunks of m shards: for each chunk every GPU sends each shard to the switch, which adds
the m copies of shard j and hands the sum to GPU j (the reduce-scatter, ``ld_reduce``); GPU
j sends its reduced shard back to the switch, which writes it to every GPU (the multicast
all-gather, ``st``). A GPU's link to the switch carries S + S/m out and S/m + S in, against
a ring's 2(m − 1)/m · S each way, and the two halves overlap chunk by chunk — why NVLS's
bus bandwidth passes the ring's (~480 against ~370 GB/s on 8 × H100: nccl-tests #212). The
switch's multicast objects span every GPU's memory, its own included, so a GPU's own shard
crosses its link too. NCCL's tuner rates NVLS at ``nvlsEfficiency`` of the NVLink bandwidth
(tuning.cc: Hopper 0.85, Blackwell 0.74); its messages take their bytes / that efficiency
of link time (:attr:`~.cost.Shape.nvls`). A reduce-scatter is the first half, an all-gather
the second. NVLS across hosts (NVLSTree, CollNet) is not modelled: one host only. It runs
the Simple protocol only (NCCL: ``NVLS && p != NCCL_PROTO_SIMPLE`` is skipped).

Idle time on link bandwidth B and step α, efficiency e:
``T_AR = 4·α + (1 + 1/k) · S·(1 + 1/m)/(e·B)``; ``T_RS = T_AG = 2·α + (1 + 1/k) · S/(e·B)``.
"""

from __future__ import annotations

import math

from .algorithm import ALGORITHMS, Algorithm, never
from .cost import Shape
from .ring import pipeline_chunks
from .schedule import Msg, all_of, split

#: chunks a GPU's reduce-scatter may run ahead of its all-gather: NCCL's buffer slots per
#: connection (src/include/device.h ``NCCL_STEPS``), so neither half starves the other
WINDOW = 8


def build(group, kind: str, nbytes: int, options):
    """The NVLS schedule of ``kind`` on ``group`` (one host; module doc)."""
    env, members = group.env, group.members
    m, eff = len(members), group.shape().nvls
    switch = group.path(members[0], members[1])[2][1]
    k = pipeline_chunks(-(-int(nbytes) // m), options.chunks)
    wire = [[math.ceil(b / eff) for b in split(part, m)] for part in split(nbytes, k)]
    ups = {r: [] for r in members}  # engine: a GPU's copies to the switch, in order
    gathers = {r: [] for r in members}  # engine: a GPU's reduced shards back to the switch
    sums = {r: [] for r in members}  # engine: the switch's reduced shards to GPU r
    casts = {r: [] for r in members}  # engine: the switch's multicast writes to GPU r
    have = {}  # (chunk, shard j) → the event after which GPU j holds the shard to spread
    for q, shards in enumerate(wire):
        if kind in ("all_reduce", "reduce_scatter"):
            copies = {}  # shard j → every GPU's copy of it on its way to the switch
            for r in members:  # shard by shard, so the first sums are ready soonest
                slot = gathers[r][q - WINDOW].done if q >= WINDOW and gathers[r] else None
                for j in range(m):
                    msg = Msg(env, r, switch, shards[j], (slot,) if slot is not None else ())
                    ups[r].append(msg)
                    copies.setdefault(j, []).append(msg.done)
            for j, r in enumerate(members):
                msg = Msg(env, switch, r, shards[j], all_of(copies[j]))  # one readiness, not m deps
                sums[r].append(msg)
                have[q, j] = (msg.done,)
        if kind in ("all_reduce", "all_gather"):
            for j, r in enumerate(members):
                msg = Msg(env, r, switch, shards[j], have.get((q, j), ()))
                gathers[r].append(msg)
                for dst in members:
                    casts[dst].append(Msg(env, switch, dst, shards[j], (msg.done,)))
    engines = [prog for prog in (*ups.values(), *sums.values(), *gathers.values(), *casts.values()) if prog]
    alpha = group.alpha["intra_node"]  # a GPU ↔ switch step (the switch is no member)
    for prog in engines:
        for msg in prog:
            msg.alpha = alpha
    return engines, {}


def fits(kind: str, n: int, per_host: tuple[int, ...]) -> str | None:
    """NVLS reduces inside one host's switch (across hosts NCCL runs NVLSTree/CollNet, not
    modelled)."""
    if len(per_host) > 1:
        return f"nvls runs inside one host's NVSwitch; the group spans {len(per_host)} hosts"
    return None


def hardware(sh: Shape) -> str | None:
    """NVLS needs an NVSwitch with NVLink SHARP (Hopper or Blackwell systems)."""
    if sh.nvls <= 0:
        return "nvls needs the GPUs to meet at an NVSwitch with NVLink SHARP (Hopper or Blackwell HGX/DGX, NVL72)"
    return None


def cost(sh: Shape, kind: str, s: float, _servers: int) -> float:
    """Idle-network α-β time (s) of ``kind`` on ``s`` bytes by NVLS (module doc)."""
    m = sh.n
    k = pipeline_chunks(-(-int(s) // m))
    if kind == "all_reduce":
        return 4 * sh.alpha + (1 + 1 / k) * s * (1 + 1 / m) / (sh.nvls * sh.bw)
    return 2 * sh.alpha + (1 + 1 / k) * s / (sh.nvls * sh.bw)


ALGORITHMS.add(
    Algorithm(
        "nvls",
        "NVLink SHARP: reduction in the NVSwitch (one host)",
        kinds=frozenset({"all_reduce", "reduce_scatter", "all_gather"}),
        factory=build,
        cost=cost,
        rank=7,
        fits=fits,
        in_auto=never,
        hardware=hardware,
        protocols=frozenset({"simple"}),
    )
)
