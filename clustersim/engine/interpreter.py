"""The SimPy interpreter of a Program.

Each (device, lane) runs its ops in order — CUDA-stream-like: an op starts when the
previous op on its lane has ended *and* every op it depends on has ended. Then:

* ``compute`` holds the lane for its duration;
* ``send`` asks the fabric to move its bytes to the peer device and holds the send lane
  until the last byte arrived (as a blocking NCCL send does);
* ``recv`` ends when its send's bytes have arrived; its span starts when both the recv
  was posted and the send started;
* ``collective`` waits until every member of its group reached it (rendezvous, as NCCL
  does), then the collective runs as point-to-point steps on the fabric; each member's
  span covers rendezvous → completion.

A lane is a small state machine driven by SimPy event callbacks rather than a SimPy
process: a running op's timeout (or transfer, or collective) calls the lane back when it
ends, and a lane blocked on another lane's op is put on that op's waiter list. This
costs one SimPy event per timed op and none per dependency, about what a bare SimPy
timeout loop costs.

Ties at equal simulated times: SimPy processes events in (time, FIFO) order; when an op
ends, the lanes waiting on it are resumed right after, in the order they started waiting.
Nothing random or wall-clock enters, so the same Program always yields the same spans.
"""

from __future__ import annotations

from collections import deque
from functools import partial
from heapq import heappush

import simpy
from simpy.events import NORMAL, Event

from ..collectives import choose_algorithm, estimate_time, run_collective
from ..collectives.group import Group
from ..errors import SimulationStall
from ..network.base import Fabric
from ..program import COLLECTIVE, COMPUTE, RECV, SEND, Op, Program
from ..trace.recorder import Recorder
from .memory import MemoryLedger


class _Lane:
    """Execution state of one (device, lane): its ops, the next op's index, and whether
    that op is running (waiting for its end event) or blocked on a dependency."""

    __slots__ = ("ops", "n", "idx", "running", "on_event")

    def __init__(self, ops: list[Op], on_event):
        self.ops, self.n, self.idx, self.running = ops, len(ops), 0, False
        self.on_event = partial(on_event, self)  # the SimPy callback of this lane's timed ops


class Engine:
    """Runs a checked Program over a fabric; ``run()`` returns when every op has ended."""

    def __init__(self, program: Program, env: simpy.Environment, fabric: Fabric, recorder: Recorder,
                 memory_capacity: list[int], *, alpha: float | dict | None = None,
                 algorithms: dict[str, str] | None = None, comm_compute_slowdown: float = 1.0,
                 collective_model: str = "fabric", compute_scale: list[float] | None = None):
        """``alpha``: per-step collective latency (see :func:`clustersim.collectives.run_collective`);
        ``algorithms``: collective kind → algorithm for ops that say ``auto``;
        ``comm_compute_slowdown``: compute runs this many times slower while a collective
        is in progress on its GPU (NCCL kernels take SMs); 1.0 turns it off;
        ``collective_model``: ``fabric`` runs collectives as point-to-point steps on the
        fabric; ``analytical`` holds the members for the algorithm's α-β time on the
        group's links (no contention, one event — for large sweeps);
        ``compute_scale``: per-op factors on compute durations (stragglers, noise; see
        :mod:`clustersim.engine.variability`)."""
        self.program, self.env, self.fabric, self.recorder = program, env, fabric, recorder
        self.memory = MemoryLedger(program.static_memory, memory_capacity, recorder)
        self.alpha, self.algorithms = alpha, algorithms or {}
        self.slowdown = comm_compute_slowdown
        self.collective_model = collective_model
        self._estimates: dict[tuple, float] = {}
        # collectives in progress per device, and an event that fires when that changes
        self.active_collectives = [0] * program.num_devices
        self.collectives_changed = [env.event() for _ in range(program.num_devices)]
        ops = program.ops
        n = len(ops)
        self.start = [-1.0] * n
        self.finished = [False] * n
        # Another lane may wait on an op only through a cross-lane dep or a recv's send.
        self.waits: list[tuple[int, ...]] = [
            tuple(d for d in op.deps if ops[d].lane_id != op.lane_id) + ((op.peer,) if op.kind is RECV else ())
            for op in ops
        ]
        self.waiters: list[list[_Lane] | None] = [None] * n
        self.durations = [op.duration for op in ops] if compute_scale is None else \
            [op.duration * f for op, f in zip(ops, compute_scale)]
        self._record = recorder.ops.append
        self._ready: deque[_Lane] = deque()
        self.names = program.device_names
        self._rendezvous: dict[str, list] = {}
        self.lanes = program.lanes()
        self.events = 0

    def run(self) -> None:
        """Start every lane, run the simulation to the end; raise SimulationStall on deadlock."""
        drain, on_event = self._hot_path()
        self._lane_states = [_Lane(lane_ops, on_event) for lane_ops in self.lanes.values()]
        self._ready.extend(self._lane_states)
        drain()
        self.env.run()
        # SimPy numbers every scheduled event from an itertools.count; all were processed
        # once run() returns, so this is the number of simulated events.
        self.events = next(self.env._eid)
        if not all(self.finished):
            raise SimulationStall(self._stall_report())

    def _hot_path(self):
        """The interpreter loop as closures over the engine's tables (free variables are as
        cheap as locals, and no call sets them up again). Returns ``drain()``, which
        advances the lanes an op's end woke, and ``advance(lane, event=None)``, which
        finishes the lane's running op (its end event just fired), starts ops until one
        must wait for time to pass or for another lane, and — when SimPy calls it back
        with the event — drains the lanes it woke."""
        env, start, finished, waiters, waits = self.env, self.start, self.finished, self.waiters, self.waits
        record, ready, change, durations = self._record, self._ready, self.memory.change, self.durations
        wake, popleft = ready.extend, ready.popleft
        send, arrive, slowed, process = self._send, self._arrive, self._slowed_compute, env.process
        slow = self.slowdown != 1.0
        # A compute op's end is a bare SimPy event pushed on the queue directly (what
        # env.timeout does, minus two Python frames): it is the hottest allocation.
        queue, eid, new_event = env._queue, env._eid, Event.__new__

        def advance(lane: _Lane, event=None) -> None:
            ops, idx, n = lane.ops, lane.idx, lane.n
            now = env._now
            done = lane.running
            lane.running = False
            while True:
                if done:  # the op at idx has ended
                    op = ops[idx]
                    i = op.id
                    if op.mem_free:
                        change(op.device, -op.mem_free, now)
                    finished[i] = True
                    record((i, start[i], now))
                    w = waiters[i]
                    if w is not None:
                        waiters[i] = None
                        wake(w)
                    idx += 1
                if idx == n:
                    break
                op = ops[idx]
                i = op.id
                if start[i] < 0.0:
                    start[i] = now  # posted: a recv's span starts here or when its send started
                blocked = False
                for d in waits[i]:
                    if not finished[d]:
                        w = waiters[d]
                        if w is None:
                            waiters[d] = [lane]
                        else:
                            w.append(lane)
                        blocked = True
                        break
                if blocked:
                    break
                if op.mem_alloc:
                    change(op.device, op.mem_alloc, now)
                kind = op.kind
                done = True
                if kind is COMPUTE:
                    start[i] = now
                    d = durations[i]
                    if d > 0:
                        if slow:
                            process(slowed(op)).callbacks.append(lane.on_event)
                        else:
                            ev = new_event(Event)
                            ev.env, ev.callbacks, ev._value, ev._ok = env, [lane.on_event], None, True
                            heappush(queue, (now + d, NORMAL, next(eid), ev))
                        lane.running = True
                        break
                elif kind is RECV:
                    t_send = start[op.peer]
                    if t_send > start[i]:
                        start[i] = t_send
                else:
                    if kind is SEND:
                        start[i] = now
                        ev = send(op)
                    elif kind is COLLECTIVE:
                        ev = arrive(op)
                    else:
                        raise ValueError(f"{op!r}: unknown op kind {kind!r}")
                    ev.callbacks.append(lane.on_event)
                    lane.running = True
                    break
            lane.idx = idx
            if event is not None and ready:  # called back by SimPy: run the lanes it woke
                drain()

        def drain() -> None:
            while ready:
                advance(popleft())

        return drain, advance

    def _send(self, op: Op) -> simpy.Event:
        names, transfer = self.names, self.fabric.transfer
        # the representative's own flow first: it is replica 0, first in line in the unfolded run
        done = transfer(names[op.device], names[self.program.ops[op.peer].device], op.nbytes, op.name)
        if self.fabric.shares_links:
            for src, dst in op.shadows:  # folded-away twins' traffic loads the fabric too
                transfer(names[src], names[dst], op.nbytes, op.name)
        return done

    def _slowed_compute(self, op):
        """Run a compute op at 1/slowdown speed while any collective is active on its GPU,
        re-evaluating the rate whenever a collective starts or ends there."""
        env, dev, work = self.env, op.device, self.durations[op.id]
        while True:
            rate = 1.0 / self.slowdown if self.active_collectives[dev] else 1.0
            t, timer = env.now, env.timeout(work / rate)
            yield timer | self.collectives_changed[dev]
            if timer.processed:
                return
            work -= (env.now - t) * rate

    def _collectives_change(self, group: tuple[int, ...], delta: int) -> None:
        for dev in group:
            self.active_collectives[dev] += delta
            ev, self.collectives_changed[dev] = self.collectives_changed[dev], self.env.event()
            ev.succeed()

    def _arrive(self, op: Op) -> simpy.Event:
        """Register ``op``'s member at its collective's rendezvous; return the event that
        fires when the collective completes. The last arrival starts it."""
        state = self._rendezvous.get(op.tag)
        if state is None:
            state = self._rendezvous[op.tag] = [set(), self.env.event(), []]
        state[0].add(op.device)
        state[2].append(op.id)
        if len(state[0]) == (op.arrivals or len(op.group)):
            for i in state[2]:
                self.start[i] = self.env._now
            self.env.process(self._run_collective(op, state[1]))
        return state[1]

    def _run_collective(self, op, finished: simpy.Event):
        names = self.names
        algorithm = op.algorithm if op.algorithm != "auto" else self.algorithms.get(op.collective, "auto")
        self._collectives_change(op.group, +1)
        if self.collective_model == "analytical":
            yield self.env.timeout(self._estimate(op, algorithm))
        else:
            own = run_collective(self.env, self.fabric, op.collective, [names[d] for d in op.group],
                                 op.nbytes, algorithm=algorithm, alpha=self.alpha, label=op.tag)
            own_done = self.env.process(own)  # first, as replica 0 would be in the unfolded run
            for group in op.shadows if self.fabric.shares_links else ():  # folded twins' collectives
                self.env.process(run_collective(self.env, self.fabric, op.collective, [names[d] for d in group],
                                                op.nbytes, algorithm=algorithm, alpha=self.alpha, label=op.tag))
            yield own_done
        self._collectives_change(op.group, -1)
        finished.succeed()

    def _estimate(self, op, algorithm: str) -> float:
        """α-β time of ``op``'s collective on its group's links, cached per shape."""
        key = (op.collective, op.group, op.nbytes, algorithm)
        t = self._estimates.get(key)
        if t is None:
            group = Group(self.env, self.fabric, [self.names[d] for d in op.group], self.alpha)
            name = choose_algorithm(group, op.collective, op.nbytes) if algorithm == "auto" else algorithm
            t = self._estimates[key] = estimate_time(op.collective, name, len(op.group), op.nbytes, **group.shape())
        return t

    def _stall_report(self) -> str:
        ops, lines = self.program.ops, []
        for lane in self._lane_states:
            if lane.idx == len(lane.ops):
                continue
            op = lane.ops[lane.idx]  # the lane's first unfinished op; the rest queue behind it
            why = [f"{ops[d]!r}" for d in op.deps if not self.finished[d]]
            if op.kind == RECV and not self.finished[op.peer]:
                why.append(f"its send {ops[op.peer]!r}")
            if op.kind == COLLECTIVE:
                arrived = self._rendezvous.get(op.tag, [set()])[0]
                missing = [f"gpu{d}" for d in op.group if d not in arrived]
                why.append(f"collective members that never arrived: {', '.join(missing)}")
            lines.append(f"  {op!r} waits for {'; '.join(why) or 'nothing (engine bug)'}")
        unfinished = self.finished.count(False)
        return (f"simulation stalled at t={self.env.now:.9g} s with {unfinished} ops unfinished "
                f"(deadlock). Stuck ops:\n" + "\n".join(lines))
