"""The queue's event loop: arrivals, starts, preemptions and ends on one cluster, each job
advancing at the iteration time it has under the sharing present (docs/scheduler.md).

The loop is piecewise: between two events (an arrival, an end) the set of running jobs
and their placements are fixed, and each running job completes iterations at the rate
``1 / iteration time`` that ``times(placed)`` gives for that set. When the set changes the
times are asked again. A job's progress is fractional between events; a preempted job
keeps only its whole iterations (the partial one is lost; no checkpoint cost is priced).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from ..scenario.multi_job import place_by_policy
from .policies import Running, Waiting, decide, queue_rank


@dataclass
class _Run:
    """A running job: GPUs, iterations left at ``t0`` (its segment's start), iteration time."""

    gpus: tuple[int, ...]
    left0: float
    t0: float
    started_s: float
    iter_s: float = math.nan
    sharing: int = 0  # jobs running in this stretch

    def left(self, now: float) -> float:
        return self.left0 - (now - self.t0) / self.iter_s

    def end(self) -> float:
        return self.t0 + self.left0 * self.iter_s


class Stretch(NamedTuple):
    """A job's run at constant sharing: ``run_s`` its length, ``iterations`` those done in
    it (for the stretch that ends a job, exactly the iterations left, and ``run_s`` =
    iterations × ``iteration_time_s``), ``sharing`` the number of jobs running."""

    job: str
    start_s: float
    end_s: float
    run_s: float
    iterations: float
    gpus: tuple[int, ...]
    iteration_time_s: float
    sharing: int


@dataclass
class Trace:
    """What happened: ``events`` ``(t, kind, job, detail)`` in order (kinds ``arrive``,
    ``start``, ``preempt`` (detail: the job that preempted it), ``end``, ``reserve``
    (detail: EASY's shadow time for the blocked head)); ``segments`` one
    :class:`Stretch` per job and stretch of constant sharing."""

    events: list[tuple] = field(default_factory=list)
    segments: list[Stretch] = field(default_factory=list)


def drive(jobs: list, total: int, per_node: int, policy: str, preemption: bool, times: Callable) -> Trace:
    """Run the queue of ``jobs`` (each with ``name``, ``index``, ``gpus``, ``iterations``,
    ``priority``, ``arrival_s``, ``placement``) on ``total`` GPUs of ``per_node`` a node.
    ``times(placed)`` maps the running jobs' placements (name → GPUs) to their iteration
    times; ``times({name: first n GPUs})`` is a job's estimate alone."""
    by_name = {j.name: j for j in jobs}
    alone = {j.name: times({j.name: tuple(range(j.gpus))})[j.name] for j in jobs}
    future = sorted(jobs, key=lambda j: (j.arrival_s, j.index))
    waiting: dict[str, float] = {}  # name → iterations left
    running: dict[str, _Run] = {}
    out = Trace()
    now = 0.0
    while future or waiting or running:
        ends = [(r.end(), n) for n, r in running.items()]
        now = min([t for t, _ in ends] + ([future[0].arrival_s] if future else []))
        changed = False
        for t, name in sorted(ends):
            if t <= now:
                run = running.pop(name)
                out.segments.append(_segment(name, run, t, run.left0))
                out.events.append((t, "end", name, None))
                changed = True
        while future and future[0].arrival_s <= now:
            job = future.pop(0)
            waiting[job.name] = float(job.iterations)
            out.events.append((job.arrival_s, "arrive", job.name, None))
        queue = [
            Waiting(n, by_name[n].gpus, by_name[n].priority, _rank(policy, by_name[n]), left * alone[n])
            for n, left in waiting.items()
        ]
        present = [
            Running(n, len(r.gpus), by_name[n].priority, r.started_s, r.end(), _rank(policy, by_name[n]))
            for n, r in running.items()
        ]
        step = decide(policy, preemption, now, total, queue, present)
        if step.reservation is not None:
            out.events.append((now, "reserve", step.reservation[0], step.reservation[1]))
        for victim, by in step.preempt:
            run = running.pop(victim)
            done = by_name[victim].iterations - run.left(now)
            waiting[victim] = by_name[victim].iterations - math.floor(done + 1e-9)
            out.segments.append(_segment(victim, run, now))
            out.events.append((now, "preempt", victim, by))
        for name in step.start:
            held = {g for r in running.values() for g in r.gpus}
            free = [g for g in range(total) if g not in held]
            gpus = place_by_policy(by_name[name].placement, by_name[name].gpus, free, per_node)
            running[name] = _Run(gpus, waiting.pop(name), now, now)
            out.events.append((now, "start", name, gpus))
        if changed or step.start or step.preempt:
            _reprice(running, now, times, out)
    return out


def _rank(policy: str, job) -> tuple:
    return queue_rank(policy, job.priority, job.arrival_s, job.index)


def _segment(name: str, run: _Run, end: float, done: float | None = None) -> Stretch:
    """The stretch of ``run`` up to ``end``; ``done``: the iterations left, when it ends the job."""
    if done is None:
        return Stretch(
            name, run.t0, end, end - run.t0, (end - run.t0) / run.iter_s, run.gpus, run.iter_s, run.sharing
        )
    return Stretch(name, run.t0, end, done * run.iter_s, done, run.gpus, run.iter_s, run.sharing)


def _reprice(running: dict[str, _Run], now: float, times: Callable, out: Trace) -> None:
    """The set of running jobs changed at ``now``: close each continuing job's stretch and
    start a new one at the iteration times of the new set."""
    if not running:
        return
    new = times({n: r.gpus for n, r in running.items()})
    for name, run in running.items():
        if not math.isnan(run.iter_s):  # it ran before now: its stretch ends here
            out.segments.append(_segment(name, run, now))
            run.left0, run.t0 = run.left(now), now
        run.iter_s, run.sharing = new[name], len(running)
