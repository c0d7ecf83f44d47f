"""Training modes: one compiler per way of running a job, and what each run reports.

:data:`MODES` lists them in the order they are asked whether they run a Job — the
parameter server, inference, stage-replicated pipelines, then the uniform pipeline, which
takes every Job the others do not. :func:`mode_of` picks one; :func:`compile_job` compiles
a Job with it. To add a mode, write a :class:`TrainingMode` subclass in a module of its
own and insert an instance here before the first mode that would also claim its Jobs
(docs/architecture.md).
"""

from __future__ import annotations

from ..coarsen import coarsen
from ..program import Program
from ..resolve import Job
from .base import ModeReport, TrainingMode
from .inference import InferenceMode
from .parameter_server import ParameterServerMode
from .pipeline import PipelineMode
from .replicated import ReplicatedMode

#: the registered modes, in the order :func:`mode_of` asks them
MODES: tuple[TrainingMode, ...] = (ParameterServerMode(), InferenceMode(), ReplicatedMode(), PipelineMode())


def mode_of(job: Job) -> TrainingMode:
    """The first registered mode that runs ``job``."""
    return next(mode for mode in MODES if mode.applies(job))


def compile_job(job: Job, fold: bool | None = None) -> Program:
    """The checked Program of ``job`` — coarsened when ``simulation.granularity`` is
    ``stage``. ``fold``: None applies the Job's fold decision; True folds whenever folding
    is exact (tools that need one GPU per stage, e.g. the memory estimate)."""
    fold = job.fold.enabled if fold is None else fold and job.foldable
    prog = mode_of(job).compile(job, fold)
    prog.check()
    return coarsen(prog) if job.simulation.granularity == "stage" else prog


__all__ = ["MODES", "ModeReport", "TrainingMode", "compile_job", "mode_of"]
