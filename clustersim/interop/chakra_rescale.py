"""An imported trace replayed at another data-parallel degree (``model.replay_dp``).

A data-parallel trace holds D replicas of the model, each of P ranks (P = 1 without a
pipeline; the ranks of a pipeline replica are joined by its sends and receives and labelled
by ``clustersim.stage``), each replica working on its own micro-batches, and collectives of
two kinds: over one rank of every replica at the same stage (the gradient all-reduce,
ZeRO's reduce-scatters and all-gathers: the data-parallel groups) or within one replica (a
tied embedding's all-reduce between its first and last stage). Replayed at D' replicas,
each keeps its micro-batches — the global batch grows by D'/D — so replica j' runs the ops
of traced replica j' mod D unchanged (the same compute times, memory moves and static
memory); a data-parallel collective spans the D' ranks of its stage, its buffer (clustersim's
``nbytes``, the whole tensor reduced or gathered) the model's, unchanged, timed by the
cluster's collective algorithms over the new group — as a scenario compiled natively at D'
replicas is. The ranks are laid out as the trace lays them: stage-major (rank = stage
position × D + replica, clustersim's layout) or replica-major (replica × P + position).

The pipeline degree is the trace's: its stages are the partition of the model the trace
recorded, which a replay cannot re-cut. Refused, with the reason (:class:`ScenarioError` on
``model.replay_dp``): sends in a trace whose ops carry no ``clustersim.stage`` label,
replicas of different shapes or a layout of neither kind, a collective neither within one
replica nor over one rank of each (a tensor-, expert- or context-parallel group, whose size
is the model's split, not the batch's), a dependency across ranks, a non-GPU device (a
parameter server), a folded Program (``arrivals``, ``shadows``) and an uneven all-to-all.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NoReturn

from ..errors import ScenarioError
from ..program import COLLECTIVE, RECV, SEND, Program

FIELD = "model.replay_dp"


def replay_at_dp(prog: Program, dp: int) -> Program:
    """``prog`` replayed at ``dp`` data-parallel replicas (module docstring)."""
    refuse = partial(_refuse, dp)
    check_replayable(prog, refuse)
    replicas = replica_ranks(prog, refuse)
    traced, size = len(replicas), len(replicas[0])
    place = partial(rank_layout(replicas, refuse), size=size)
    where = {rank: (j, p) for j, ranks in enumerate(replicas) for p, rank in enumerate(ranks)}
    kinds = {op.tag: _group_kind(op, where, traced, refuse) for op in prog.ops if op.kind == COLLECTIVE}
    copies: list[list[int]] = [[] for _ in range(prog.num_devices)]  # traced rank → new replicas
    for j in range(dp):
        for p in range(size):
            copies[place(j % traced, p, traced)].append(j)
    new_id = {}
    for op in prog.ops:
        for j in copies[op.device]:
            new_id[op.id, j] = len(new_id)
    out = Program(size * dp)
    for op in prog.ops:
        p = where[op.device][1]
        for j in copies[op.device]:
            copy = type(op).from_row(op.row())
            copy.id, copy.device = new_id[op.id, j], place(j, p, dp)
            copy.deps = tuple(new_id[d, j] for d in op.deps)
            if op.kind in (SEND, RECV):
                copy.peer = new_id[op.peer, j]
            if op.kind == COLLECTIVE and kinds[op.tag] == "dp":
                copy.group = tuple(place(k, p, dp) for k in range(dp))
            elif op.kind == COLLECTIVE:
                copy.group = tuple(place(j, where[m][1], dp) for m in op.group)
            if j >= traced and (op.kind != COLLECTIVE or kinds[op.tag] != "dp"):
                copy.tag = f"{op.tag} @replica{j}"  # a copied replica's own collective
            out.append(copy)
    for j in range(dp):
        for p in range(size):
            out.static_memory[place(j, p, dp)] = prog.static_memory[place(j % traced, p, traced)]
    out.check()
    return out


def check_replayable(prog: Program, refuse: Callable[[str], NoReturn]) -> None:
    """``refuse`` the reason a Program no replica structure can be read from (module docstring)."""
    if not all(name == f"gpu{d}" for d, name in enumerate(prog.device_names)):
        refuse(f"the trace runs on {prog.device_names} — a device that is no GPU (a parameter server)")
    for op in prog.ops:
        if op.arrivals or op.shadows or op.split or op.source >= 0:
            refuse(f"op {op.name!r} is folded or an uneven all-to-all; accepted: an unfolded trace")
        if any(prog.ops[d].device != op.device for d in op.deps):
            refuse(f"op {op.name!r} on rank {op.device} depends on another rank's op")


def replica_ranks(prog: Program, refuse: Callable[[str], NoReturn]) -> list[list[int]]:
    """The ranks of each replica — joined by sends — ordered by stage, replicas by their
    first rank; refused unless the ranks of a pipeline carry stage labels and every replica
    holds the same stages."""
    parent = list(range(prog.num_devices))

    def root(r: int) -> int:
        while parent[r] != r:
            r = parent[r]
        return r

    stages: list[set] = [set() for _ in range(prog.num_devices)]
    sends = False
    for op in prog.ops:
        stages[op.device].add(op.stage)
        if op.kind == SEND:
            sends = True
            parent[root(op.device)] = root(prog.ops[op.peer].device)
    if sends and any(-1 in s for s in stages):
        rank = next(r for r, s in enumerate(stages) if -1 in s)
        refuse(
            f"the trace sends between ranks but rank {rank}'s ops carry no clustersim.stage label, "
            "so its pipeline stages cannot be told apart; accepted: a trace clustersim exported, or "
            "one without sends",
        )
    groups: dict[int, list[int]] = {}
    for r in range(prog.num_devices):
        groups.setdefault(root(r), []).append(r)
    replicas = sorted(sorted(g, key=lambda r: (min(stages[r]), r)) for g in groups.values())
    shape = [stages[r] for r in replicas[0]]
    for ranks in replicas:
        if [stages[r] for r in ranks] != shape:
            refuse(f"replicas {replicas[0]} and {ranks} hold different stages; accepted: equal replicas")
    return replicas


def rank_layout(replicas: list[list[int]], refuse: Callable[[str], NoReturn]):
    """``place(replica, position, replicas, size)`` → rank of ``replicas`` replicas of ``size``
    ranks each, in the trace's layout: stage-major or replica-major (refused if it is neither)."""
    traced, size = len(replicas), len(replicas[0])

    def stage_major(j: int, p: int, d: int, size: int) -> int:
        return p * d + j

    def replica_major(j: int, p: int, d: int, size: int) -> int:
        return j * size + p

    for place in (stage_major, replica_major):
        if all(replicas[j][p] == place(j, p, traced, size) for j in range(traced) for p in range(size)):
            return place
    return refuse(f"replicas {replicas[:4]} are laid out neither stage-major nor replica-major")


def _group_kind(op, where: dict, traced: int, refuse: Callable[[str], NoReturn]) -> str:
    """``dp``: a collective over one rank of each replica at one position; ``replica``: one
    within a replica; anything else is refused."""
    spots = [where[m] for m in op.group]
    if len({p for _, p in spots}) == 1 and sorted(j for j, _ in spots) == list(range(traced)):
        return "dp"
    if len({j for j, _ in spots}) == 1:
        return "replica"
    return refuse(
        f"collective {op.name!r} (rank {op.device}) spans ranks {list(op.group)}, neither one rank of each "
        f"of the {traced} replicas nor one replica: a tensor-, expert- or context-parallel group, sized by "
        "the model's split, not the batch",
    )


def _refuse(dp: int, why: str) -> NoReturn:
    raise ScenarioError(FIELD, dp, f"the trace cannot be replayed at another data-parallel degree: {why}")
