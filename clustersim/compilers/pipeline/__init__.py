"""The pipeline training mode: a uniform TP × PP × DP job (the default)."""

from __future__ import annotations

import pandas as pd

from ... import metrics
from ...errors import ScenarioError
from ...program import Program
from ...resolve import Job
from ..base import MODES, ModeReport, TrainingMode
from .compile import compile_pipeline
from .context import CompileContext


def check_iterations(job: Job) -> None:
    """Refuse a flush-free run whose every reported period would fall in the final drain
    (:func:`clustersim.metrics.flush_free_iteration`)."""
    n, m, p = job.simulation.iterations, job.num_microbatches, job.plan.pp
    if not job.schedule.flush and metrics.flush_free_iteration(n, m, p) is None:
        raise ScenarioError(
            "simulation.iterations",
            n,
            f"schedule {job.schedule.name!r} with m = {m} micro-batches on {p} stages: every period "
            f"between two iteration ends of a {n}-iteration run falls in the final drain (its last "
            f"{p - 1} micro-batches), so no steady period can be reported; accepted: 1 (one whole "
            f"iteration) or "
            f"≥ {metrics.min_flush_free_iterations(m, p)}",
        )


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
        check_iterations(job)

    def compile(self, job: Job, fold: bool) -> Program:
        ctx = CompileContext(
            job.schedule,
            job.plan,
            job.chunk_costs,
            job.num_microbatches,
            job.simulation.iterations,
            fold=fold,
            compression=job.gradient_compression,
            activations=job.activation_compression,
            replicas=job.replicas,
            data_parallel=job.data_parallel,
            sharded=job.parallel.zero > 0
            or bool(job.parallel.data_parallel and job.parallel.data_parallel.distributed_optimizer),
            coarse=job.simulation.granularity == "stage",  # (compile_job coarsens it)
        )
        return compile_pipeline(ctx)

    def report(self, spans: pd.DataFrame, job: Job) -> ModeReport:
        return training_report(spans, job)


MODES.add(PipelineMode())
