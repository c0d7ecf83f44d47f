"""A schedule's per-stage orders for a whole run, normalized and checked.

The compiler works on one list per stage of ``(phase, j, k)`` triples over the whole
run: ``j`` the run-wide micro-batch index (iteration ``j // m``, micro-batch ``j % m``),
``k`` the model chunk, and ``("O", i, -1)`` for the i-th optimizer step. A flushing
schedule's order is called once per iteration and gets an ``O`` appended; an
asynchronous one returns the whole run itself.
"""

from __future__ import annotations

from ..errors import ProgramError
from .registry import Schedule

PASS_PHASES = ("F", "B", "W")


def stage_chunks(schedule: Schedule, stage: int, p: int, v: int) -> list[int]:
    """The model chunks (of p·v) held by ``stage``, in model order."""
    return [k for k in range(p * v) if schedule.stage_of(k, p) == stage]


def _call(schedule: Schedule, stage: int, p: int, m: int, v: int, iterations: int) -> list:
    kwargs = {}
    if schedule.chunks != 1:
        kwargs["v"] = v
    if not schedule.flush:
        kwargs["iterations"] = iterations
    return list(schedule.order(stage, p, m, **kwargs))


def _normalize(schedule: Schedule, stage: int, order: list, default_chunk: int) -> list[tuple[str, int, int]]:
    out = []
    for item in order:
        if not isinstance(item, tuple) or len(item) not in (2, 3) or item[0] not in PASS_PHASES + ("O",):
            raise ProgramError(
                f"schedule {schedule.name!r} stage {stage}: {item!r} is not an order item; "
                f"accepted: (phase, microbatch) or (phase, microbatch, chunk), phase in F, B, W, O"
            )
        if item[0] == "O":
            out.append(("O", int(item[1]), -1))
        else:
            out.append((item[0], int(item[1]), int(item[2]) if len(item) == 3 else default_chunk))
    return out


def check_order(
    schedule: Schedule, stage: int, order: list[tuple[str, int, int]], mbs: int, chunks: list[int]
) -> None:
    """Raise ProgramError unless ``order`` runs F and B of every (micro-batch, chunk) exactly
    once, at most one W each, B after F and W after B."""
    passes = [(ph, j, k) for ph, j, k in order if ph != "O"]
    want = sorted((ph, j, k) for ph in ("F", "B") for j in range(mbs) for k in chunks)
    got = sorted(x for x in passes if x[0] != "W")
    if got != want:
        shown = [x[:2] if len(chunks) == 1 else x for x in passes[:12]]
        raise ProgramError(
            f"schedule {schedule.name!r} stage {stage}: the order must hold F and B of every micro-batch "
            f"0..{mbs - 1}{f' and chunk in {chunks}' if len(chunks) > 1 else ''} exactly once; "
            f"got {shown}{' …' if len(passes) > 12 else ''}"
        )
    pos = {x: i for i, x in enumerate(passes)}
    ws = [x for x in passes if x[0] == "W"]
    if len(set(ws)) != len(ws) or any(("F", j, k) not in pos for _, j, k in ws):
        raise ProgramError(
            f"schedule {schedule.name!r} stage {stage}: each W must belong to one of the stage's "
            f"micro-batches and appear at most once"
        )
    for j in range(mbs):
        for k in chunks:
            if pos[("B", j, k)] < pos[("F", j, k)]:
                raise ProgramError(f"schedule {schedule.name!r} stage {stage}: B{j} comes before F{j}")
            if ("W", j, k) in pos and pos[("W", j, k)] < pos[("B", j, k)]:
                raise ProgramError(f"schedule {schedule.name!r} stage {stage}: W{j} comes before B{j}")


def stage_order(schedule: Schedule, stage: int, p: int, m: int, v: int, iterations: int) -> list:
    """``stage``'s order as the schedule gives it (one iteration when it flushes), normalized."""
    chunks = stage_chunks(schedule, stage, p, v)
    return _normalize(schedule, stage, _call(schedule, stage, p, m, v, iterations), chunks[0])


def run_orders(
    schedule: Schedule, p: int, m: int, v: int, iterations: int
) -> list[list[tuple[str, int, int]]]:
    """Per stage, the checked order of the whole run (see the module docstring)."""
    out = []
    for s in range(p):
        chunks = stage_chunks(schedule, s, p, v)
        if schedule.flush:
            one = stage_order(schedule, s, p, m, v, iterations)
            if any(ph == "O" for ph, _, _ in one):
                raise ProgramError(
                    f"schedule {schedule.name!r} stage {s}: a flushing schedule gets its optimizer "
                    f"step from the compiler; its order must not hold ('O', i) items"
                )
            check_order(schedule, s, one, m, chunks)
            run = []
            for it in range(iterations):
                run += [(ph, j + it * m, k) for ph, j, k in one] + [("O", it, -1)]
        else:
            run = stage_order(schedule, s, p, m, v, iterations)
            check_order(schedule, s, run, m * iterations, chunks)
            if not run or run[-1][0] != "O":
                raise ProgramError(
                    f"schedule {schedule.name!r} stage {s}: a flush-free order must end with an "
                    f"optimizer step ('O', i), or the last gradients are never applied"
                )
        out.append(run)
    return out
