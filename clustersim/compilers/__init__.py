"""Training modes: one compiler per way of running a job, and what each run reports.

:data:`MODES` holds them in the order they are asked whether they run a Job — the
parameter server, inference, stage-replicated pipelines, then the uniform pipeline, which
takes every Job the others do not. :func:`mode_of` picks one; :func:`compile_job` compiles
a Job with it. To add a mode, write a :class:`TrainingMode` subclass in a module of its
own, with a ``priority`` below the first mode that would also claim its Jobs, and
``MODES.add`` an instance there (docs/architecture.md).
"""

from __future__ import annotations

import importlib
import pkgutil

from ..coarsen import coarsen
from ..errors import ProgramError
from ..program import Program
from ..resolve import Job
from .base import MODES, JobContext, ModeReport, TrainingMode

# every module of the package registers its mode (so adding a mode is one file)
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def mode_of(job: Job) -> TrainingMode:
    """The first registered mode that runs ``job``."""
    return next(mode for mode in MODES.values() if mode.applies(job))


def check_job(job: Job) -> Job:
    """``job``, once the mode that runs it has found nothing it cannot run
    (:meth:`TrainingMode.check`; raises ScenarioError otherwise)."""
    mode_of(job).check(job)
    return job


def compile_job(
    job: Job, fold: bool | None = None, acyclic: bool = True, mode: TrainingMode | None = None
) -> Program:
    """The checked Program of ``job`` — a checked Job (:func:`check_job`, which
    :func:`clustersim.resolve_scenario` runs) — coarsened when ``simulation.granularity`` is
    ``stage``. ``fold``: None applies the Job's fold decision; True folds whenever folding
    is exact (tools that need one GPU per stage, e.g. the memory estimate). ``acyclic``
    False: cycles are left to the DAG pass that runs it next (:meth:`Program.check`; a
    stalled run's cycle is named by :func:`name_cycle`). ``mode``: the mode that runs
    ``job``, when the caller holds it (default :func:`mode_of`)."""
    mode = mode or mode_of(job)
    prog = mode.compile(JobContext.of(job, fold))
    try:
        if not mode.checked:
            prog.check(acyclic)
    except ProgramError as exc:
        raise _invalid(job, mode, exc) from None
    return coarsen(prog) if job.simulation.granularity == "stage" else prog


def name_cycle(job: Job, prog: Program, mode: TrainingMode | None = None) -> None:
    """Raise the ProgramError :func:`compile_job` raises for a cycle in ``job``'s Program
    ``prog``, if it holds one (a run whose cycle check was left to the DAG pass stalled);
    ``mode`` as in :func:`compile_job`."""
    try:
        prog.check_acyclic()
    except ProgramError as exc:
        raise _invalid(job, mode or mode_of(job), exc) from None


def _invalid(job: Job, mode: TrainingMode, exc: ProgramError) -> ProgramError:
    """``exc`` naming what produced the Program: the user changes that."""
    par = job.parallel
    return ProgramError(
        f"the {mode.name} Program of schedule {par.schedule!r} (pp = {par.pp}, m = "
        f"{job.num_microbatches}, virtual_stages = {par.virtual_stages}) is invalid: {exc}"
    )


__all__ = [
    "MODES",
    "JobContext",
    "ModeReport",
    "TrainingMode",
    "check_job",
    "compile_job",
    "mode_of",
    "name_cycle",
]
