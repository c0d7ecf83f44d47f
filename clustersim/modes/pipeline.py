"""The pipeline training mode: a uniform TP × PP × DP job (the default)."""

from __future__ import annotations

import pandas as pd

from .. import metrics
from ..program import Program
from ..resolve import Job
from ..schedules import compile_pipeline
from .base import ModeReport, TrainingMode


def training_report(spans: pd.DataFrame, job: Job) -> ModeReport:
    """The window of a training run (:func:`clustersim.metrics.training_window`)."""
    window = metrics.training_window(spans, job.simulation.iterations, job.schedule.flush)
    return ModeReport(spans, window, window[1] - window[0])


class PipelineMode(TrainingMode):
    """Every pipeline stage on tp × dp GPUs, one schedule for all (:mod:`clustersim.schedules`)."""

    name = "pipeline"
    description = "uniform TP × PP × DP training under a pipeline schedule"

    def applies(self, job: Job) -> bool:
        return True

    def compile(self, job: Job, fold: bool) -> Program:
        return compile_pipeline(
            job.schedule,
            job.plan,
            job.chunk_costs,
            job.num_microbatches,
            job.simulation.iterations,
            fold=fold,
            compression=job.gradient_compression,
            activations=job.activation_compression,
            replicas=None if job.replicas is None else list(job.replicas),
        )

    def report(self, spans: pd.DataFrame, job: Job) -> ModeReport:
        return training_report(spans, job)
