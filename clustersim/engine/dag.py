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
:mod:`clustersim.engine.lanes`) advance in the same FIFO order; an op that holds its lane
for a time, and a collective's phases, are entries ``(time, sequence)`` on one heap, with
sequence numbers handed out in the order the engine schedules the matching SimPy events
(its ``(time, priority, eid)`` queue). A collective costs the engine a process and
2·members + 4 events (start, its members' "collectives changed" notices twice, timeout,
completion, process end); here it is three heap entries, taken in the engine's order:

* its start — SimPy's ``Initialize``, urgent, so it runs as soon as the step that
  completed the rendezvous is over — schedules its timeout at ``rendezvous + α-β time``;
* the timeout schedules its completion at the same time, behind what is already queued;
* the completion wakes the members' lanes in the order they arrived.

Per op, the same float operations as the engine: durations are ``duration × factor``,
ends ``start + time``; a recv's span starts at ``max(posted, send start)``.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush
from itertools import count

from ..errors import ScenarioError, SimulationStall
from ..network.base import Fabric
from ..program import COLLECTIVE, RECV, SEND, Program
from ..trace.recorder import Recorder
from .collective_plans import CollectivePlans
from .lanes import DONE, END, HOLD, INSTANT, JOINED, POSTED, SENT, compile_lane, waiter_table
from .memory import MemoryLedger

#: the network models whose sends take a time fixed before the run (``Fabric.fixed_time``)
FIXED_TIME_NETWORKS = ("direct", "analytical")


def contention_free(scenario, program: Program) -> tuple[bool, str]:
    """Whether the DAG evaluator reproduces the SimPy engine exactly for ``program`` under
    ``scenario`` (a Scenario or anything with its ``cluster`` and ``simulation``), and why.

    Read off the engine: it needs SimPy only where an op's time is not known when it
    starts — a send on the ``packet`` or ``flow`` model (fair shares, queues), or on the
    analytical one inside a link degradation window (the time depends on the start); a
    collective under ``collective_model: fabric`` (point-to-point steps on the network);
    and a compute op under ``comm_compute_slowdown`` > 1 (its rate changes as collectives
    start and end). Compute noise, stragglers and per-GPU speeds are allowed: they are
    per-op factors fixed before the run from the seed, the same in both. (A job with
    faults simulates each of its configurations through ``simulate``, which decides per
    configuration.)"""
    cl, sim = scenario.cluster, scenario.simulation
    if cl.comm_compute_slowdown != 1.0:
        return False, f"comm_compute_slowdown {cl.comm_compute_slowdown} couples compute to collectives"
    kinds = {op.kind for op in program.ops}
    if SEND in kinds and sim.network not in FIXED_TIME_NETWORKS:
        return False, f"network {sim.network!r} times sends by what shares their links"
    if SEND in kinds and sim.network == "analytical" and cl.link_degradations:
        return False, "link_degradations make a send's time depend on when it starts"
    if COLLECTIVE in kinds and sim.collective_model != "analytical":
        return False, f"collective_model {sim.collective_model!r} runs collectives as steps on the network"
    return True, f"contention-free: network {sim.network}, collective_model {sim.collective_model}"


def choose_evaluator(scenario, program: Program) -> tuple[type, str]:
    """The evaluator class for ``simulation.evaluator`` (``auto``: the DAG evaluator when
    :func:`contention_free`, else the SimPy engine) and the summary's ``evaluator`` note."""
    from .interpreter import Engine

    asked = getattr(scenario.simulation, "evaluator", "auto")
    exact, why = contention_free(scenario, program)
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


class _Collective:
    """One collective instance: its members' op ids and lanes in arrival order, the
    devices arrived, how many it needs, its time once started, and whether its timeout
    has fired (it then awaits its completion entry)."""

    __slots__ = ("ids", "lanes", "devices", "want", "time", "timed_out")

    def __init__(self, want: int):
        self.ids, self.lanes, self.devices, self.want = [], [], set(), want
        self.time, self.timed_out = 0.0, False


class DagEngine:
    """The DAG evaluator, with the SimPy engine's interface (:class:`~clustersim.engine.interpreter.Engine`):
    built from the same arguments, ``run()`` fills ``recorder.ops`` and ``recorder.memory``
    and leaves ``memory`` (peak, capacity, oom), ``events`` and ``finished_count()`` as the
    engine would. ``env`` is not run (the fabric was built on it);
    ``comm_compute_slowdown`` must be 1 (see :func:`contention_free`).

    ``events`` is the number of SimPy events the engine would have processed for the same
    run — one per op that holds its lane for a time, 2·members + 4 per collective — so
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
        algorithms: dict[str, str] | None = None,
        comm_compute_slowdown: float = 1.0,
        collective_model: str = "fabric",
        compute_scale: list[float] | None = None,
    ):
        if comm_compute_slowdown != 1.0:
            raise ValueError("the DAG evaluator needs comm_compute_slowdown 1 (see contention_free)")
        self.program, self.recorder = program, recorder
        self.memory = MemoryLedger(program.static_memory, memory_capacity, recorder)
        self._plan_collective = CollectivePlans(
            env, fabric, program.device_names, alpha, algorithms or {}, collective_model
        )
        ops, names = program.ops, program.device_names
        durations = (
            [op.duration for op in ops]
            if compute_scale is None
            else [op.duration * f for op, f in zip(ops, compute_scale)]
        )

        def send_time(op) -> float | None:
            return fabric.fixed_time(names[op.device], names[ops[op.peer].device], op.nbytes)

        self._plans = [
            compile_lane(program, lane_ops, durations, False, send_time)
            for lane_ops in program.lanes().values()
        ]
        held = 0
        for _, plan in self._plans:
            for entry in plan:
                if entry[1] == SENT:
                    raise ValueError(
                        f"{ops[entry[0]]!r}: the fabric has no fixed time for it (see contention_free)"
                    )
                held += entry[1] == HOLD
        self._held_ops = held
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
        collectives = self._evaluate(start, end, waiters)
        self.events = self._held_ops + sum(2 * len(self.program.ops[c.ids[0]].group) + 4 for c in collectives)
        ops = self.recorder.ops
        if waiters.count(DONE) == len(waiters):
            ops.extend(zip(range(n), start, end))
        else:
            ops.extend((i, start[i], t) for i, t in enumerate(end) if t >= 0.0)
            raise SimulationStall(self._stall_report(waiters))

    def _evaluate(self, start: list[float], end: list[float], waiters: list) -> list[_Collective]:
        """The pass; fills ``start``, ``end`` and ``waiters`` (DONE per ended op) and returns
        the collectives that ran. Lanes are advanced as the engine's run loop advances them:
        first those an op's end made ready at this time (FIFO), then those a collective's
        completion woke (in arrival order), then the next heap entry."""
        program = self.program
        ops, plan_collective = program.ops, self._plan_collective
        samples = self.recorder.memory
        held, peak, change = self.memory.current, self.memory.peak, self.memory.change
        ready, woken = deque(self._lanes), deque()
        queue: list = []  # (time, sequence, _Lane whose held op ends | _Collective)
        seq = count()
        rendezvous: dict[str, _Collective] = {}
        starting: list[_Collective] = []  # rendezvous completed in this step: they start next
        now = 0.0
        while True:
            if ready:  # a lane an op's end unblocked at `now`: it may start its op
                lane = ready.popleft()
                done = False
            else:  # a lane whose running op has ended
                if woken:
                    lane = woken.popleft()
                else:
                    for c in starting:  # SimPy's urgent Initialize: before anything else queued
                        heappush(queue, (now + c.time, next(seq), c))
                    starting.clear()
                    while True:
                        if not queue:
                            return list(rendezvous.values())
                        now, _, item = heappop(queue)
                        if item.__class__ is _Lane:
                            lane = item
                            break
                        if not item.timed_out:  # its timeout: the completion queues behind
                            item.timed_out = True
                            heappush(queue, (now, next(seq), item))
                            continue
                        woken.extend(item.lanes)
                        lane = woken.popleft()
                        break
                done = True
            plan, firsts, idx = lane.plan, lane.firsts, lane.idx
            if done:
                i, what, arg, more, alloc, free, dev = plan[idx]
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
                    if w is not None:
                        if w.__class__ is list:
                            ready.extend(w)
                        else:
                            ready.append(w)
                    idx += 1
                    lane.t = now
                d = firsts[idx]
                w = waiters[d]
                if w is not DONE:  # blocked on op d
                    waiters[d] = lane if w is None else w + [lane] if w.__class__ is list else [w, lane]
                    break
                i, what, arg, more, alloc, free, dev = plan[idx]
                if more is not None and _wait_more(waiters, lane, more):
                    break
                if alloc:
                    cur = held[dev] + alloc
                    held[dev] = cur
                    if cur > peak[dev]:
                        peak[dev] = cur
                    samples.append((dev, now, cur))
                done = True
                if what == HOLD:
                    start[i] = now
                    heappush(queue, (now + arg, next(seq), lane))
                    break
                if what == POSTED:  # from when the recv was posted or its send started
                    posted, t_send = lane.t, start[arg]
                    start[i] = t_send if t_send > posted else posted
                elif what == INSTANT:
                    start[i] = now
                elif what == JOINED:
                    op = ops[i]
                    c = rendezvous.get(op.tag)
                    if c is None:
                        c = rendezvous[op.tag] = _Collective(op.arrivals or len(op.group))
                    c.devices.add(op.device)
                    c.ids.append(i)
                    c.lanes.append(lane)
                    if len(c.devices) == c.want:
                        for j in c.ids:
                            start[j] = now
                        c.time = plan_collective(op)[1]
                        starting.append(c)
                    break
                else:  # END
                    break
            lane.idx = idx

    def _stall_report(self, waiters: list) -> str:
        ops = self.program.ops
        stuck = [lane.plan[lane.idx][0] for lane in self._lanes if lane.plan[lane.idx][1] != END]
        lines = []
        for i in stuck:
            op = ops[i]
            why = [repr(ops[d]) for d in op.deps if waiters[d] is not DONE]
            if op.kind == RECV and waiters[op.peer] is not DONE:
                why.append(f"its send {ops[op.peer]!r}")
            if op.kind == COLLECTIVE:
                why.append("collective members that never arrived")
            lines.append(f"  {op!r} waits for {'; '.join(why) or 'nothing (evaluator bug)'}")
        unfinished = waiters[:-1].count(DONE)
        return (
            f"simulation stalled with {len(ops) - unfinished} ops unfinished (deadlock). Stuck ops:\n"
            + "\n".join(lines)
        )


def _wait_more(waiters: list, lane: _Lane, more: tuple[int, ...]) -> bool:
    """Put ``lane`` on the waiter list of the first of ``more`` that has not ended; False
    if all have ended."""
    for d in more:
        w = waiters[d]
        if w is not DONE:
            waiters[d] = lane if w is None else w + [lane] if w.__class__ is list else [w, lane]
            return True
    return False
