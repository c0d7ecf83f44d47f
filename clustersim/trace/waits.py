"""Who waited for whom: for every op that started later than its lane was free, the op
(and the GPU) it waited for.

An op may start when its lane is free (the previous op on the lane ended) and every
dependency has ended. When the last dependency ends after the lane became free, the lane
sat idle for ``waited_s`` = (that dependency's end − lane free time), *waiting for* that
dependency — its immediate cause, the edge a critical-path walk would follow (sends and
recvs are left out: a send lane idles until its data exists by design). For a
dependency that is a ``recv``, the GPU waited for is the sender. A collective starts
when its last member arrives (rendezvous): every other member waited for the last one,
``waited_s`` = start − the member's own ready time.

Rows (``res.waits``): device, lane, op, stage, microbatch, iteration, start_s, waited_s,
waited_for_device, waited_for_op, reason (``data`` or ``rendezvous``). Sum ``waited_s``
over (device, waited_for_device) for a who-waited-for-whom matrix.
"""

from __future__ import annotations

import pandas as pd

from ..program import RECV, SEND, Program

COLUMNS = [
    "device",
    "lane",
    "op",
    "stage",
    "microbatch",
    "iteration",
    "start_s",
    "waited_s",
    "waited_for_device",
    "waited_for_op",
    "reason",
]


def wait_table(program: Program, recorded: list[tuple[int, float, float]]) -> pd.DataFrame:
    """The waits of a run from its Program and ``Recorder.ops`` (module docstring)."""
    ops = program.ops
    start, end = {}, {}
    for i, s, e in recorded:
        start[i], end[i] = s, e
    lane_free, blocker = {}, {}  # op id → when its lane was free; the dep that ended after that, if any
    for lane_ops in program.lanes().values():
        free = 0.0
        for op in lane_ops:
            if op.id not in end:
                break  # a stalled run: the rest of the lane never ran
            last = max(op.deps, key=lambda d: end.get(d, -1.0), default=None)
            lane_free[op.id] = free
            blocker[op.id] = last if last is not None and end.get(last, 0.0) > free else None
            free = end[op.id]

    def ready(i: int) -> float:  # when op i could have started
        return end[blocker[i]] if blocker[i] is not None else lane_free[i]

    names = program.device_names
    rows = []
    for op in ops:
        if op.id not in lane_free:
            continue
        dep = blocker[op.id]
        if (
            dep is not None and op.kind is not RECV and op.kind is not SEND
        ):  # a send waiting for its data is no wait
            who = ops[ops[dep].peer].origin() if ops[dep].kind is RECV else ops[dep].device
            rows.append(
                _row(names, op, start[op.id], end[dep] - lane_free[op.id], who, ops[dep].name, "data")
            )
    for group in program.collective_members().values():
        members = [op.id for op in group if op.id in lane_free]
        if not members:
            continue
        last = max(members, key=ready)
        for i in members:
            gap = start[i] - ready(i)
            if i != last and gap > 0:
                rows.append(
                    _row(names, ops[i], start[i], gap, ops[last].device, ops[last].name, "rendezvous")
                )
    df = pd.DataFrame.from_records(rows, columns=COLUMNS)
    return df.sort_values(["start_s", "device"], kind="stable").reset_index(drop=True)


def _row(names, op, start_s: float, waited_s: float, who: int, what: str, reason: str) -> tuple:
    return (
        names[op.device],
        op.lane,
        op.name,
        op.stage,
        op.microbatch,
        op.iteration,
        start_s,
        waited_s,
        names[who],
        what,
        reason,
    )
