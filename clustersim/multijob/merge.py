"""Merge several jobs' Programs into one Program on the shared cluster.

Each job compiles on devices ``0..n-1`` (as if it ran on the cluster's first n GPUs);
merging moves job device ``d`` to cluster GPU ``placement[d]`` (topology node
``gpu{placement[d]}``; a folded job's ``shadows`` and ``source`` too, which name its
folded-away twins), shifts op ids (deps, send/recv peers), renames collective tags
``job/tag`` (two jobs' collectives never rendezvous) and copies each device's static
memory. A job with ``start`` > 0 gets one wait op per device on the ``arrival`` lane
(waiting, not GPU work: no speed factor applies, :data:`clustersim.program.ARRIVAL_LANE`)
that every op first on its lane without dependencies depends on — every other op waits on
one of those through its lane, dependencies, send or collective — so nothing of the job
begins before ``start``.

Each job's ops keep their order, so op ``i`` of job k is op ``offset[k] + i`` of the merged
Program; the engine therefore sees each job exactly as alone, apart from what its messages
share with the other jobs' on the fabric.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ScenarioError
from ..program import ARRIVAL_LANE, COMPUTE, Op, Program

#: the Op fields copied as they are (the ones remapped are set apart)
_KEPT = tuple(
    f
    for f in Op.__slots__
    if f
    not in (
        "id",
        "device",
        "lane",
        "kind",
        "name",
        "deps",
        "peer",
        "group",
        "tag",
        "lane_id",
        "shadows",
        "source",
    )
)
#: name of a job's start-wait op
START_OP = "start"


@dataclass(frozen=True)
class Placed:
    """Where one job's ops sit in the merged Program: ``ops`` is the id range of its own
    ops (op ``i`` of its Program is ``ops.start + i``), ``gpus`` its cluster GPUs by job device."""

    name: str
    ops: range
    gpus: tuple[int, ...]


def merge_programs(
    num_devices: int, jobs: list[tuple[str, Program, tuple[int, ...], float]]
) -> tuple[Program, list[Placed]]:
    """One Program on ``num_devices`` cluster GPUs from ``(name, program, placement,
    start_s)`` per job (module docstring), and where each job's ops landed."""
    merged = Program(num_devices)
    placed = []
    for name, prog, gpus, start in jobs:
        if prog.device_names != [f"gpu{d}" for d in range(len(gpus))]:
            extra = [n for n in prog.device_names if not n.startswith("gpu")]
            raise ScenarioError(
                f"jobs[{name}]",
                extra or prog.device_names,
                "a job of a multi-job scenario runs on GPUs only (a parameter server's hosts are not placed)",
            )
        waits = (
            [merged.add(g, ARRIVAL_LANE, COMPUTE, START_OP, duration=start).id for g in gpus] if start else []
        )
        offset = len(merged.ops)
        lanes_seen: set[tuple[int, str]] = set()
        for op in prog.ops:
            deps = tuple(d + offset for d in op.deps)
            first = (op.device, op.lane) not in lanes_seen
            lanes_seen.add((op.device, op.lane))
            if waits and first and not deps:
                deps = (waits[op.device],)
            merged.add(
                gpus[op.device],
                op.lane,
                op.kind,
                op.name,
                deps=deps,
                peer=op.peer + offset if op.peer >= 0 else -1,
                group=tuple(gpus[d] for d in op.group),
                tag=f"{name}/{op.tag}" if op.tag else "",
                shadows=tuple(tuple(gpus[d] for d in twin) for twin in op.shadows),
                source=gpus[op.source] if op.source >= 0 else -1,
                **{f: getattr(op, f) for f in _KEPT},
            )
        for d, g in enumerate(gpus):
            merged.static_memory[g] = prog.static_memory[d]
        placed.append(Placed(name, range(offset, len(merged.ops)), gpus))
    return merged, placed
