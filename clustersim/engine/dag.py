"""The DAG evaluator: a contention-free Program run without SimPy, to the same records.

Where no op's time depends on what else is in flight (:func:`contention_free` lists when),
every op's start is the latest end among what it waits for — the op before it on its
lane, its deps, a recv's send, a collective's last member — and its end is its start plus
a time known before the run. The run is then a longest-path pass over that graph.

The pass visits the ops in the order the SimPy engine (:mod:`clustersim.engine.interpreter`)
ends them, not merely in some topological order, because the order is part of the result:
memory samples are appended as ops allocate and free, and at equal times a device's peak
depends on whether a free or an allocation comes first. So the evaluator keeps the
engine's tie-breaking, without SimPy's machinery: the engine's lanes (the same plans,
:mod:`clustersim.engine.lanes`) are stepped by the same core (:mod:`clustersim.engine.lane_core`)
in the same FIFO order, its time taken from a calendar instead of SimPy's queue; the ends of ops that
hold their lane for a time and a collective's phases are queued in the order the engine
schedules the matching SimPy events and taken in its ``(time, priority, eid)`` order. A
collective costs the engine 3 events (its start callback, its timeout, its completion);
on the calendar (:class:`~clustersim.engine.lane_core.Collectives`):

* its start — SimPy's ``Initialize``, urgent, so it runs as soon as the step that
  completed the rendezvous is over — queues its timeout at ``rendezvous + α-β time``;
* the timeout queues its completion at the same time, behind what is already queued;
* the completion wakes the members' lanes in the order they arrived.

Per op, the same float operations as the engine: durations are ``duration × factor``,
ends ``start + time``; a recv's span starts at ``max(posted, send start)``.
"""

from __future__ import annotations

from ..errors import ScenarioError, SimulationStall
from ..network.base import Fabric
from ..program import COLLECTIVE, RECV, Program
from ..record import Recorder
from ..resolve.replication import contention_free
from .collective_plans import CollectivePlans
from .collector import collector_paused
from .lane_core import Calendar, Collectives, LaneStepper
from .lanes import DONE, END, HOLD, JOINED, SENT, compile_lane, waiter_table
from .memory import MemoryLedger


def choose_evaluator(job, program: Program) -> tuple[type, str]:
    """The evaluator class for ``simulation.evaluator`` (``auto``: the DAG evaluator when
    :func:`contention_free`, else the SimPy engine) and the summary's ``evaluator`` note."""
    from .interpreter import Engine

    asked = job.simulation.evaluator
    exact, why = contention_free(job, program)
    if asked == "dag" and not exact:
        raise ScenarioError(
            "simulation.evaluator", "dag", f"the run is not contention-free: {why}; use auto or des"
        )
    if asked == "des":
        return Engine, "des (simulation.evaluator: des)"
    return (DagEngine, f"dag ({why})") if exact else (Engine, f"des ({why})")


class _Lane:
    """A (device, lane)'s position: its plan (see :func:`~clustersim.engine.lanes.compile_lane`),
    the index of the op it runs or waits to start, and the time it reached that op."""

    __slots__ = ("firsts", "plan", "idx", "t")

    def __init__(self, firsts: list[int], plan: list[tuple]):
        self.firsts, self.plan, self.idx, self.t = firsts, plan, 0, 0.0


class DagEngine:
    """The DAG evaluator, with the SimPy engine's interface (:class:`~clustersim.engine.interpreter.Engine`):
    built from the same arguments, ``run()`` fills ``recorder.ops`` and ``recorder.memory``
    and leaves ``memory`` (peak, capacity, oom), ``events`` and ``finished_count()`` as the
    engine would. ``env`` is not run (the fabric was built on it);
    ``comm_compute_slowdown`` must be 1 (see :func:`contention_free`), which turns
    ``comm_contention`` and ``copy_across`` (and with them ``domains``) off as well.

    ``events`` is the number of SimPy events the engine would have processed for the same
    run — one per op that holds its lane for a time, 3 per collective — so
    the summary's ``sim_events`` is the same whichever evaluator ran."""

    def __init__(
        self,
        program: Program,
        env,
        fabric: Fabric,
        recorder: Recorder,
        memory_capacity: list[int],
        *,
        alpha: float | dict | None = None,
        collective_latency: str = "overlapped",
        algorithms: dict[str, str] | None = None,
        comm_compute_slowdown: float = 1.0,
        collective_model: str = "fabric",
        compute_scale: list[float] | None = None,
        protocols=None,
        comm_contention: float = 1.0,
        domains: list[int] | None = None,
        copy_across: float = 0.0,
    ):
        if comm_compute_slowdown != 1.0:
            raise ValueError("the DAG evaluator needs comm_compute_slowdown 1 (see contention_free)")
        self.program, self.recorder = program, recorder
        self.memory = MemoryLedger(program.static_memory, memory_capacity, recorder)
        self._plan_collective = CollectivePlans(
            env,
            fabric,
            program.device_names,
            alpha,
            algorithms or {},
            collective_model,
            collective_latency,
            protocols,
        )
        ops, names = program.ops, program.device_names
        durations = (
            [op.duration for op in ops]
            if compute_scale is None
            else [op.duration * f for op, f in zip(ops, compute_scale)]
        )

        times: dict[tuple, float | None] = {}  # (src, dst, bytes) → the fabric's fixed time

        def send_time(op) -> float | None:
            key = (op.origin(), ops[op.peer].device, op.nbytes)
            t = times.get(key, times)
            if t is times:
                t = times[key] = fabric.fixed_time(names[key[0]], names[key[1]], op.nbytes)
            return t

        self._plans = [
            compile_lane(program, lane_ops, durations, False, send_time)
            for lane_ops in program.lanes().values()
        ]
        # a collective is an index c; its members' JOINED entries carry c in their arg
        tags: dict[str, int] = {}
        self._want: list[int] = []  # per collective: how many members hold an op for it
        events = 0  # SimPy events the engine would process: see the class docstring
        for _, plan in self._plans:
            whats = [entry[1] for entry in plan]
            events += whats.count(HOLD)
            for k in [k for k, what in enumerate(whats) if what == SENT or what == JOINED]:
                entry = plan[k]
                op = ops[entry[0]]
                if entry[1] == SENT:
                    raise ValueError(f"{op!r}: the fabric has no fixed time for it (see contention_free)")
                c = tags.get(op.tag)
                if c is None:
                    c = tags[op.tag] = len(self._want)
                    self._want.append(op.arrivals or len(op.group))
                    events += 3
                # (c, α-β time): read here, so run() is the pass alone; the time of
                # the last member to arrive is the one used, as in the engine
                plan[k] = (entry[0], JOINED, (c, self._plan_collective(op)[1]), *entry[3:])
        self._events = events
        self._lanes: list[_Lane] = []
        self.events = 0

    def finished_count(self) -> int:
        """How many ops have ended so far (all of them once ``run()`` returned)."""
        return sum(lane.idx for lane in self._lanes)

    def run(self) -> None:
        """Evaluate every op; raise SimulationStall if some never can start (deadlock)."""
        n = len(self.program.ops)
        start, end = [-1.0] * n, [-1.0] * n
        waiters = waiter_table(n)
        self._lanes = [_Lane(firsts, plan) for firsts, plan in self._plans]
        # The pass makes no reference cycles, only many small containers that would set the
        # cyclic collector off over and over (a third of the pass's time on GPT-3 175B).
        with collector_paused():
            stalled = self._pass(start, end, waiters)
        ops = self.recorder.ops
        if stalled is None:
            self.events = self._events
            ops.extend(zip(range(n), start, end))
        else:
            ops.extend((i, start[i], t) for i, t in enumerate(end) if t >= 0.0)
            raise SimulationStall(stalled)

    def _pass(self, start: list[float], end: list[float], waiters: list) -> str | None:
        """The pass, over collectives made afresh; the stall report if some op never ended.
        What the run made for its collectives is gone when it returns, before the
        collector is back (it would traverse them)."""
        collectives = Collectives.of(self._want)
        core = LaneStepper(
            start,
            end,
            waiters,
            self.memory,
            self.recorder.memory,
            lane_type=_Lane,
            calendar=Calendar(),
            collectives=collectives,
        )
        self._now = core.run(self._lanes, 0.0)
        return None if waiters.count(DONE) == len(waiters) else self._stall_report(waiters, collectives)

    def _stall_report(self, waiters: list, collectives: Collectives) -> str:
        """The engine's report (:meth:`Engine._stall_report`): each lane's first unfinished
        op and what it waits for."""
        ops, names, lines = self.program.ops, self.program.device_names, []
        for lane in self._lanes:
            i, what, arg = lane.plan[lane.idx][:3]
            if what == END:
                continue
            op = ops[i]
            why = [f"{ops[d]!r}" for d in op.deps if waiters[d] is not DONE]
            if op.kind == RECV and waiters[op.peer] is not DONE:
                why.append(f"its send {ops[op.peer]!r}")
            if op.kind == COLLECTIVE:
                arrived = {ops[j].device for j in collectives.ids[arg[0]]}
                missing = [names[d] for d in op.group if d not in arrived]
                why.append(f"collective members that never arrived: {', '.join(missing)}")
            lines.append(f"  {op!r} waits for {'; '.join(why) or 'nothing (engine bug)'}")
        unfinished = len(ops) - waiters[:-1].count(DONE)
        return (
            f"simulation stalled at t={self._now:.9g} s with {unfinished} ops unfinished "
            f"(deadlock). Stuck ops:\n" + "\n".join(lines)
        )
