"""The lane-stepping core: the one loop the SimPy interpreter and the DAG pass share.

Both evaluators run a Program the same way, lane by lane: a lane whose op has ended
records the end (frees its memory, wakes the lanes waiting on the op) and goes on with its
next ops until one must wait — for another lane's op, or for time. Lanes are stepped in
one order whichever evaluator runs: first the lanes an op's end made ready at this time
(FIFO), then those an event woke (``woken``, FIFO), then the lane of the next entry in
time order. What differs is where time comes from, the *source* of the entries:

* SimPy's event queue (:mod:`clustersim.engine.interpreter`): a held op's end is the
  lane itself, pushed as SimPy's entry ``(end, NORMAL, next(ids), lane)`` and popped here
  (:mod:`clustersim.simpy_fast`); a Fired event (a packet fabric's chunk-hop) is popped
  and fired in place; every other event goes through ``env.step()``, and the lanes whose
  ops it ended come back through ``woken``. An op that ends with an event of SimPy's (a
  send through a contended fabric, a collective, a slowed compute op) is started by the
  interpreter's ``begin(lane, what, i, now)``.
* a :class:`Calendar` (:mod:`clustersim.engine.dag`): the entries of each time in the
  order they were made, which is SimPy's order — the ends of held ops, and each
  collective's timeout and completion (:class:`Collectives`).

Both sources are read inline, in the core's own frame, and so are the calendar's
collectives: the core runs once per op, and a call per op into a driver (a Python frame,
40–100 ns against ≈ 2 µs per op) costs a few per cent of a run — measured on the DAG
pass, whose collectives are a third of its ops (docs/performance.md).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from heapq import heappop, heappush
from typing import NamedTuple

import simpy

from ..simpy_fast import EVENT, FIRE, NORMAL, TIME, event_ids, event_queue
from .lanes import DONE, END, HOLD, INSTANT, POSTED, wait_more
from .memory import MemoryLedger


class Calendar(dict):
    """Time → the entries of that time, in the order they were made; ``times``: the heap
    of the times present (a time enters it with its first entry)."""

    __slots__ = ("times",)

    def __init__(self):
        super().__init__()
        self.times: list[float] = []

    def __missing__(self, t: float) -> list:
        heappush(self.times, t)
        self[t] = entries = []
        return entries


class Collectives(NamedTuple):
    """The collectives on a :class:`Calendar`, by index ``c``, as the engine runs each in 3
    SimPy events. Their members' JOINED ops carry ``(c, α-β time)``; ``lanes[c]`` and
    ``ids[c]``: the lanes and op ids arrived, in order. When all ``want[c]`` have arrived,
    the collective starts — SimPy's urgent ``Initialize``, run after the step — and queues
    its timeout, the entry ``c``, at ``now + time``; the timeout queues its completion,
    ``~c``, behind what is already queued at that time; the completion wakes the lanes in
    the order they arrived. Made per run: they hold its lanes."""

    want: list[int]
    lanes: list[list]
    ids: list[list[int]]

    @classmethod
    def of(cls, want: list[int]) -> Collectives:
        """None arrived yet at collectives of ``want`` members each."""
        return cls(want, [[] for _ in want], [[] for _ in want])


class LaneStepper:
    """The state the core steps lanes over: per op, its ``start`` and ``end`` times and its
    waiters (:func:`~clustersim.engine.lanes.waiter_table`); the memory ledger and its
    samples; the lanes to step at the current time (``ready``) and those an event woke
    (``woken``); the source of time, ``env`` (SimPy's queue) or ``calendar`` (with its
    ``collectives``). Lanes are
    of ``lane_type``, with the attributes ``plan``, ``firsts``, ``idx`` and ``t`` of
    :class:`~clustersim.engine.lanes.Lane`."""

    __slots__ = (
        "start",
        "end",
        "waiters",
        "memory",
        "samples",
        "lane_type",
        "env",
        "calendar",
        "collectives",
        "ready",
        "woken",
    )

    def __init__(
        self,
        start: list[float],
        end: list[float],
        waiters: list,
        memory: MemoryLedger,
        samples: list,
        *,
        lane_type: type,
        env: simpy.Environment | None = None,
        calendar: Calendar | None = None,
        collectives: Collectives | None = None,
    ):
        if (env is None) == (calendar is None):
            raise ValueError("a LaneStepper takes its time from one source: env or calendar")
        self.start, self.end, self.waiters = start, end, waiters
        self.memory, self.samples, self.lane_type = memory, samples, lane_type
        self.env, self.calendar, self.collectives = env, calendar, collectives
        self.ready: deque = deque()
        self.woken: deque = deque()

    def run(self, lanes: Iterable, now: float, begin: Callable | None = None) -> float:
        """Step ``lanes`` from time ``now`` until the source has no entry left; return the
        time of the last entry taken. ``begin(lane, what, i, now)`` (SimPy's queue
        only) starts op ``i`` (what: SLOWED, SENT or JOINED). Memory is counted inline
        (the ledger's ``change()`` is called only to report a Program bug)."""
        start, end, waiters, samples = self.start, self.end, self.waiters, self.samples
        # lists are called by method (rec.append(x), not a bound append): CPython 3.11
        # specializes that call into an inline append
        ready, woken, lane_type = self.ready, self.woken, self.lane_type
        held, peak, change = self.memory.current, self.memory.peak, self.memory.change
        env, calendar = self.env, self.calendar
        if calendar is None:
            queue, ids, env_step = event_queue(env), event_ids(env), env.step
        else:
            times = calendar.times
            want, members, member_ids = self.collectives
            soon: list[tuple[int, float]] = []  # collectives started in this step: (index, time)
            batch, k = calendar[now], 0  # the entries of `now`, and the next one's index
            heappop(times)  # `now` is being taken
        ready.extend(lanes)
        while True:  # over the lanes to step
            if ready:  # a lane an op's end made ready at `now`: it may start its op
                lane = ready.popleft()
                plan, firsts, idx = lane.plan, lane.firsts, lane.idx
                done = False
            else:  # a lane whose running op has ended
                if woken:
                    lane = woken.popleft()
                elif calendar is None:  # let simulated time pass: SimPy's next event
                    while True:
                        if not queue:
                            return now
                        entry = queue[0]
                        ev = entry[EVENT]
                        if ev.__class__ is lane_type:  # a held op's end: in place
                            now = heappop(queue)[TIME]
                            lane = ev
                            break
                        if ev.callbacks is FIRE:  # the fabric's own moments (chunk-hops): in place
                            ev.fire(heappop(queue)[TIME])
                            now = env.now  # it may go on with the ones after it
                            continue
                        now = entry[TIME]  # where step() sets the clock: the entry it pops
                        env_step()
                        if woken:
                            lane = woken.popleft()
                            break
                else:  # the calendar's next entry
                    if soon:
                        for c, delay in soon:  # collectives that started: their timeouts
                            calendar[now + delay].append(c)
                        soon.clear()
                    while True:
                        if k == len(batch):  # `now` is over: on to the next time
                            del calendar[now]
                            if not times:
                                return now
                            now = heappop(times)
                            batch, k = calendar[now], 0
                        entry = batch[k]
                        k += 1
                        if entry.__class__ is lane_type:  # a held op's end
                            lane = entry
                            break
                        if entry >= 0:  # collective c's timeout: its completion queues behind
                            batch.append(~entry)
                            continue
                        woken.extend(members[~entry])  # its completion: wake the members
                        lane = woken.popleft()
                        break
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
                if what == HOLD:  # queue the op's end
                    start[i] = now
                    if calendar is None:  # the lane is the event of its end
                        heappush(queue, (now + arg, NORMAL, next(ids), lane))
                    else:
                        calendar[now + arg].append(lane)
                    break
                if what == POSTED:  # the span starts when the recv was posted or its send started
                    posted, t_send = lane.t, start[arg]
                    start[i] = t_send if t_send > posted else posted
                elif what == INSTANT:
                    start[i] = now
                elif what == END:
                    break
                elif calendar is None:  # it ends with an event of SimPy's
                    begin(lane, what, i, now)
                    break
                else:  # JOINED on the calendar: arg is (its collective c, its time)
                    c = arg[0]
                    m = members[c]
                    m.append(lane)
                    member_ids[c].append(i)
                    if len(m) == want[c]:  # the last arrival starts it
                        for j in member_ids[c]:
                            start[j] = now
                        soon.append(arg)
                    break
            lane.idx = idx
