"""The parameter-server mode: ``parallel.parameter_server``, data-parallel workers and servers."""

from __future__ import annotations

import pandas as pd

from ...program import Program
from ...resolve import Job
from ...trace.ps_metrics import harmonic_period, ps_summary
from ..base import MODES, JobContext, ModeReport, TrainingMode
from ..pipeline import training_report
from .check import check_parameter_server
from .compile import parameter_server_program


class ParameterServerMode(TrainingMode):
    """Workers run at their own pace (:mod:`clustersim.compilers.parameter_server`): the
    iteration time is the harmonic mean of their periods, and each worker's period and
    staleness join ``res.devices`` (:mod:`clustersim.trace.ps_metrics`, docs/metrics.md)."""

    name = "parameter_server"
    description = "data-parallel workers pushing to and pulling from parameter servers"
    priority = 0
    weight_versions = False

    def applies(self, job: Job) -> bool:
        return job.parallel.parameter_server is not None

    def check(self, job: Job) -> None:
        check_parameter_server(job)

    def compile(self, ctx: JobContext) -> Program:
        return parameter_server_program(ctx.job)

    def report(self, spans: pd.DataFrame, job: Job) -> ModeReport:
        rep = training_report(spans, job)  # the window the per-GPU breakdown reads
        entries, workers = ps_summary(spans)
        rep.iteration_time_s = harmonic_period(workers["period_s"])
        rep.summary = {"ps_mode": job.parallel.parameter_server.mode, **entries}
        rep.devices = workers
        return rep


MODES.add(ParameterServerMode())
