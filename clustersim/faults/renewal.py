"""A long job under failures drawn at rates: a seeded process at the job level.

The engine simulates one iteration (its time ``T``); a job of ``N`` iterations is then
``W = N·T`` seconds of work, never simulated iteration by iteration. Failures of each
component class arrive as independent Poisson processes (rate λ_c, :mod:`.rates`), so
together as one of rate Λ = Σ λ_c whose every failure is of class c with probability
λ_c / Λ. The wall clock advances one failure at a time, with closed forms in between:

* **checkpoints** every ``τ = k·T`` of work. *Blocking*: the job stops ``C`` (checkpoint
  bytes / storage bandwidth) per checkpoint; a period is ``p = τ + C`` and checkpoint j
  is durable at ``j·p`` after the restart. *Asynchronous*: the job stops only ``s`` (the
  snapshot to host memory) and the upload of ``C`` runs behind the next period; a
  snapshot waits for the previous upload (a stall ``max(0, C − τ)``), so
  ``p = τ + s + max(0, C − τ)`` and checkpoint j is durable at ``j·p + C``.
* a failure ``x`` seconds after the restart keeps the work of the last *durable*
  checkpoint, ``m·τ`` with ``m = ⌊x / p⌋`` (blocking) or ``⌊(x − C) / p⌋`` (async, ≥ 0),
  and loses the rest of those ``x`` seconds;
* then the job is down: ``detection`` + ``restart`` + (a hardware class — gpu, node,
  nic — only) ``replacement`` unless a hot spare is free (a spare taken returns to the
  pool ``repair`` later) + the checkpoint read ``C`` (none before the first checkpoint).
  A failure domain's (``leaf``, ``rack``: :mod:`.domains`) is one such failure — one
  restart — that takes all its nodes: each needs a free spare, else the job waits
  ``replacement`` once (the nodes are swapped together).
  Failures keep arriving while it is down; one that does restarts the recovery;
* the job ends when ``W`` is done: ``W + (⌈W/τ⌉ − 1)`` checkpoint stops after the last
  restart.

**elastic** continuation instead keeps the work of every finished iteration (the
surviving replicas hold it): a failure loses the partial iteration only, the job pauses
``detection`` + ``replan``, and a hardware failure's node leaves the job for
``repair`` (a domain's failure: all its nodes), during which iterations take ``T(d)`` (``d`` nodes out, the re-planned
configuration's simulated time; failures strike at the rate of the nodes still in the
job, and while no plan fits the job waits for a node to return); its return costs
another ``replan`` pause. Failures are drawn only while the job runs (none during its
pauses). Checkpoint stops come at every τ of work as in the restart policy, so with
every rate zero the job equals the failure-free one here too.

With every rate zero the job time is exactly that of the failure-free job.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .rates import HARDWARE

COLUMNS = ["time_s", "component", "lost_s", "down_s", "during_recovery", "nodes"]


@dataclass(frozen=True)
class FleetJob:
    """The job-level inputs (module doc); times in seconds, ``rates`` in failures per
    second of the whole job by component class."""

    work_s: float
    rates: dict[str, float]
    interval_s: float = math.inf  # τ: work between checkpoints (inf: none)
    write_s: float = 0.0  # C: checkpoint bytes / storage bandwidth
    snapshot_s: float | None = None  # s: the asynchronous write's blocking copy (None: blocking)
    detection_s: float = 0.0
    restart_s: float = 0.0
    replacement_s: float = 0.0
    spares: int = 0
    repair_s: float = 0.0
    replan_s: float = 0.0
    #: elastic only: iteration time with d of the ``nodes`` out (None: checkpoint_restart;
    #: inf: no plan fits, the job waits for a node to return)
    iteration_time: Callable[[int], float] | None = field(default=None, compare=False)
    nodes: int = 1
    #: failure domain class → the nodes each of its units takes (:mod:`.domains`)
    takes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def stop_s(self) -> float:
        """What one checkpoint stops the job for (blocking: C; async: s + any stall)."""
        if self.snapshot_s is None:
            return self.write_s
        return self.snapshot_s + max(0.0, self.write_s - self.interval_s)

    @property
    def period_s(self) -> float:
        return self.interval_s + self.stop_s

    def run_time(self, work: float) -> float:
        """Time to do ``work`` seconds of work with no failure: its checkpoint stops added."""
        if work <= 0:
            return 0.0
        stops = math.ceil(work / self.interval_s) - 1 if math.isfinite(self.interval_s) else 0
        return work + stops * self.stop_s

    def durable(self, x: float) -> int:
        """Checkpoints durable ``x`` seconds after a restart (module doc)."""
        if not math.isfinite(self.interval_s):
            return 0
        lag = 0.0 if self.snapshot_s is None else self.write_s
        return max(0, math.floor((x - lag) / self.period_s))


@dataclass
class Outcome:
    """One seeded job: its time, where the time went, and one row per failure."""

    job_time_s: float
    work_s: float
    lost_s: float = 0.0
    down_s: float = 0.0
    checkpoint_s: float = 0.0
    rows: list[tuple] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return len(self.rows)

    @property
    def goodput_fraction(self) -> float:
        """Work / job time: the failure-free, checkpoint-free job's fraction."""
        return self.work_s / self.job_time_s if self.job_time_s > 0 else 1.0


class _Failures:
    """The merged Poisson process: the next gap and the class of each failure."""

    def __init__(self, rates: dict[str, float], seed: int):
        self.rng = np.random.default_rng(seed)
        self.classes = sorted(rates)
        self.total = sum(rates.values())
        self.p = np.array([rates[c] for c in self.classes]) / self.total if self.total else None

    def gap(self, share: float = 1.0) -> float:
        """Time to the next failure while ``share`` of the job's units are in it."""
        return float(self.rng.exponential(1.0 / self.total)) / share if self.total * share > 0 else math.inf

    def component(self) -> str:
        return self.classes[int(self.rng.choice(len(self.classes), p=self.p))]

    def nodes_taken(self, comp: str, takes: dict[str, tuple[int, ...]]) -> int:
        """Nodes a failure of class ``comp`` takes out: one for a hardware class, a
        domain's own count (which unit failed drawn only where the units differ), else
        none (software, links, switches: the job restarts on the same nodes)."""
        if comp in HARDWARE:
            return 1
        sizes = takes.get(comp, (0,))
        if min(sizes) == max(sizes):
            return sizes[0]
        return sizes[int(self.rng.integers(len(sizes)))]


def simulate(job: FleetJob, seed: int) -> Outcome:
    """One job of ``job`` under failures drawn with ``seed`` (module doc)."""
    if job.iteration_time is not None:
        return _elastic(job, _Failures(job.rates, seed))
    return _restarts(job, _Failures(job.rates, seed))


def _restarts(job: FleetJob, fail: _Failures) -> Outcome:
    out = Outcome(0.0, job.work_s)
    left, t, durable_ever = job.work_s, 0.0, False
    spare_back: list[float] = [0.0] * job.spares  # when each spare is (again) free
    while True:
        x, finish = fail.gap(), job.run_time(left)
        if x >= finish:
            out.checkpoint_s += job.run_time(left) - left
            out.job_time_s = t + finish
            return out
        m = job.durable(x)
        out.checkpoint_s += m * job.stop_s
        out.lost_s += x - m * job.period_s
        left -= m * job.interval_s
        durable_ever = durable_ever or m > 0
        t += x
        lost, during = x - m * job.period_s, False
        while True:  # down until a recovery completes with no failure inside it
            comp = fail.component()
            taken = fail.nodes_taken(comp, job.takes)
            down = job.detection_s + job.restart_s + (job.write_s if durable_ever else 0.0)
            if taken:
                down += _replace(job, spare_back, t, taken)
            y = fail.gap()
            out.rows.append((t, comp, lost, min(down, y), during, taken))
            if y >= down:
                out.down_s += down
                t += down
                break
            out.down_s += y
            t, lost, during = t + y, 0.0, True


def _replace(job: FleetJob, spare_back: list[float], t: float, nodes: int) -> float:
    """The wait for ``nodes`` replacement nodes at ``t``: none if as many hot spares are
    free (each taken leaves for repair and is free again ``repair`` later), else
    ``replacement`` (the free spares are taken all the same)."""
    free = [i for i, back in enumerate(spare_back) if back <= t][:nodes]
    for i in free:
        spare_back[i] = t + job.repair_s
    return 0.0 if len(free) == nodes else job.replacement_s


def _elastic(job: FleetJob, fail: _Failures) -> Outcome:
    out = Outcome(0.0, job.work_s)
    base = job.iteration_time(0)
    pos = _Position(job)
    t, back = 0.0, []  # back: when each node out of the job returns
    while True:
        t_it = job.iteration_time(len(back))
        rate = base / t_it  # work seconds (healthy iterations) per running second; 0: no plan fits
        x, ret = fail.gap(1.0 - len(back) / job.nodes), min(back, default=math.inf) - t
        finish = pos.finish_s(rate)
        if finish <= min(x, ret):
            out.checkpoint_s += pos.stops_left() * job.stop_s
            out.job_time_s = t + finish
            return out
        if ret <= x:  # a repaired node rejoins: re-plan onto it
            out.checkpoint_s += pos.advance(ret, rate)
            back.remove(min(back))
            t += ret + job.replan_s
            out.down_s += job.replan_s
            continue
        out.checkpoint_s += pos.advance(x, rate)
        partial = pos.drop_partial(base) / rate if rate > 0 else 0.0  # the iteration under way
        out.lost_s += partial
        t += x
        comp = fail.component()
        down = job.detection_s + job.replan_s
        taken = min(fail.nodes_taken(comp, job.takes), job.nodes - len(back))  # those still in
        back.extend([t + down + job.repair_s] * taken)
        out.rows.append((t, comp, partial, down, False, taken))
        out.down_s += down
        t += down


class _Position:
    """Where an elastic job is: ``work`` seconds of healthy-iteration work done and ``k``
    checkpoints written (at work k·τ, none at the end); a stop cut short by an event is
    not resumed."""

    def __init__(self, job: FleetJob):
        self.job, self.work, self.k = job, 0.0, 0
        tau = job.interval_s
        self.last = math.ceil(job.work_s / tau) - 1 if math.isfinite(tau) else 0  # checkpoints in the job

    def stops_left(self) -> int:
        return max(0, self.last - self.k)

    def finish_s(self, rate: float) -> float:
        """Running time to the end at ``rate`` (work per second), checkpoint stops included."""
        if rate <= 0:
            return math.inf
        return (self.job.work_s - self.work) / rate + self.stops_left() * self.job.stop_s

    def advance(self, x: float, rate: float) -> float:
        """Run ``x`` seconds at ``rate`` (never to the end); returns the stop time in them."""
        tau, s = self.job.interval_s, self.job.stop_s
        stops = 0.0
        while x > 0 and rate > 0:
            if self.k >= self.last:  # no checkpoint left before the end
                self.work += x * rate
                return stops
            to_b = ((self.k + 1) * tau - self.work) / rate
            if x < to_b:
                self.work += x * rate
                return stops
            x -= to_b
            self.k += 1
            self.work = self.k * tau
            stops += min(x, s)
            x -= s
            n = min(math.floor(x / (tau / rate + s)), self.last - self.k) if x > 0 else 0
            self.k += n
            self.work = self.k * tau
            x -= n * (tau / rate + s)
            stops += n * s
        return stops

    def drop_partial(self, base: float) -> float:
        """Lose the iteration under way (``base`` work seconds each); returns the work lost."""
        kept = max(self.k * self.job.interval_s if self.k else 0.0, math.floor(self.work / base) * base)
        lost, self.work = self.work - kept, kept
        return lost
