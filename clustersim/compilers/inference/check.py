"""What the inference compiler cannot run beside ``training.mode: inference``: its
:meth:`~clustersim.compilers.base.TrainingMode.check`, on the resolved Job right after
resolve (:func:`clustersim.compilers.check_job`).

The training-only settings are refused at load (:mod:`clustersim.scenario.inference`);
here, the features the forward-only pipeline does not run: context parallelism, expert
parallelism (but in a generation step, whose MoE layers carry their dispatch,
:mod:`clustersim.generation.moe_step`), and the ``parallel.data_parallel`` rules of the
uniform pipeline it is laid out as.
"""

from __future__ import annotations

from ...errors import ScenarioError
from ...resolve import Job
from ...scenario.context_parallel_rules import cp_conflict
from ...scenario.expert_rules import expert_field
from ..pipeline.check import check_data_parallel


def check_inference(job: Job, experts: bool = False) -> None:
    """Raise ScenarioError (field, value, accepted) for what an inference job combines that
    its compiler cannot run; ``experts``: expert parallelism runs (the generation mode's)."""
    par = job.parallel
    if par.cp > 1:
        raise cp_conflict("training.mode", job.training.mode, par.cp)
    check_data_parallel(job)
    on = expert_field(par)
    if on is not None and not experts:
        raise ScenarioError(*on, "expert parallelism is modelled for training; accepted: 1")
