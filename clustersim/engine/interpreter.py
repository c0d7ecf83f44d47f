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

A lane is a small state machine, not a SimPy process: a lane blocked on another lane's
op is put on that op's waiter list, and a running op's end (its timeout, transfer or
collective) hands the lane back to the run loop. This costs one SimPy event per timed op
and none per dependency. A send whose fabric knows its time up front
(``Fabric.fixed_time``: the direct and analytical models) is held by its lane like a
compute op — the same single event, without a call into the fabric. The run loop is the
lane-stepping core the DAG pass shares (:mod:`clustersim.engine.lane_core`), reading
SimPy's event queue itself: the end of a held op (the :class:`Lane` itself, its own end
event) is handled in place, in the loop's own frame; a fabric's own moments (the packet
fabric's chunk-hops, :class:`~clustersim.simpy_fast.Fired`) are handed to their ``fire``
directly; every other event goes through SimPy's ``env.step()``. What this module keeps is
what starts an op that ends with an event (:meth:`Engine._begin`): a send through the
fabric, a collective, a slowed compute op. What the loop reads per op is laid out before
the run (:mod:`clustersim.engine.lanes`).

Ties at equal simulated times: SimPy processes events in (time, FIFO) order; when an op
ends, the lanes waiting on it are resumed right after, in the order they started waiting.
Nothing random or wall-clock enters, so the same Program always yields the same spans.
"""

from __future__ import annotations

from functools import partial

import simpy

from ..collectives.algorithm import Options, Tuning
from ..collectives.api import Call, prepare_collective
from ..errors import SimulationStall
from ..hardware.comm_sms import stretched
from ..hardware.interference import NCCL, beside_factor, bus_share, hbm_rate
from ..network.base import Fabric
from ..network.orbits import MirroredFabric, send_orbits
from ..program import COLLECTIVE, RECV, Op, Program
from ..record import Recorder
from ..simpy_fast import (
    call_soon,
    scheduled_count,
    set_now,
)
from .collective_plans import CollectivePlans
from .collector import collector_paused
from .lane_core import LaneStepper
from .lanes import DONE, JOINED, SLOWED, Lane, compile_lane, waiter_table
from .memory import MemoryLedger


class Engine:
    """Runs a checked Program over a fabric; ``run()`` returns when every op has ended."""

    def __init__(
        self,
        program: Program,
        env: simpy.Environment,
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
        """``alpha``: per-step collective latency (see :func:`clustersim.collectives.run_collective`);
        ``collective_latency``: how a ring across hosts pays it (``cluster.collective_latency``);
        ``algorithms``: collective kind → algorithm for ops that say ``auto``;
        ``comm_compute_slowdown``: compute runs this many times slower while a collective
        is in progress on its GPU (NCCL kernels take SMs); 1.0 turns it off;
        ``collective_model``: ``fabric`` runs collectives as point-to-point steps on the
        fabric; ``analytical`` holds the members for the algorithm's α-β time on the
        group's links (no contention, one event — for large sweeps);
        ``compute_scale``: per-op factors on compute durations (stragglers, noise; see
        :mod:`clustersim.engine.variability`); ``protocols``: the system's NCCL protocols
        (``cluster.collective_protocols``; None: Simple alone); ``comm_contention``: the rate
        a NCCL collective keeps while compute runs beside it on one of its GPUs
        (:func:`~clustersim.hardware.comm_contention.contention_rate`; 1.0 turns it off),
        applied to collectives within one NVLink domain: ``domains`` gives each device's
        (its node; None: every device its own, so none is slowed); ``copy_across``: the bus
        bytes/s a NCCL collective across NVLink domains copies at most while compute runs
        beside it (:func:`~clustersim.hardware.comm_contention.copy_rate_across`; 0.0 turns it
        off): it keeps that over its own bus bandwidth of its rate, at most 1."""
        self.program, self.env, self.fabric, self.recorder = program, env, fabric, recorder
        self.memory = MemoryLedger(program.static_memory, memory_capacity, recorder)
        self.alpha, self.latency, self.algorithms = alpha, collective_latency, algorithms or {}
        self.protocols = protocols
        self.slowdown = comm_compute_slowdown
        self.contention = comm_contention if comm_compute_slowdown != 1.0 else 1.0
        self.across = copy_across if comm_compute_slowdown != 1.0 and domains is not None else 0.0
        # whether compute beside a collective is timed (what a slowed collective's rate follows)
        self._times_beside = self.contention != 1.0 or self.across > 0.0
        self.domains = domains
        # per device: seconds some compute ran slowed beside a collective, how many such
        # compute ops run now and since when (what a NCCL collective's rate follows)
        self._beside_s = [0.0] * program.num_devices
        self._beside_n = [0] * program.num_devices
        self._beside_at = [0.0] * program.num_devices
        self._beside_events: list[simpy.Event | None] = [None] * program.num_devices
        self.collective_model = collective_model
        # collectives in progress per device, and an event that fires when that changes
        self.active_collectives = [0] * program.num_devices
        # HBM bytes/s those collectives move per device (clustersim.workload.comm_interference)
        self.hbm_rate = [0.0] * program.num_devices
        #: per GPU, the running collectives by kind (Op.beside's key: NCCL, or the SMs DeepEP holds)
        self.held: list[dict[int, int]] = [{} for _ in range(program.num_devices)]
        self.collectives_changed = [env.event() for _ in range(program.num_devices)]
        ops = program.ops
        n = len(ops)
        self.start = [-1.0] * n
        self.end = [-1.0] * n  # end time per op id; Recorder.ops is filled from it after the run
        self.waiters = waiter_table(n)  # who waits on each op, or DONE (clustersim.engine.lanes)
        self.durations = (
            [op.duration for op in ops]
            if compute_scale is None
            else [op.duration * f for op, f in zip(ops, compute_scale)]
        )
        # lanes are stepped by the core, which pops SimPy's queue itself (lane_core)
        self._core = LaneStepper(
            self.start, self.end, self.waiters, self.memory, recorder.memory, lane_type=Lane, env=env
        )
        self.names = program.device_names
        # op -> (algorithm, analytical time or None), cached per collective shape
        self._collective_plan = CollectivePlans(
            env, fabric, self.names, alpha, self.algorithms, collective_model, collective_latency, protocols
        )
        self._rendezvous: dict[str, list] = {}
        self._calls: dict[tuple, Call] = {}  # collective calls, prepared once (_call)
        # folded sends' and collectives' twin orbits (fabric.folds_orbits), made once per shape
        self._orbits: dict[tuple, object] = {}
        #: folded ring sends (op id) under fold_contention → when the last of their hops landed;
        #: kept only where a CP ring of mixed hops is checked after the run (None: not kept,
        #: :func:`~clustersim.compilers.pipeline.context_parallel.rings_checked`)
        self.ring_landed: dict[int, float] | None = None
        self.lanes = program.lanes()
        names, slowed = self.names, self.slowdown != 1.0

        def send_time(op: Op) -> float | None:
            return fabric.fixed_time(names[op.origin()], names[ops[op.peer].device], op.nbytes)

        self._plans = [
            compile_lane(program, lane_ops, self.durations, slowed, send_time)
            for lane_ops in self.lanes.values()
        ]
        self.events = 0
        #: per op id, the seconds a compute op lost running at 1/slowdown beside collectives
        self.slowed_s: dict[int, float] = {}
        #: per collective op id, the seconds its kernels' SMs added to the link's time
        self.comm_slowed_s: dict[int, float] = {}

    def finished_count(self) -> int:
        """How many ops have ended so far (for a progress bar): a lane's ops before the one
        it runs or waits for have ended."""
        return sum(lane.idx for lane in getattr(self, "_lane_states", ()))

    @property
    def finished(self) -> list[bool]:
        """Whether each op (by id) has ended."""
        return [w is DONE for w in self.waiters[:-1]]

    def run(self) -> None:
        """Start every lane, run the simulation to the end; raise SimulationStall on deadlock."""
        self._lane_states = [
            Lane(lane_ops, firsts, plan, self._core.woken, self.env)
            for lane_ops, (firsts, plan) in zip(self.lanes.values(), self._plans)
        ]
        # As the DAG pass does: the run makes no reference cycles (a lane is its own end
        # event, a link forgets a finished flow), only small containers that live until it
        # ends (spans, memory samples) and would set the cyclic collector off over and
        # over, each pass over the Program's ops too (the quickstart: ~120 young and ~10
        # older collections per run when a caller has not paused it, as simulate() does)
        with collector_paused():  # the clock: the time of the last event (a held op's end sets none)
            set_now(self.env, self._core.run(self._lane_states, self.env.now, self._begin))
        # every event scheduled was processed once the loop returns: the simulated events
        self.events = scheduled_count(self.env)
        start, end, ops = self.start, self.end, self.recorder.ops
        if self.waiters.count(DONE) == len(self.waiters):
            ops.extend(zip(range(len(end)), start, end))
        else:
            ops.extend((i, start[i], t) for i, t in enumerate(end) if t >= 0.0)
            raise SimulationStall(self._stall_report())

    def _begin(self, lane: Lane, what: int, i: int, now: float) -> None:
        """Start op ``i`` (SLOWED, SENT or JOINED) at ``now``; it ends with an event of a
        process, the fabric or a collective, which wakes ``lane``."""
        set_now(self.env, now)  # the core sets the clock only where something else reads it
        op = self.program.ops[i]
        if what == JOINED:
            ended = self._arrive(op)
        else:
            self.start[i] = now
            ended = self.env.process(self._slowed_compute(op)) if what == SLOWED else self._send(op)
        ended.callbacks.append(lane.wake)

    def _send(self, op: Op) -> simpy.Event:
        names, fabric = self.names, self.fabric
        src, dst = op.origin(), self.program.ops[op.peer].device
        if op.shadows and fabric.folds_orbits:  # the twins' sends as one orbit
            orbits = self._orbits.get((src, dst, op.shadows))
            if orbits is None:
                pairs = [(names[a], names[b]) for a, b in op.shadows]
                orbits = self._orbits[src, dst, op.shadows] = send_orbits(fabric, pairs)
            if op.source < 0:
                return orbits.transfer(names[src], names[dst], op.nbytes, op.name)
            # a folded ring's send: when its last hop lands is kept, so that a ring of mixed
            # hops is checked after the run (compilers/pipeline/context_parallel.py); its hops
            # of one kind (inside a leaf, across its border) are one orbit each
            landed = orbits.transfer_classes(names[src], names[dst], op.nbytes, op.name)
            if self.ring_landed is not None:
                for event in landed:
                    event.callbacks.append(partial(self._ring_landed, op.id))
            return landed[0]
        # the representative's own flow first: it is replica 0, first in line in the unfolded run
        done = fabric.transfer(names[src], names[dst], op.nbytes, op.name)
        if fabric.shares_links:
            for a, b in op.shadows:  # folded-away twins' traffic loads the fabric too
                fabric.load(names[a], names[b], op.nbytes, op.name)
        return done

    def _ring_landed(self, i: int, _event) -> None:
        self.ring_landed[i] = self.env.now  # (events fire in time order: the last is the latest)

    def _slowed_compute(self, op):
        """Run a compute op at 1/slowdown speed while any collective is active on its GPU,
        re-evaluating the rate whenever a collective starts or ends there; an op priced
        kernel by kernel (``op.beside``) runs at its own factor for the HBM bytes/s the
        collectives move and the kinds running
        (:func:`~clustersim.hardware.interference.beside_factor`)."""
        env, dev, work = self.env, op.device, self.durations[op.id]
        while True:
            if not self.active_collectives[dev]:
                rate = 1.0
            elif op.beside:
                rate = 1.0 / beside_factor(
                    op.beside, op.duration, self.hbm_rate[dev], self.held[dev], self.slowdown
                )
            else:
                rate = 1.0 / self.slowdown
            t, timer = env.now, env.timeout(work / rate)
            beside = rate != 1.0 and self._times_beside
            if beside:
                self._beside_change(dev, +1)
            yield timer | self.collectives_changed[dev]
            if beside:
                self._beside_change(dev, -1)
            if rate != 1.0:  # w s at this rate did w·rate s of work: w·(1 − rate) s lost
                self.slowed_s[op.id] = self.slowed_s.get(op.id, 0.0) + (env.now - t) * (1.0 - rate)
            if timer.processed:
                return
            work -= (env.now - t) * rate

    def _beside_change(self, dev: int, delta: int) -> None:
        """Count a compute op starting (+1) or ending (-1) a stretch slowed beside a
        collective on GPU ``dev``, adding the time some ran since the last change."""
        now = self.env.now
        if self._beside_n[dev]:
            self._beside_s[dev] += now - self._beside_at[dev]
        self._beside_at[dev], self._beside_n[dev] = now, self._beside_n[dev] + delta
        ev = self._beside_events[dev]
        if ev is not None and not ev.triggered:  # a contended collective's tail waits on it
            ev.succeed()

    def _beside_time(self, dev: int) -> float:
        """Seconds some compute has run slowed beside a collective on GPU ``dev`` so far."""
        s = self._beside_s[dev]
        return s + (self.env.now - self._beside_at[dev]) if self._beside_n[dev] else s

    def _contention_lost(self, group: tuple[int, ...], since: list[float], rate: float) -> float:
        """Seconds of its rate alone a NCCL collective on ``group`` still has to move when
        its fabric time is over (``since``: :meth:`_beside_time` of each member when it
        started): it moved at ``rate`` of its rate while compute ran beside it, the longest
        such time on a member pacing the ring."""
        return max(self._beside_time(d) - s for d, s in zip(group, since)) * (1.0 - rate)

    def _across_rate(self, op: Op, seconds: float) -> float:
        """The rate a NCCL collective across NVLink domains keeps beside compute: what its
        CTAs copy then (:attr:`across`) over the bus bandwidth its link gave it alone (its
        bus bytes over the fabric's ``seconds``), at most 1."""
        bus = bus_share(op.collective, len(op.group)) * op.nbytes
        return min(1.0, self.across * seconds / bus) if bus > 0.0 and seconds > 0.0 else 1.0

    def _contended_tail(self, group: tuple[int, ...], lost: float, members, beside: float):
        """Move ``lost`` seconds of a collective's work at its rate alone, or at ``beside``
        of it while compute runs beside it on a member, re-evaluated as that compute starts
        and ends; the time counted per member op in ``comm_slowed_s``."""
        env, begun = self.env, self.env.now
        while lost > 0.0:
            rate = beside if any(self._beside_n[d] for d in group) else 1.0
            t, timer = env.now, env.timeout(lost / rate)
            yield env.any_of([timer, *(self._beside_event(d) for d in group)])
            lost = 0.0 if timer.processed else lost - (env.now - t) * rate
        for i in members:
            self.comm_slowed_s[i] = self.comm_slowed_s.get(i, 0.0) + (env.now - begun)

    def _one_domain(self, group: tuple[int, ...]) -> bool:
        """Whether every device of ``group`` sits in one NVLink domain (:attr:`domains`): the
        collectives the contention rows measure (NVLink copies by SMs, not a NIC's)."""
        d = self.domains
        return d is not None and all(g < len(d) for g in group) and len({d[g] for g in group}) == 1

    def _beside_event(self, dev: int) -> simpy.Event:
        """The event that fires when compute next starts or ends a stretch beside a
        collective on GPU ``dev``."""
        ev = self._beside_events[dev]
        if ev is None or ev.triggered:
            ev = self._beside_events[dev] = self.env.event()
        return ev

    def _collectives_change(
        self, group: tuple[int, ...], delta: int, rate: float = 0.0, key: int = NCCL
    ) -> None:
        """Count a collective of kind ``key`` (:attr:`Op.beside`'s) starting (+1) or ending
        (-1) on each GPU of ``group``, moving ``rate`` HBM bytes/s there, and wake the slowed compute ops waiting there. No event
        is emitted where nobody waits (always, with the slowdown off): the one there stays
        the device's current one."""
        changed, priced = self.collectives_changed, self.slowdown != 1.0
        for dev in group:
            self.active_collectives[dev] += delta
            if priced:  # (what the slowed compute reads; nothing reads it with the slowdown off)
                held = self.held[dev]
                held[key] = held.get(key, 0) + delta
                # back to exactly 0 when none runs: no float residue of the sums
                self.hbm_rate[dev] = (
                    self.hbm_rate[dev] + delta * rate if self.active_collectives[dev] else 0.0
                )
            ev = changed[dev]
            if ev.callbacks:
                changed[dev] = self.env.event()
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
                self.start[i] = self.env.now
            # a callback where a process's first step would run (URGENT, at now), so events
            # at equal times keep their order: one event instead of a process's start and end
            call_soon(self.env, partial(self._run_collective, op, state[1], state[2]))
        return state[1]

    def _run_collective(self, op: Op, finished: simpy.Event, members=(), _event=None) -> None:
        """Start ``op``'s collective now; ``finished`` succeeds when it has ended. Where its
        kernels' SMs cap its rate (``op.beside``'s second element, bytes/s:
        :func:`~clustersim.workload.comm_interference.held_rate`) it ends at the smooth
        minimum of the link's and the SMs' rates (:func:`~clustersim.hardware.comm_sms.stretched`),
        the seconds added counted per member op (``members``) in ``comm_slowed_s``."""
        algorithm, analytical_time = self._collective_plan(op)
        rate = 0.0
        if self.slowdown != 1.0:  # what the compute priced kernel by kernel beside it loses
            rate = hbm_rate(op.collective, len(op.group), op.nbytes, self._collective_plan.idle_time(op))
        key = op.beside[0] if op.beside else NCCL  # DeepEP's SMs, or NCCL's CTAs
        self._collectives_change(op.group, +1, rate, key)
        sm_s, begun = (op.nbytes / op.beside[1] if len(op.beside) > 1 else 0.0), self.env.now
        # a NCCL collective slowed by the compute beside it (comm_contention): within one
        # NVLink domain at the curve's rate, across domains at what its CTAs then copy
        within = self._one_domain(op.group)
        priced = self.contention != 1.0 if within else self.across > 0.0
        since = [self._beside_time(d) for d in op.group] if key == NCCL and priced else None

        def done(_event=None) -> None:
            self._collectives_change(op.group, -1, rate, key)
            finished.succeed()

        def ended(_event) -> None:
            extra = stretched(self.env.now - begun, sm_s) - (self.env.now - begun) if sm_s else 0.0
            lost, beside = 0.0, 1.0
            if since is not None:
                beside = self.contention if within else self._across_rate(op, self.env.now - begun)
                lost = self._contention_lost(op.group, since, beside)
            if lost > 0.0:  # the work the compute beside it cost, at the rate it now gets
                tail = self.env.process(self._contended_tail(op.group, lost, members, beside))
                tail.callbacks.append(done)
                return
            if extra <= 0.0:
                done()
                return
            for i in members:  # the SMs still copy: the collective holds its GPUs a while longer
                self.comm_slowed_s[i] = self.comm_slowed_s.get(i, 0.0) + extra
            self.env.timeout(extra).callbacks.append(done)

        if analytical_time is not None:
            self.env.timeout(analytical_time).callbacks.append(ended)
        elif op.shadows and self.fabric.folds_orbits:  # the twins' messages ride as orbits
            fabric = self._orbits.get((op.group, op.shadows))
            if fabric is None:
                groups = [[self.names[d] for d in g] for g in (op.group, *op.shadows)]
                fabric = self._orbits[op.group, op.shadows] = MirroredFabric(self.fabric, groups)
            self.env.process(self._call(op, op.group, algorithm, fabric).run(op.tag)).callbacks.append(ended)
        else:
            # first, as replica 0 would be in the unfolded run
            own_done = self.env.process(self._call(op, op.group, algorithm).run(op.tag))
            for group in op.shadows if self.fabric.shares_links else ():  # folded twins' collectives
                self.env.process(self._call(op, group, algorithm).run(op.tag, shadow=True))
            own_done.callbacks.append(ended)

    def _call(self, op: Op, group: tuple[int, ...], algorithm: str, fabric=None) -> Call:
        """``op``'s collective among the devices ``group`` by ``algorithm`` (on ``fabric``:
        a :class:`~clustersim.network.orbits.MirroredFabric`, or None: the engine's), checked
        and planned once per (kind, group, size, algorithm, split, fabric) — every micro-batch
        repeats it."""
        key = (op.collective, group, op.nbytes, algorithm, op.split)
        if fabric is not None:
            key += (id(fabric),)  # (kept alive by self._orbits: its id is never reused)
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = prepare_collective(
                self.env,
                fabric or self.fabric,
                op.collective,
                [self.names[d] for d in group],
                op.nbytes,
                algorithm,
                Tuning(self.alpha, self.latency, self.protocols),
                Options(split=op.split or None),
            )
        return call

    def _stall_report(self) -> str:
        ops, lines, finished = self.program.ops, [], self.finished
        for lane in self._lane_states:
            if lane.idx == len(lane.ops):
                continue
            op = lane.ops[lane.idx]  # the lane's first unfinished op; the rest queue behind it
            why = [f"{ops[d]!r}" for d in op.deps if not finished[d]]
            if op.kind == RECV and not finished[op.peer]:
                why.append(f"its send {ops[op.peer]!r}")
            if op.kind == COLLECTIVE:
                arrived = self._rendezvous.get(op.tag, [set()])[0]
                missing = [self.names[d] for d in op.group if d not in arrived]
                why.append(f"collective members that never arrived: {', '.join(missing)}")
            lines.append(f"  {op!r} waits for {'; '.join(why) or 'nothing (engine bug)'}")
        unfinished = finished.count(False)
        return (
            f"simulation stalled at t={self.env.now:.9g} s with {unfinished} ops unfinished "
            f"(deadlock). Stuck ops:\n" + "\n".join(lines)
        )
