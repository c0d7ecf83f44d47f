"""The idle-network time of a ring inside one host whose hops differ (members that are not
neighbours on a ``ring`` or torus of direct links, a PCIe tree): exactly the time of the
message-by-message schedule (:mod:`.ring`) on idle links.

Hop i is the route from the i-th member to the next (the last back to the first), with its
step latency λ_i (α plus the route's latency) and bandwidth B_i; a step's chunk is c bytes.
A message of hop i takes h_i = λ_i + c/B_i from issue to arrival, and its sender may issue
its next one c/B_i after the last (it paces at B_i). Rank i's step k waits for the message of
step k − 1 into it and for its own engine, so the schedule's time is its longest chain of
messages: it runs along ℓ consecutive hops (each visit h_i; ``steps`` of them on a ring of
equal hops) and spends its other ``steps − ℓ`` steps waiting on the slowest sender among
them (c/B_min each):

``T = max over start r and ℓ ≤ steps of Σ_{k<ℓ} h_{r+k} + (steps − ℓ)·c / min_{k<ℓ} B_{r+k}``.

With equal bandwidths that is ``steps·c/B`` plus the largest sum of λ over ``steps``
consecutive hops: on ranks 0, 1, 4, 5, … of a 16-GPU ring (hops of 1 and 3 links) an
all-reduce's steps cost 2 links' latency each on average, not the first pair's 1. A
pipelined chain (broadcast from the first member, reduce into it) crosses its n − 1 hops
once and waits k − 1 chunks at its slowest: ``Σ_chain h + (k − 1)·c/B_min``.
"""

from __future__ import annotations

from .cost import Shape


def ring_time(sh: Shape, steps: int, s: float) -> float:
    """Idle time (s) of ``steps`` ring steps of ``s / n`` bytes over ``sh.hops`` (module doc)."""
    hops, n = sh.hops, sh.n
    c = s / n
    best = 0.0
    for r in range(n):
        chain, slowest = 0.0, float("inf")
        for k in range(steps):
            lat, bw = hops[(r + k) % n]
            chain += lat + c / bw
            slowest = min(slowest, bw)
            best = max(best, chain + (steps - k - 1) * c / slowest)
    return best


def chain_time(sh: Shape, kind: str, s: float, chunks: int) -> float:
    """Idle time (s) of a pipelined broadcast from the first member (the chain leaves out the
    hop into it) or reduce into it (leaves out the hop out of it), ``chunks`` chunks."""
    hops = sh.hops[:-1] if kind == "broadcast" else sh.hops[1:]
    c = s / chunks
    return sum(lat + c / bw for lat, bw in hops) + (chunks - 1) * c / min(bw for _, bw in hops)
