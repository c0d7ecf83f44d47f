"""Run a queue scenario: the policy decides starts and placements (:mod:`.drive`), the
multi-job simulation prices each set of jobs that run together (docs/scheduler.md).

A set's iteration times come from one multi-job run of exactly those jobs on their
placed GPUs, all starting at t = 0 (:func:`clustersim.simulate`); runs are cached by set
and placement. A job alone on the cluster's first n GPUs is that job's single-job run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from .. import output
from ..resolve import topology_graph
from ..scenario.queue import QueueScenario
from ..simulate import simulate
from ..topology.routing import Router
from .drive import Stretch, Trace, drive


@dataclass
class Schedule:
    """The outcome of a queue: ``jobs`` one row per job, ``timeline`` one row per job and
    stretch of constant sharing (with the GPUs and fabric links it holds), ``events`` the
    scheduler's log, ``summary`` the cluster's numbers (docs/scheduler.md)."""

    jobs: pd.DataFrame
    timeline: pd.DataFrame
    events: list[tuple]
    summary: dict[str, Any]

    def plot(self):
        """GPU rows against time, a bar per job and stretch, and the links two jobs hold at
        once (:func:`clustersim.viz.schedule.plot_schedule`); returns the Figure."""
        from ..viz.schedule import plot_schedule  # matplotlib only when a picture is asked for

        return plot_schedule(self.timeline, self.summary["num_gpus"])

    def save(self, folder: str | Path) -> Path:
        """Write ``jobs.csv``, ``timeline.csv`` (GPUs and links joined by spaces),
        ``events.csv``, ``summary.json`` and ``schedule.png`` into ``folder``; returns it."""
        out = output.folder(folder)
        timeline = self.timeline.assign(
            gpus=self.timeline["gpus"].map(lambda g: " ".join(map(str, g))),
            links=self.timeline["links"].map(" ".join),
        )
        events = pd.DataFrame(self.events, columns=["time_s", "kind", "job", "detail"])
        for name, table in (("jobs", self.jobs), ("timeline", timeline), ("events", events)):
            output.write_text(out / f"{name}.csv", table.to_csv(index=False))
        output.write_text(out / "summary.json", json.dumps(self.summary, indent=1))
        with output.atomic_path(out / "schedule.png") as tmp:
            self.plot().savefig(tmp, format="png", dpi=100)
        return out


class SharedTimes:
    """``times(placed)`` for :func:`.drive.drive`: each job's ``iteration_time_s`` when the
    jobs ``placed`` (name → GPUs) run together, from one multi-job simulation, cached;
    ``oom`` the jobs that ran out of GPU memory in any of them."""

    def __init__(self, sc: QueueScenario):
        self.sc, self.cache, self.oom = sc, {}, set()

    def __call__(self, placed: dict[str, tuple[int, ...]]) -> dict[str, float]:
        key = tuple(sorted(placed.items()))
        if key not in self.cache:
            res = simulate(self.sc.shared(placed), progress=False)
            self.cache[key] = {n: res.jobs[n].summary["iteration_time_s"] for n in placed}
            self.oom.update(n for n in placed if res.jobs[n].summary["oom"])
        return self.cache[key]


def schedule(source: QueueScenario | dict | str | Path) -> Schedule:
    """Run the queue scenario ``source`` (a path, a dict or a :class:`QueueScenario`)."""
    sc = source if isinstance(source, QueueScenario) else QueueScenario(source)
    times = SharedTimes(sc)
    trace = drive(sc.jobs, sc.cluster.num_gpus, sc.cluster.gpus_per_node, sc.policy, sc.preemption, times)
    timeline = _timeline(trace, Router(topology_graph(sc.cluster)))
    jobs = _jobs(sc.jobs, trace, times)
    return Schedule(jobs, timeline, trace.events, _summary(sc, jobs, timeline))


def _timeline(trace: Trace, router: Router) -> pd.DataFrame:
    table = pd.DataFrame(trace.segments, columns=Stretch._fields).sort_values(
        ["start_s", "job"], kind="stable"
    )
    links: dict[tuple, tuple[str, ...]] = {}
    for gpus in table["gpus"]:
        if gpus not in links:
            links[gpus] = held_links(router, gpus)
    table["links"] = table["gpus"].map(links)
    return table.reset_index(drop=True)


def held_links(router: Router, gpus: tuple[int, ...]) -> tuple[str, ...]:
    """The fabric links (``"u->v"``) on the routes between every ordered pair of ``gpus``
    (ECMP choice without a flow key): the links the job's traffic may cross."""
    out = set()
    for a in gpus:
        for b in gpus:
            if a != b:
                path = router.path(f"gpu{a}", f"gpu{b}")
                out.update(f"{u}->{v}" for u, v in zip(path, path[1:]))
    return tuple(sorted(out))


def _jobs(queue: list, trace: Trace, times: SharedTimes) -> pd.DataFrame:
    """One row per job (docs/scheduler.md, Results); ``times`` prices a job alone on the
    GPUs of each of its stretches (its run time with no other job on the fabric)."""
    rows = []
    for job in queue:
        mine = [s for s in trace.segments if s.job == job.name]
        starts = [e for e in trace.events if e[1] == "start" and e[2] == job.name]
        end = next(e[0] for e in trace.events if e[1] == "end" and e[2] == job.name)
        run_s = sum(s.run_s for s in mine)
        placed_s = sum(s.iterations * times({job.name: s.gpus})[job.name] for s in mine)
        alone_s = job.iterations * times({job.name: tuple(range(job.gpus))})[job.name]
        response = end - job.arrival_s
        rows.append(
            {
                "job": job.name,
                "gpus": job.gpus,
                "priority": job.priority,
                "iterations": job.iterations,
                "arrival_s": job.arrival_s,
                "start_s": starts[0][0],
                "end_s": end,
                "queueing_delay_s": response - run_s,
                "run_time_s": run_s,
                "placed_run_time_s": placed_s,
                "alone_run_time_s": alone_s,
                "sharing_slowdown": run_s / placed_s,
                "slowdown": response / alone_s,
                "preemptions": sum(1 for e in trace.events if e[1] == "preempt" and e[2] == job.name),
                "oom": job.name in times.oom,
            }
        )
    return pd.DataFrame(rows)


def _summary(sc: QueueScenario, jobs: pd.DataFrame, timeline: pd.DataFrame) -> dict[str, Any]:
    makespan = float(jobs["end_s"].max())
    busy = float(((timeline["end_s"] - timeline["start_s"]) * timeline["gpus"].map(len)).sum())
    return {
        "policy": sc.policy,
        "preemption": sc.preemption,
        "num_jobs": len(jobs),
        "num_gpus": sc.cluster.num_gpus,
        "makespan_s": makespan,
        "utilization": busy / (sc.cluster.num_gpus * makespan),
        "mean_queueing_delay_s": float(jobs["queueing_delay_s"].mean()),
        "mean_slowdown": float(jobs["slowdown"].mean()),
        "mean_sharing_slowdown": float(jobs["sharing_slowdown"].mean()),
    }
