"""The stage-replicated training mode: ``parallel.stage_replicas`` gives each stage its own GPUs."""

from __future__ import annotations

import pandas as pd

from ...program import Program
from ...resolve import Job
from ..base import MODES, JobContext, ModeReport, TrainingMode
from ..pipeline import training_report
from .check import check_replicated
from .compile import compile_replicated


class ReplicatedMode(TrainingMode):
    """PipeDream's "15-1" plans: stage s on its own r_s GPUs (:mod:`clustersim.compilers.replicated`)."""

    name = "stage_replicated"
    description = "a pipeline whose stages each have their own replication (parallel.stage_replicas)"
    priority = 2

    def applies(self, job: Job) -> bool:
        return job.parallel.stage_replicas is not None

    def check(self, job: Job) -> None:
        check_replicated(job)

    def compile(self, ctx: JobContext) -> Program:
        job = ctx.job
        reserve = [job.replica_reserve(r) for r in job.layout.replicas]  # the CUDA context and NCCL's
        return compile_replicated(
            job.schedule,
            job.layout,
            job.chunk_costs,
            job.num_microbatches,
            job.simulation.iterations,
            reserve,
        )

    def report(self, spans: pd.DataFrame, job: Job) -> ModeReport:
        rep = training_report(spans, job)
        rep.summary["stage_replicas"] = list(job.parallel.stage_replicas)
        return rep


MODES.add(ReplicatedMode())
