"""Run a multi-job scenario: every job's Program together on the shared fabric, one Result.

resolve each job (on its placed GPUs: its fold check compares its twins' routes there) →
compile it → merge the Programs onto the jobs' placed GPUs (:mod:`.merge`) → one engine run
on the cluster's fabric (so the jobs' messages and collectives share links) → one Result per
job (:mod:`.split`) and the combined Result. A folded job whose twins would meet another
job's traffic unlike its representative (:mod:`.shared_links`) is refused under
``simulation.fold: true`` and compiled again unfolded under ``auto``, its summary's
``folded`` saying why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from ..compilers import check_job, compile_job, mode_of
from ..compilers.pipeline.context_parallel import rings_checked, unhidden_ring
from ..engine.collector import collector_paused
from ..errors import ScenarioError
from ..resolve import resolve
from ..resolve.estimate import check_budget
from ..resolve.fold import Placement
from ..scenario import MultiJobScenario
from ..scenario.multi_job import job_error
from ..trace.result import Result
from .merge import merge_programs
from .shared_links import shared_link_obstacles
from .split import combined_result, job_result


def resolve_jobs(sc: MultiJobScenario) -> dict:
    """Each job of ``sc`` resolved on its placed GPUs (:class:`~clustersim.resolve.fold.Placement`)
    and checked, by name; a job its compiler refuses is named ``jobs[k]``."""
    jobs = {}
    for k, (name, one) in enumerate(sc.jobs.items()):  # each checked before any runs
        job = replace(resolve(one), placement=Placement(sc.placement[name]))
        try:
            jobs[name] = check_job(job)
        except ScenarioError as exc:
            raise job_error(k, exc) from None
    return jobs


def simulate_jobs(sc: MultiJobScenario, build_engine: Callable) -> Result:
    """The combined Result of a multi-job scenario (docs/multi_job.md); ``res.jobs[name]``
    holds each job's own Result. ``build_engine(job, program, gpus, checks_rings) -> (engine, note)`` is
    :func:`clustersim.simulate.build_engine` (handed in: it ranks above)."""
    wall0 = time.perf_counter()
    jobs = resolve_jobs(sc)
    for job in jobs.values():
        check_budget(job)
    run = _Run(sc, jobs, build_engine)
    folded = {name for name, job in jobs.items() if job.fold.enabled}
    # (the DAG pass, which has no fabric of its own, runs only where no link is shared)
    while folded and getattr(getattr(run.engine, "fabric", None), "shares_links", False):
        shared = shared_link_obstacles(run.merged, run.placed, folded, run.first.graph)
        if not shared:
            break
        run.unfold(shared)  # (refused, under fold: true); the others checked again
        folded -= set(shared)
    while True:
        with collector_paused():  # as a single job's run (engine/collector.py)
            run.engine.run()
        # a mixed CP ring folded on trust that did not hide: that job unfolded (fold: true refuses)
        unhidden = {p.name: unhidden_ring(jobs[p.name], run.engine, p.ops) for p in run.placed}
        unhidden = {name: why for name, why in unhidden.items() if why is not None}
        if not unhidden:
            break
        run.unfold(unhidden)
    engine, note, rec = run.engine, run.note, run.engine.recorder
    wall = time.perf_counter() - wall0
    results = {}
    for where in run.placed:
        job, mode = jobs[where.name], run.modes[where.name]
        results[where.name] = job_result(job, mode, run.progs[where.name], where, engine, rec, wall)
        results[where.name].summary["evaluator"] = note
    return combined_result(sc, run.merged, run.placed, results, engine, rec, wall, note)


class _Run:
    """The jobs' Programs, compiled and merged, and the engine (not yet run) that runs them."""

    def __init__(self, sc: MultiJobScenario, jobs: dict, build_engine: Callable):
        self.sc, self.jobs, self._build = sc, jobs, build_engine
        self.modes = {name: mode_of(job) for name, job in jobs.items()}
        self.progs = {name: compile_job(job, mode=self.modes[name]) for name, job in jobs.items()}
        # the fabric, memory and evaluator read the shared sections only
        self.first = next(iter(jobs.values()))
        self._merge()

    def _merge(self) -> None:
        sc, progs = self.sc, self.progs
        self.merged, self.placed = merge_programs(
            sc.cluster.num_gpus, [(name, progs[name], sc.placement[name], sc.start[name]) for name in progs]
        )
        self.merged.check()
        checks = any(rings_checked(job) for job in self.jobs.values())
        self.engine, self.note = self._build(self.first, self.merged, sc.cluster.num_gpus, checks)

    def unfold(self, refused: dict[str, str]) -> None:
        """Compile the jobs ``refused`` names again unfolded, each with why
        (:attr:`~clustersim.resolve.Job.fold_refused`; under ``fold: true`` that raises), and
        merge and build anew."""
        for name, why in refused.items():
            job = self.jobs[name] = replace(self.jobs[name], fold_refused=why)
            self.progs[name] = compile_job(job, mode=self.modes[name])
        self._merge()
