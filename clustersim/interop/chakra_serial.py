"""One communication node at a time per rank, as ASTRA-sim runs a Chakra trace.

ASTRA-sim's workload layer keeps at most one communication node in flight per NPU — a send
or a collective; receives aside — and one compute node (astra-sim 7e526fb
``workload/HardwareResource.cc``: ``is_available`` refuses a second ``COMM_*`` node while
one is in flight, ``COMM_RECV_NODE`` excepted). A clustersim Program runs its TP
all-reduces, its DP all-reduce and its pipeline sends on separate lanes at the same time;
replayed one at a time in whatever order each rank finds them ready, rank A can hold
collective X while its peer B holds collective Y that waits for A: every NPU stops with
nodes left (the quickstart export did).

:func:`serial_chain` gives each rank's sends and collectives one order that all ranks agree
on: a topological order of the Program's wait graph (:meth:`clustersim.program.Program.wait_graph`:
deps, lane order, a recv after its send, one rendezvous node per collective), taken smallest
id first, in which a collective's members all sit at their rendezvous. Each chained node then
waits only for nodes earlier in that order, so no cycle of waits can form, whatever ASTRA-sim
issues first. The export writes the chain as ``ctrl_deps`` (and lists those edges in the
``clustersim.serial`` attribute, which clustersim's own import leaves out, so the round trip
keeps the Program's concurrency). A send completes without its receive posted (ASTRA-sim's
analytical backend delivers to a receive posted later), so a send needs no rendezvous.
"""

from __future__ import annotations

import heapq

from ..program import COLLECTIVE, SEND, Program


def global_order(program: Program) -> list[int]:
    """Per op id, its place in the order :func:`serial_chain` uses (a collective member's
    is its rendezvous' place)."""
    ops = program.ops
    succ, indeg, tags, _ = program.wait_graph()
    ready = [i for i, k in enumerate(indeg) if k == 0]
    heapq.heapify(ready)
    place = [0] * len(indeg)
    k = 0
    while ready:
        i = heapq.heappop(ready)
        place[i], k = k, k + 1
        for j in succ[i]:
            indeg[j] -= 1
            if not indeg[j]:
                heapq.heappush(ready, j)
    return [place[tags[op.tag]] if op.kind == COLLECTIVE else place[op.id] for op in ops]


def serial_chain(program: Program) -> dict[int, int]:
    """Per send or collective op id, the send or collective of its rank just before it in
    the agreed order (module docstring); a rank's first has none."""
    place = global_order(program)
    per_rank: dict[int, list[int]] = {}
    for op in program.ops:
        if op.kind in (SEND, COLLECTIVE):
            per_rank.setdefault(op.device, []).append(op.id)
    chain: dict[int, int] = {}
    for ids in per_rank.values():
        ids.sort(key=lambda i: (place[i], i))
        chain.update(zip(ids[1:], ids))
    return chain
