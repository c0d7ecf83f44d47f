"""The training-mode interface: how a Job becomes a Program, and what its run reports.

A mode (pipeline, stage-replicated, parameter server, inference, …) is one class in one
module of this package, registered in :data:`MODES`. It decides whether
it runs a Job (:meth:`TrainingMode.applies`), compiles the Job into a Program, and
contributes its own part of the Result — its metric window, its summary fields and its
per-device columns — the way desmod components each contribute their results. The
metrics themselves are defined in :mod:`clustersim.metrics` (and siblings) and in
``docs/metrics.md``; a mode only picks which rule applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from .. import metrics
from ..plugins import Registry
from ..program import Program
from ..resolve import Job
from ..workload.memory_model import memory_columns


@dataclass
class ModeReport:
    """What a mode contributes to a run's Result.

    ``spans``: the GPU spans the generic metrics read (inference splits its arrival lane
    off into ``requests``); ``window``: the reported iteration; ``iteration_time_s``;
    ``summary``: the mode's own summary fields; ``devices``: extra per-device columns,
    indexed by device name (None: none)."""

    spans: pd.DataFrame
    window: tuple[float, float]
    iteration_time_s: float
    summary: dict = field(default_factory=dict)
    devices: pd.DataFrame | None = None
    requests: pd.DataFrame | None = None


@dataclass(frozen=True)
class JobContext:
    """What a mode compiles a Program from: the checked ``job`` (:func:`clustersim.compilers.check_job`)
    and ``fold``, whether to emit one representative GPU per stage — a decision already
    checked exact (:meth:`of` makes it). A mode reads everything else off the Job."""

    job: Job
    fold: bool = False

    @classmethod
    def of(cls, job: Job, fold: bool | None = None) -> JobContext:
        """The context of ``job``; ``fold``: None applies the Job's fold decision
        (``simulation.fold``), True folds whenever folding is exact."""
        return cls(job, job.fold.enabled if fold is None else fold and job.foldable)


class TrainingMode:
    """One way of running a job. Subclasses set ``name`` and ``description`` and
    implement :meth:`applies` and :meth:`compile`; :meth:`report` defaults to the
    last iteration's window (:func:`clustersim.metrics.iteration_window`)."""

    name: str = ""
    description: str = ""
    #: where :func:`clustersim.compilers.mode_of` asks it (ascending): a mode that claims
    #: only some Jobs goes before one that takes every Job the others leave
    priority: int = 0
    #: whether ``res.devices`` gets the memory-by-kind columns of a real model
    memory_columns: bool = True
    #: whether the summary reports ``weight_staleness_max`` (weight versions of a pipeline;
    #: a parameter server reports its own staleness, in server updates)
    weight_versions: bool = True
    #: whether :meth:`compile` returns a Program already checked in full (cycles included),
    #: which :func:`clustersim.compilers.compile_job` then does not check again
    checked: bool = False

    def applies(self, job: Job) -> bool:
        """Whether this mode runs ``job`` (modes are asked in registry order)."""
        raise NotImplementedError

    def check(self, job: Job) -> None:
        """Raise ScenarioError (naming the field, the value and what is accepted) for what
        this mode cannot run in ``job``: its cross-feature refusals, run right after resolve
        (:func:`clustersim.compilers.check_job`), before anything is compiled or run."""

    def compile(self, ctx: JobContext) -> Program:
        """The (unchecked, fine-grained) Program of ``ctx.job`` (folded when ``ctx.fold``)."""
        raise NotImplementedError

    def memory_table(self, job: Job, devices: pd.DataFrame, prog: Program) -> tuple[dict, str]:
        """The memory-by-kind columns of ``res.devices`` and the OOM hint ("" if all fit)
        (:func:`clustersim.workload.memory_model.memory_columns`) — for a real model in a
        mode that reports them (:attr:`memory_columns`), else none."""
        if job.model.kind == "synthetic" or not self.memory_columns:
            return {}, ""
        return memory_columns(job, devices, prog)

    def report(self, spans: pd.DataFrame, job: Job) -> ModeReport:
        """This mode's window, iteration time and fields, from the run's spans."""
        window = metrics.iteration_window(spans)
        return ModeReport(spans, window, window[1] - window[0])


#: the registered training modes, kept in :attr:`TrainingMode.priority` order (the order
#: :func:`clustersim.compilers.mode_of` asks them); each mode's module adds its own
MODES: Registry[TrainingMode] = Registry("training mode", "training", order=lambda m: m.priority)
