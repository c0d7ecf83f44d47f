"""The trace mode: a Job whose model is execution traces (``model.kind: trace``).

The Program is the one the traces hold (:mod:`clustersim.interop.chakra_import`, read once
by ``Job.trace``); nothing is compiled from ``parallel`` or the cost model. The reported
window is the last iteration the ops name (an imported foreign trace has iteration 0
throughout: the whole run), as for every mode (:func:`clustersim.metrics.iteration_window`).
"""

from __future__ import annotations

import pandas as pd

from ...program import Program
from ...resolve import Job
from ..base import MODES, JobContext, ModeReport, TrainingMode


class TraceMode(TrainingMode):
    name = "trace"
    description = "replay Chakra execution traces (model.kind: trace), one file per rank"
    priority = -10  # before every mode that compiles from parallel and the model
    memory_columns = False  # memory comes from the trace's own moves, not a model
    checked = True  # the trace's Program, checked in full as read (the import's, a replay's)

    def applies(self, job: Job) -> bool:
        return job.trace is not None

    def compile(self, ctx: JobContext) -> Program:
        return ctx.job.trace

    def report(self, spans: pd.DataFrame, job: Job) -> ModeReport:
        out = super().report(spans, job)
        # no schedule compiled it; the nodes priced each way (interop.chakra_pricing)
        out.summary = {"schedule": "trace", "trace": job.model.chakra, **job.trace_read[1]}
        return out


MODES.add(TraceMode())
