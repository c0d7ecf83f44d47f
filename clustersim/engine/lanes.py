"""What the engine's hot path reads about each lane and op, laid out before the run.

The interpreter (:mod:`clustersim.engine.interpreter`) steps lanes op by op in Python;
what it does per op is fixed before the run, so each op is compiled here into one plain
tuple (a *plan* entry) and each lane into a :class:`Lane`: its plan, the first op each
entry waits for, its position; the lane is itself the SimPy event it re-arms for every op it
holds for a known time. Nothing here changes what is simulated; it only saves attribute
lookups, branches and allocations in the loop that runs once per op.
"""

from __future__ import annotations

from ..program import COMPUTE, RECV, SEND, Op, Program, is_gpu_work
from ..simpy_fast import Succeeded

# What the hot path does with an op (``what`` in a plan entry)
HOLD = 0  # holds its lane for a known time: a compute op, or a send whose fabric knows its time
INSTANT = 1  # a zero-time compute op: ends when it starts
POSTED = 2  # a recv: ends once its send delivered (a wait of the op); span from max(posted, send start)
SLOWED = 3  # a compute op that slows while a collective runs on its GPU (a process)
SENT = 4  # a send the fabric times (contention): fabric.transfer
JOINED = 5  # a collective member: rendezvous, then the collective
END = 6  # past the lane's last op (a sentinel closing every lane's plan)

#: an op waited for that has ended; also what "no op" (index -1, see :func:`waiter_table`) reads
DONE = True
#: the plan entry after a lane's last op
_LANE_END = (-1, END, None, None, 0, 0, -1)


def waiter_table(n: int) -> list:
    """Per op: None while it has not ended and no lane waits on it, the lane waiting on
    it, a list of lanes waiting on it (in the order they started waiting), or DONE once
    it has ended. One more entry, DONE for good, is what "no op" (-1) reads."""
    return [None] * n + [DONE]


def wait_more(waiters: list, lane, more: tuple[int, ...]) -> bool:
    """Put ``lane`` on the waiter list of the first of ``more`` that has not ended (the
    waits of an op after its first, rare); False if all have ended."""
    for d in more:
        w = waiters[d]
        if w is not DONE:
            waiters[d] = lane if w is None else w + [lane] if w.__class__ is list else [w, lane]
            return True
    return False


def compile_lane(
    program: Program, lane_ops: list[Op], durations: list[float], slowed: bool, send_time
) -> tuple[list[int], list[tuple]]:
    """The ``(firsts, plan)`` of one lane, both closed by an END sentinel: per op, the
    first op on another lane it waits for (a cross-lane dep, a recv's send; -1 if none)
    and its plan entry ``(id, what, arg, more, mem_alloc, mem_free, device)``.

    ``what`` is one of the codes above; ``arg`` is the time a HOLD op holds its lane,
    the send of a POSTED recv, else None; ``more`` the ops it waits for after the first
    (None if none). The first wait is kept apart so a lane blocked on it stops without
    reading the rest. ``durations``: compute time per op id; ``slowed``: compute slows
    during collectives (comm–compute interference), so compute ops run as processes;
    ``send_time(op)``: the fabric's fixed time for a send, or None when the fabric must
    time it."""
    ops = program.ops
    firsts, plan = [], []
    add_first, add_entry = firsts.append, plan.append
    for op in lane_ops:
        i, kind, lane_id = op.id, op.kind, op.lane_id
        if kind is COMPUTE:
            arg = durations[i]
            what = INSTANT if arg <= 0 else SLOWED if slowed and is_gpu_work(op) else HOLD
        elif kind is SEND:
            arg = send_time(op)
            what = SENT if arg is None else HOLD
        elif kind is RECV:
            what, arg = POSTED, op.peer
        else:  # COLLECTIVE (Program.add admits no other kind)
            what, arg = JOINED, None
        deps = op.deps
        if len(deps) == 1 and kind is not RECV:  # most ops: no list to build
            d = deps[0]
            add_first(d if ops[d].lane_id != lane_id else -1)
            more = None
        else:
            waits = [d for d in deps if ops[d].lane_id != lane_id]
            if kind is RECV:
                waits.append(op.peer)
            add_first(waits[0] if waits else -1)
            more = tuple(waits[1:]) or None
        add_entry((i, what, arg, more, op.mem_alloc, op.mem_free, op.device))
    firsts.append(-1)
    plan.append(_LANE_END)
    return firsts, plan


class Lane(Succeeded):
    """Execution state of one (device, lane): its ops, ``firsts`` and ``plan`` (see
    :func:`compile_lane`), the index ``idx`` of the op it runs or waits to start, and
    ``t``, the time it reached that op (when the op before it ended). A running op that
    ends with an event of a process, the fabric or a collective calls :meth:`wake`,
    which hands the lane to the run loop's ``woken`` queue.

    The lane is also the SimPy event of the end of the op it holds for a known time: it
    is put on SimPy's queue when armed (as a Timeout is), once per such op (a lane holds
    at most one op at a time), and the engine's run loop pops it and advances the lane in
    place, so SimPy never calls it back: it has no callbacks and always succeeds, with
    value None (:mod:`clustersim.simpy_fast`). Being its own event, a lane makes no
    reference cycle (a separate end event and its lane would refer to each other, and a
    finished run would wait for the cyclic collector to be freed)."""

    __slots__ = ("ops", "firsts", "plan", "idx", "t", "woken", "env", "callbacks")

    def __init__(self, ops: list[Op], firsts: list[int], plan: list[tuple], woken, env):
        self.ops, self.firsts, self.plan, self.idx, self.t = ops, firsts, plan, 0, env.now
        self.woken, self.env, self.callbacks = woken, env, None

    def wake(self, event) -> None:
        """SimPy callback of the event that ends this lane's running op."""
        self.woken.append(self)
