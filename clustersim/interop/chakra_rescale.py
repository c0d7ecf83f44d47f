"""An imported trace replayed at another data-parallel degree (``model.replay_dp``).

A data-parallel trace of N ranks holds, per rank, one replica's work on its own micro-batches
and the collectives that join the replicas (the gradient all-reduce, ZeRO's reduce-scatters
and all-gathers) over all N ranks. Replayed at D ranks, each rank keeps its micro-batches —
the global batch grows by D/N — so rank r runs the ops of traced rank r mod N unchanged (the
same compute times, memory moves and static memory) and every collective spans the D ranks:
its buffer (clustersim's ``nbytes``, the whole tensor reduced or gathered) is the model's,
unchanged, and the cluster's collective algorithms time it over the new group — as a
scenario compiled natively at D ranks does.

Refused, with the reason (:class:`~clustersim.errors.ScenarioError` on ``model.replay_dp``):
a trace with sends or receives (a pipeline: its degree is not changed, and its replicas are
not re-laid here), a collective over fewer than all ranks (tensor, expert or context
parallel groups, whose size is the model's split, not the batch's), a dependency across
ranks, a non-GPU device (a parameter server), a folded Program (``arrivals``, ``shadows``)
and an uneven all-to-all (its byte matrix is per member).
"""

from __future__ import annotations

from ..errors import ScenarioError
from ..program import COLLECTIVE, RECV, SEND, Program

FIELD = "model.replay_dp"


def replay_at_dp(prog: Program, dp: int) -> Program:
    """``prog`` (a data-parallel trace, one rank per replica) replayed on ``dp`` ranks
    (module docstring)."""
    n = prog.num_devices
    _check(prog, dp)
    new_id: dict[tuple[int, int], int] = {}
    copies = [[r for r in range(dp) if r % n == d] for d in range(n)]
    for op in prog.ops:
        for r in copies[op.device]:
            new_id[op.id, r] = len(new_id)
    out = Program(dp)
    everyone = tuple(range(dp))
    for op in prog.ops:
        for r in copies[op.device]:
            copy = type(op).from_row(op.row())
            copy.id, copy.device = new_id[op.id, r], r
            copy.deps = tuple(new_id[d, r] for d in op.deps)
            if op.kind == COLLECTIVE:
                copy.group = everyone
            out.append(copy)
    out.static_memory = [prog.static_memory[r % n] for r in range(dp)]
    out.check()
    return out


def _check(prog: Program, dp: int) -> None:
    """Refuse what :func:`replay_at_dp` cannot give a meaning (module docstring)."""
    n = prog.num_devices
    if not all(name == f"gpu{d}" for d, name in enumerate(prog.device_names)):
        _refuse(dp, f"the trace runs on {prog.device_names} — a device that is no GPU (a parameter server)")
    p2p = next((op for op in prog.ops if op.kind in (SEND, RECV)), None)
    if p2p is not None:
        _refuse(
            dp,
            f"the trace sends between ranks ({p2p.name!r} on rank {p2p.device}): a pipeline, whose "
            "replicas this replay does not re-lay; accepted: a data-parallel trace (collectives only)",
        )
    everyone = tuple(range(n))
    for op in prog.ops:
        if op.kind == COLLECTIVE and tuple(sorted(op.group)) != everyone:
            _refuse(
                dp,
                f"collective {op.name!r} (rank {op.device}) spans ranks {list(op.group)}, not all {n}: a "
                "tensor-, expert- or context-parallel group, sized by the model's split, not the batch",
            )
        if op.arrivals or op.shadows or op.split or op.source >= 0:
            _refuse(dp, f"op {op.name!r} is folded or an uneven all-to-all; accepted: an unfolded trace")
        if any(prog.ops[d].device != op.device for d in op.deps):
            _refuse(dp, f"op {op.name!r} on rank {op.device} depends on another rank's op")


def _refuse(dp: int, why: str) -> None:
    raise ScenarioError(FIELD, dp, f"the trace cannot be replayed at another data-parallel degree: {why}")
