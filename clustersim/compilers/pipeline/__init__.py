"""The pipeline training mode: a uniform TP × PP × DP job (the default)."""

from __future__ import annotations

import pandas as pd

from ... import metrics
from ...program import Program
from ...resolve import Job
from ..base import MODES, JobContext, ModeReport, TrainingMode
from .check import check_pipeline
from .compile import compile_pipeline
from .context import CompileContext


def training_report(spans: pd.DataFrame, job: Job) -> ModeReport:
    """The window of a training run (:func:`clustersim.metrics.training_window`)."""
    window = metrics.training_window(
        spans, job.simulation.iterations, job.schedule.flush, job.num_microbatches, job.plan.pp
    )
    return ModeReport(spans, window, window[1] - window[0])


class PipelineMode(TrainingMode):
    """Every pipeline stage on tp × dp GPUs, one schedule for all (:mod:`clustersim.schedules`)."""

    name = "pipeline"
    description = "uniform TP × PP × DP training under a pipeline schedule"
    priority = 3

    def applies(self, job: Job) -> bool:
        return True

    def check(self, job: Job) -> None:
        check_pipeline(job)

    def compile(self, ctx: JobContext) -> Program:
        job = ctx.job
        return compile_pipeline(
            CompileContext(
                job.schedule,
                job.plan,
                job.chunk_costs,
                job.num_microbatches,
                job.simulation.iterations,
                fold=ctx.fold,
                compression=job.gradient_compression,
                activations=job.activation_compression,
                replicas=job.replicas,
                data_parallel=job.data_parallel,
                sharded=job.parallel.zero > 0
                or bool(job.parallel.data_parallel and job.parallel.data_parallel.distributed_optimizer),
                coarse=job.simulation.granularity == "stage",  # (compile_job coarsens it)
                reserve=job.runtime_reserve,
            )
        )

    def report(self, spans: pd.DataFrame, job: Job) -> ModeReport:
        return training_report(spans, job)


MODES.add(PipelineMode())

__all__ = ["PipelineMode", "training_report"]
