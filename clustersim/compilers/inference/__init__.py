"""The inference mode: ``training.mode: inference`` serves requests through forward passes."""

from __future__ import annotations

import pandas as pd

from ...program import Program
from ...resolve import Job
from ...trace.requests import request_metrics, split_requests
from ..base import MODES, JobContext, ModeReport, TrainingMode
from .check import check_inference
from .compile import arrival_times, compile_inference


class InferenceMode(TrainingMode):
    """Requests arrive on an arrival lane and flow forward through the pipeline
    (:mod:`clustersim.compilers.inference`). The reported "iteration" is serving every
    request: from t = 0 to the last one's end (docs/inference.md)."""

    name = "inference"
    description = "serve m × dp requests through forward passes (training.mode: inference)"
    priority = 1
    memory_columns = False

    def applies(self, job: Job) -> bool:
        return job.training.mode == "inference"

    def check(self, job: Job) -> None:
        check_inference(job)

    def compile(self, ctx: JobContext) -> Program:
        job = ctx.job
        m = job.num_microbatches
        times = arrival_times(job.training.arrival, m * job.plan.dp, job.simulation.seed)
        replicas = None if job.replicas is None else list(job.replicas)
        return compile_inference(job.plan, job.chunk_costs, m, times, replicas)

    def report(self, spans: pd.DataFrame, job: Job) -> ModeReport:
        requests, spans = split_requests(spans, job.layout)
        window = (0.0, float(requests["end_s"].max()))
        return ModeReport(spans, window, window[1], request_metrics(requests), requests=requests)


MODES.add(InferenceMode())
