"""PAT, NCCL's Parallel Aggregated Trees (NCCL 2.23+, ``NCCL_ALGO=PAT``; Jeaugey, "PAT: a
new algorithm for all-gather and reduce-scatter operations at scale", arXiv 2506.20252):
all-gather and reduce-scatter in a logarithmic number of steps, at one GPU per node (NCCL
enables it only there: tuning.cc ``ncclPatEnable``, "PAT only supports 1 GPU per node").

PAT is Bruck's all-gather with its dimensions reversed: over L = ⌈log2 n⌉ steps a rank
exchanges with the rank 2^(L−1), then 2^(L−2), … 1 away, the farthest first (so the last,
largest steps stay short-distance), sending what it has gathered so far: 1, 2, 4, … blocks of
S/n (the last step the n − 2^(L−1) blocks still missing: n − 1 in all). A reduce-scatter runs
the same steps backwards, partial sums shrinking to one block. On idle links of bandwidth B
and step latency α:
``T = L·α + (n − 1)/n · S/B`` — the ring's bandwidth term with log n latencies instead of
n − 1. NCCL bounds the aggregation by its buffers (more, smaller steps at large sizes) and
its tuner rates PAT at 0.75 of the ring's bandwidth (tuning.cc ``busBw *= .75``); neither is
in the schedule here, which is the unbounded form.
"""

from __future__ import annotations

from .algorithm import ALGORITHMS, Algorithm, never
from .cost import Shape
from .schedule import Msg, split


def blocks(n: int) -> list[tuple[int, int]]:
    """(distance, blocks sent) of each all-gather step on ``n`` ranks, in order."""
    steps = max(1, (n - 1).bit_length())
    out = []
    for t in range(steps):
        dist = 1 << (steps - 1 - t)
        out.append((dist, min(1 << t, n - (1 << t))))
    return out


def build(group, kind: str, nbytes: int, options):
    """The PAT schedule of an all-gather or reduce-scatter on ``group`` (module doc)."""
    env, order = group.env, group.members
    n = len(order)
    block = split(nbytes, n)[0]
    plan = blocks(n)
    if kind == "reduce_scatter":
        plan = plan[::-1]
    engines = {r: [] for r in order}
    have = {r: () for r in order}
    for dist, count in plan:
        sent = {}
        for i, r in enumerate(order):
            msg = Msg(env, r, order[(i - dist) % n], count * block, have[r])
            engines[r].append(msg)
            sent[order[(i - dist) % n]] = msg
        have = {r: (sent[r].done,) for r in order}
    return list(engines.values()), have


def fits(kind: str, n: int, per_host: tuple[int, ...]) -> str | None:
    """PAT runs at one GPU per node, as NCCL enables it."""
    if any(k != 1 for k in per_host):
        return f"pat runs at one GPU per node (NCCL's rule); got {max(per_host)} on a node"
    return None


def cost(sh: Shape, kind: str, s: float, _servers: int) -> float:
    """Idle-network α-β time (s) of ``kind`` on ``s`` bytes by PAT (module doc)."""
    a_n, b_n = sh.net
    n = sh.n
    return sum(a_n + count * (s / n) / b_n for _, count in blocks(n))


ALGORITHMS.add(
    Algorithm(
        "pat",
        "NCCL's PAT: log-step all-gather / reduce-scatter at one GPU per node",
        kinds=frozenset({"all_gather", "reduce_scatter"}),
        factory=build,
        cost=cost,
        rank=8,
        fits=fits,
        in_auto=never,
        protocols=frozenset({"simple"}),
    )
)
