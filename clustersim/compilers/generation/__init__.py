"""The generation mode: one step of autoregressive generation (prefill chunks and decode
tokens of a batch, :mod:`clustersim.generation`) compiled into a forward-only Program.

A Job with a ``generation`` section is served by the scheduler of
:mod:`clustersim.generation`, above the engine: it picks each step's batch and hands this
compiler a Job whose chunk costs are that step's (:meth:`clustersim.generation.step_cost.StepModel.costs`).
The step runs as one request through the forward-only pipeline of the inference compiler
(:func:`clustersim.compilers.inference.compile.compile_inference`): the stages' forwards in
turn, TP collectives inside them, the boundary tensor sent between stages. Compiled from the
scenario's own Job (its chunk costs: one forward over ``model.seq_len`` tokens), it is the
Program of that single prefill.
"""

from __future__ import annotations

from ...errors import ScenarioError
from ...program import Program
from ...resolve import Job
from ...scenario.expert_rules import expert_field
from ..base import MODES, JobContext, TrainingMode
from ..inference.check import check_inference
from ..inference.compile import compile_inference


class GenerationMode(TrainingMode):
    """One generation step as a forward-only pipeline of one request (module doc)."""

    name = "generation"
    description = "one step of token generation: prefill chunks and decode tokens (generation section)"
    priority = 0  # before inference, which would claim the same Jobs
    memory_columns = False

    def applies(self, job: Job) -> bool:
        return job.resolved.get("generation") is not None

    def check(self, job: Job) -> None:
        check_inference(job, experts=True)
        par = job.parallel
        etp = par.etp or par.tp
        if expert_field(par) is not None and par.tp % (etp * par.ep):
            # each replica serves on its own tp GPUs (clustersim.generation.moe_step)
            raise ScenarioError(
                *expert_field(par),
                f"generation runs an expert group inside one replica's tp GPUs: etp × ep = {etp} × "
                f"{par.ep} must divide parallel.tp = {par.tp} (data-parallel attention is not modelled)",
            )
        # otherwise each of the dp replicas serves on tp × pp GPUs (clustersim.generation.replicas)
        if job.resolved["generation"]["disaggregated"] and job.plan.dp != 2:
            raise ScenarioError(
                "parallel.dp",
                job.plan.dp,
                "disaggregated generation runs a prefill pool and a decode pool of tp × pp GPUs each; accepted: 2",
            )

    def compile(self, ctx: JobContext) -> Program:
        return compile_inference(ctx.job.plan, ctx.job.chunk_costs, 1, [0.0])


MODES.add(GenerationMode())
