"""The lane-stepping core: the one loop the SimPy interpreter and the DAG pass share.

Both evaluators run a Program the same way, lane by lane: a lane whose op has ended
records the end (frees its memory, wakes the lanes waiting on the op) and goes on with its
next ops until one must wait — for another lane's op, or for time. What differs is only
where time comes from, so each evaluator is a *driver* that hands the core two things:

* ``next_ended()``: the next lane whose held op has ended, with ``lane.t`` its end time
  (None when nothing is left to happen). The SimPy interpreter
  (:mod:`clustersim.engine.interpreter`) pops SimPy's event queue; the DAG pass
  (:mod:`clustersim.engine.dag`) pops its calendar of times.
* ``begin(lane, what, i, arg, now)``: start op ``i``, whose end the driver reports (a send
  through the fabric, a collective, a slowed compute op).

The core calls a driver once per lane it takes from the driver and once per op started
through ``begin``. An op held for a known time — most ops — costs it no call: it queues
the op's end itself, on SimPy's queue or the DAG pass's calendar (a Python frame per op
would cost a few per cent of the run: :mod:`clustersim.simpy_fast`). Lanes are stepped in one order whichever
driver runs: first the lanes an op's end made ready at this time (FIFO), then those an
event of the driver woke (``woken``, FIFO), then the driver's next lane.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from heapq import heappush

from ..simpy_fast import NORMAL
from .lanes import DONE, END, HOLD, INSTANT, POSTED, wait_more
from .memory import MemoryLedger


class LaneStepper:
    """The state the core steps lanes over: per op, its ``start`` and ``end`` times and its
    waiters (:func:`~clustersim.engine.lanes.waiter_table`); the memory ledger and its
    samples; the lanes to step at the current time (``ready``) and those an event of the
    driver woke (``woken``). A lane is any object with the attributes ``plan``,
    ``firsts``, ``idx`` and ``t`` of :class:`~clustersim.engine.lanes.Lane`.

    Where a held op's end is queued: with ``calendar`` None, on SimPy's event ``queue``
    (an entry ``(end, NORMAL, next(ids), lane)``: the lane is the event, see
    :mod:`clustersim.simpy_fast`); else in ``calendar[end]``, the DAG pass's list of the
    entries of that time. Either way ``lane.t`` is set to the end, the time the driver
    gives the lane back at."""

    __slots__ = ("start", "end", "waiters", "memory", "samples", "ready", "woken", "queue", "ids", "calendar")

    def __init__(
        self,
        start: list[float],
        end: list[float],
        waiters: list,
        memory: MemoryLedger,
        samples: list,
        *,
        queue: list | None = None,
        ids: Iterator[int] | None = None,
        calendar: dict[float, list] | None = None,
    ):
        self.start, self.end, self.waiters = start, end, waiters
        self.memory, self.samples = memory, samples
        self.queue, self.ids, self.calendar = queue, ids, calendar
        self.ready: deque = deque()
        self.woken: deque = deque()

    def run(self, lanes: Iterable, next_ended: Callable, begin: Callable, now: float) -> float:
        """Step ``lanes`` from time ``now`` until ``next_ended()`` returns None; return
        the time of the last lane stepped. Memory is counted inline (the ledger's
        ``change()`` is called only to report a Program bug)."""
        start, end, waiters, samples = self.start, self.end, self.waiters, self.samples
        ready, woken = self.ready, self.woken
        queue, ids, calendar = self.queue, self.ids, self.calendar
        # lists are called by method (rec.append(x), not a bound append): CPython 3.11
        # specializes that call into an inline append
        held, peak, change = self.memory.current, self.memory.peak, self.memory.change
        ready.extend(lanes)
        while True:  # over the lanes to step
            if ready:  # a lane an op's end made ready at `now`: it may start its op
                lane = ready.popleft()
                plan, firsts, idx = lane.plan, lane.firsts, lane.idx
                done = False
            else:  # a lane whose running op has ended
                if woken:
                    lane = woken.popleft()
                else:
                    lane = next_ended()
                    if lane is None:
                        return now
                    now = lane.t
                plan, firsts, idx = lane.plan, lane.firsts, lane.idx
                i, what, arg, more, alloc, free, dev = plan[idx]
                done = True
            while True:  # over the lane's ops
                if done:  # op i has ended at `now`
                    if free:
                        cur = held[dev] - free
                        if cur < 0:
                            change(dev, -free, now)  # raises, naming the bug
                        held[dev] = cur
                        samples.append((dev, now, cur))
                    end[i] = now
                    w = waiters[i]
                    waiters[i] = DONE
                    if w is not None:  # wake the lanes waiting on op i
                        if w.__class__ is list:
                            ready.extend(w)
                        else:
                            ready.append(w)
                    idx += 1
                    lane.t = now  # the lane reaches its next op
                d = firsts[idx]  # the first op that op idx waits for
                w = waiters[d]
                if w is not DONE:  # blocked: wait on op d
                    waiters[d] = lane if w is None else w + [lane] if w.__class__ is list else [w, lane]
                    break
                i, what, arg, more, alloc, free, dev = plan[idx]
                if more is not None and wait_more(waiters, lane, more):
                    break
                if alloc:
                    cur = held[dev] + alloc
                    held[dev] = cur
                    if cur > peak[dev]:
                        peak[dev] = cur
                    samples.append((dev, now, cur))
                done = True
                if what == HOLD:  # queue the end (a branch, not a driver's call: once per op)
                    start[i] = now
                    lane.t = t = now + arg
                    if calendar is None:
                        heappush(queue, (t, NORMAL, next(ids), lane))
                    else:
                        calendar[t].append(lane)
                    break
                if what == POSTED:  # the span starts when the recv was posted or its send started
                    posted, t_send = lane.t, start[arg]
                    start[i] = t_send if t_send > posted else posted
                elif what == INSTANT:
                    start[i] = now
                else:
                    if what != END:
                        begin(lane, what, i, arg, now)
                    break
            lane.idx = idx
