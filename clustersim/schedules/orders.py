"""A schedule's per-stage orders for a whole run, normalized and checked.

The compiler works on one list per stage of ``(phase, j, k)`` triples over the whole
run: ``j`` the run-wide micro-batch index (iteration ``j // m``, micro-batch ``j % m``),
``k`` the model chunk, and ``("O", i, -1)`` for the i-th optimizer step. A flushing
schedule's order is called once per iteration and gets an ``O`` appended; an
asynchronous one returns the whole run itself. An overlapped pair ``("F&B", j, k, j2, k2)``
becomes its forward and backward triples, next to each other, and the order's ``pairs``
holds the index of each such forward (:class:`StageOrder`).
"""

from __future__ import annotations

from ..errors import ProgramError
from .registry import Schedule

PASS_PHASES = ("F", "B", "W")
PAIR = "F&B"


class StageOrder(list):
    """One stage's run order (a list of triples) and ``pairs``: the indices ``i`` where items
    ``i`` (a forward) and ``i + 1`` (a backward) run as one overlapped F&B pair."""

    def __init__(self, items=(), pairs=frozenset()) -> None:
        super().__init__(items)
        self.pairs = frozenset(pairs)


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


def _normalize(schedule: Schedule, stage: int, order: list, default_chunk: int) -> StageOrder:
    out, pairs = [], set()
    for item in order:
        n = len(item) if type(item) is tuple else 0
        if 2 <= n <= 3 and item[0] in PASS_PHASES and type(item[1]) is int and type(item[-1]) is int:
            out.append(item if n == 3 else (item[0], item[1], default_chunk))  # the common case, as below
            continue
        if isinstance(item, tuple) and len(item) == 5 and item[0] == PAIR:
            pairs.add(len(out))
            out += [("F", int(item[1]), int(item[2])), ("B", int(item[3]), int(item[4]))]
            continue
        if not isinstance(item, tuple) or len(item) not in (2, 3) or item[0] not in PASS_PHASES + ("O",):
            raise ProgramError(
                f"schedule {schedule.name!r} stage {stage}: {item!r} is not an order item; "
                f"accepted: (phase, microbatch) or (phase, microbatch, chunk), phase in F, B, W, O, "
                f"or ('F&B', microbatch, chunk, microbatch, chunk)"
            )
        if item[0] == "O":
            out.append(("O", int(item[1]), -1))
        else:
            out.append((item[0], int(item[1]), int(item[2]) if len(item) == 3 else default_chunk))
    return StageOrder(out, pairs)


def direction_of(schedule: Schedule, j: int, m: int) -> int:
    """The direction micro-batch ``j`` (of an iteration's ``m``) travels: 0, or for a
    bidirectional schedule 1 for the second half of the micro-batches."""
    return 0 if schedule.directions == 1 else (j % m) * schedule.directions // m


def _visits(schedule: Schedule, m: int, chunks: list[int], n_chunks: int) -> list[tuple[int, int]]:
    """The (micro-batch, chunk) passes of a stage holding ``chunks`` (of ``n_chunks``) in an
    iteration of ``m``: every micro-batch on every chunk, or on the chunks of its direction."""
    half = n_chunks // schedule.directions
    return [(j, k) for j in range(m) for k in chunks if k // half == direction_of(schedule, j, m)]


def check_order(
    schedule: Schedule,
    stage: int,
    order: list[tuple[str, int, int]],
    mbs: int,
    chunks: list[int],
    n_chunks: int,
) -> None:
    """Raise ProgramError unless ``order`` runs F and B of every (micro-batch, chunk) the
    stage serves (:func:`_visits`) exactly once, at most one W each, B after F and W after B."""
    passes = [(ph, j, k) for ph, j, k in order if ph != "O"]
    visits = _visits(schedule, mbs, chunks, n_chunks)
    want = {(ph, j, k) for ph in ("F", "B") for j, k in visits}  # each once
    got = [x for x in passes if x[0] != "W"]
    if len(got) != len(want) or set(got) != want:  # as many, all wanted: each exactly once
        shown = [x[:2] if len(chunks) == 1 else x for x in passes[:12]]
        raise ProgramError(
            f"schedule {schedule.name!r} stage {stage}: the order must hold F and B of every micro-batch "
            f"0..{mbs - 1}{f' and chunk in {chunks}' if len(chunks) > 1 else ''} exactly once"
            f"{' (each micro-batch on the chunks of its direction)' if schedule.directions > 1 else ''}; "
            f"got {shown}{' …' if len(passes) > 12 else ''}"
        )
    pos = {x: i for i, x in enumerate(passes)}
    ws = [x for x in passes if x[0] == "W"]
    if len(set(ws)) != len(ws) or any(("F", j, k) not in pos for _, j, k in ws):
        raise ProgramError(
            f"schedule {schedule.name!r} stage {stage}: each W must belong to one of the stage's "
            f"micro-batches and appear at most once"
        )
    for j, k in visits:
        if pos[("B", j, k)] < pos[("F", j, k)]:
            raise ProgramError(f"schedule {schedule.name!r} stage {stage}: B{j} comes before F{j}")
        if ("W", j, k) in pos and pos[("W", j, k)] < pos[("B", j, k)]:
            raise ProgramError(f"schedule {schedule.name!r} stage {stage}: W{j} comes before B{j}")


def stage_order(schedule: Schedule, stage: int, p: int, m: int, v: int, iterations: int) -> StageOrder:
    """``stage``'s order as the schedule gives it (one iteration when it flushes), normalized."""
    chunks = stage_chunks(schedule, stage, p, v)
    return _normalize(schedule, stage, _call(schedule, stage, p, m, v, iterations), chunks[0])


def run_orders(schedule: Schedule, p: int, m: int, v: int, iterations: int) -> list[StageOrder]:
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
            check_order(schedule, s, one, m, chunks, p * v)
            run, pairs = [], set()
            for it in range(iterations):
                pairs |= {len(run) + i for i in one.pairs}
                run += [(ph, j + it * m, k) for ph, j, k in one] + [("O", it, -1)]
            run = StageOrder(run, pairs)
        else:
            run = stage_order(schedule, s, p, m, v, iterations)
            check_order(schedule, s, run, m * iterations, chunks, p * v)
            if not run or run[-1][0] != "O":
                raise ProgramError(
                    f"schedule {schedule.name!r} stage {s}: a flush-free order must end with an "
                    f"optimizer step ('O', i), or the last gradients are never applied"
                )
        out.append(run)
    return out
