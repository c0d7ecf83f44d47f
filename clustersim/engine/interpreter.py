"""The SimPy interpreter of a Program.

Each (device, lane) is one SimPy process that runs its ops in order — CUDA-stream-like:
an op starts when the previous op on its lane has ended *and* every op it depends on has
ended. Then:

* ``compute`` holds the lane for its duration;
* ``send`` asks the fabric to move its bytes to the peer device and holds the send lane
  until the last byte arrived (as a blocking NCCL send does);
* ``recv`` ends when its send's bytes have arrived; its span starts when both the recv
  was posted and the send started;
* ``collective`` waits until every member of its group reached it (rendezvous, as NCCL
  does), then the collective runs as point-to-point steps on the fabric; each member's
  span covers rendezvous → completion.

Ties at equal simulated times follow SimPy's FIFO order of scheduling, which follows the
Program's op order: the same Program always yields the same spans.

Only ops that another lane waits on get a completion event, and the hot path appends
plain tuples to the recorder — nothing else allocates per op.
"""

from __future__ import annotations

import simpy

from ..errors import SimulationStall
from ..network.base import Fabric
from ..program import COLLECTIVE, COMPUTE, RECV, SEND, Program
from ..trace.recorder import Recorder
from .memory import MemoryLedger


class Engine:
    """Runs a checked Program over a fabric; ``run()`` returns when every op has ended."""

    def __init__(self, program: Program, env: simpy.Environment, fabric: Fabric, recorder: Recorder,
                 memory_capacity: list[int], *, alpha: float | dict | None = None,
                 algorithms: dict[str, str] | None = None, comm_compute_slowdown: float = 1.0,
                 collective_model: str = "fabric"):
        """``alpha``: per-step collective latency (see :func:`clustersim.collectives.run_collective`);
        ``algorithms``: collective kind → algorithm for ops that say ``auto``;
        ``comm_compute_slowdown``: compute runs this many times slower while a collective
        is in progress on its GPU (NCCL kernels take SMs); 1.0 turns it off;
        ``collective_model``: ``fabric`` runs collectives as point-to-point steps on the
        fabric; ``analytical`` holds the members for the algorithm's α-β time on the
        group's links (no contention, one event — for large sweeps)."""
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
        self.posted = [False] * n
        # Completion events only where another lane waits (cross-lane deps, recv on send).
        waits: list[tuple[int, ...]] = []
        need = [False] * n
        for op in ops:
            lid = op.lane_id
            w = tuple(d for d in op.deps if ops[d].lane_id != lid)
            waits.append(w)
            for d in w:
                need[d] = True
            if op.kind == RECV:
                need[op.peer] = True
        self.waits = waits
        self.done: list[simpy.Event | None] = [env.event() if x else None for x in need]
        self.names = [f"gpu{d}" for d in range(program.num_devices)]
        self._rendezvous: dict[str, list] = {}
        self.lanes = program.lanes()
        self.events = 0

    def run(self) -> None:
        """Start every lane, run the simulation to the end; raise SimulationStall on deadlock."""
        for lane_ops in self.lanes.values():
            self.env.process(self._lane(lane_ops))
        self.env.run()
        # SimPy numbers every scheduled event from an itertools.count; all were processed
        # once run() returns, so this is the number of simulated events.
        self.events = next(self.env._eid)
        if not all(self.finished):
            raise SimulationStall(self._stall_report())

    def _lane(self, lane_ops):
        # The hot path: locals only, one tuple appended per op, no per-op allocation
        # besides SimPy's own events.
        env, done, mem, timeout = self.env, self.done, self.memory, self.env.timeout
        start, finished, posted, waits = self.start, self.finished, self.posted, self.waits
        record, names, transfer, ops = self.recorder.ops.append, self.names, self.fabric.transfer, self.program.ops
        slow = self.slowdown != 1.0
        for op in lane_ops:
            i = op.id
            posted[i] = True
            for d in waits[i]:
                if not finished[d]:
                    yield done[d]
            kind = op.kind
            t0 = env._now
            if op.mem_alloc:
                mem.change(op.device, op.mem_alloc, t0)
            if kind is COMPUTE:
                start[i] = t0
                if op.duration > 0:
                    if slow:
                        yield from self._slowed_compute(op)
                    else:
                        yield timeout(op.duration)
            elif kind is RECV:
                peer = op.peer
                if not finished[peer]:
                    yield done[peer]
                t_send = start[peer]
                start[i] = t0 if t0 > t_send else t_send
            elif kind is SEND:
                start[i] = t0
                for src, dst in op.shadows:  # folded-away twins' traffic loads the fabric too
                    transfer(names[src], names[dst], op.nbytes, op.name)
                yield transfer(names[op.device], names[ops[op.peer].device], op.nbytes, op.name)
            elif kind == COLLECTIVE:
                yield from self._collective(op)
            else:
                raise ValueError(f"{op!r}: unknown op kind {kind!r}")
            now = env._now
            if op.mem_free:
                mem.change(op.device, -op.mem_free, now)
            finished[i] = True
            record((i, start[i], now))
            ev = done[i]
            if ev is not None:
                ev.succeed()

    def _slowed_compute(self, op):
        """Run a compute op at 1/slowdown speed while any collective is active on its GPU,
        re-evaluating the rate whenever a collective starts or ends there."""
        env, dev, work = self.env, op.device, op.duration
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

    def _collective(self, op):
        state = self._rendezvous.get(op.tag)
        if state is None:
            state = self._rendezvous[op.tag] = [set(), self.env.event(), 0.0]
        state[0].add(op.device)
        if len(state[0]) == (op.arrivals or len(op.group)):
            state[2] = self.env.now
            self.env.process(self._run_collective(op, state[1]))
        yield state[1]
        self.start[op.id] = state[2]

    def _run_collective(self, op, finished: simpy.Event):
        from ..collectives import run_collective

        names = self.names
        algorithm = op.algorithm if op.algorithm != "auto" else self.algorithms.get(op.collective, "auto")
        self._collectives_change(op.group, +1)
        if self.collective_model == "analytical":
            yield self.env.timeout(self._estimate(op, algorithm))
        else:
            for group in op.shadows:  # folded-away twin groups run the same collective now
                self.env.process(run_collective(self.env, self.fabric, op.collective, [names[d] for d in group],
                                                op.nbytes, algorithm=algorithm, alpha=self.alpha, label=op.tag))
            yield from run_collective(self.env, self.fabric, op.collective, [names[d] for d in op.group],
                                      op.nbytes, algorithm=algorithm, alpha=self.alpha, label=op.tag)
        self._collectives_change(op.group, -1)
        finished.succeed()

    def _estimate(self, op, algorithm: str) -> float:
        """α-β time of ``op``'s collective on its group's links, cached per shape."""
        key = (op.collective, op.group, op.nbytes, algorithm)
        t = self._estimates.get(key)
        if t is None:
            from ..collectives import choose_algorithm, estimate_time
            from ..collectives.group import Group

            group = Group(self.env, self.fabric, [self.names[d] for d in op.group], self.alpha)
            name = choose_algorithm(group, op.collective, op.nbytes) if algorithm == "auto" else algorithm
            t = self._estimates[key] = estimate_time(op.collective, name, len(op.group), op.nbytes, **group.shape())
        return t

    def _stall_report(self) -> str:
        ops, lines = self.program.ops, []
        for lane_ops in self.lanes.values():
            op = next((o for o in lane_ops if not self.finished[o.id]), None)
            if op is None:
                continue
            if not self.posted[op.id]:
                continue  # blocked behind an earlier op of its own lane, reported there
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
