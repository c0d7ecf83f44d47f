"""What the stage-replicated compiler cannot run: ``parallel.stage_replicas`` with other features.

Its :meth:`~clustersim.compilers.base.TrainingMode.check`, run on the resolved Job right
after resolve (:func:`clustersim.compilers.check_job`). PipeDream's per-stage replication
runs plain replicas on one GPU type, without compression, ``parallel.data_parallel`` or
context parallelism (and so without expert parallelism, see below).

What shapes the job is checked at load (:func:`clustersim.scenario.rules.check_stage_replicas`):
the list (one entry per stage, summing to the job's GPUs), from which the replica layout is
built, and one model chunk per stage without tensor parallelism, which the partition and
the schedule's own rules read.
"""

from __future__ import annotations

from ...errors import ScenarioError
from ...hardware.node_groups import gpu_types
from ...resolve import Job
from ...scenario.context_parallel_rules import cp_conflict
from ..pipeline.check import check_iterations, data_parallel_conflict


def check_replicated(job: Job) -> None:
    """Raise ScenarioError for what a stage-replicated job combines that its compiler
    cannot run (field, value, accepted)."""
    par = job.parallel
    if len(gpu_types(job.cluster)) > 1:
        raise ScenarioError(
            "parallel.stage_replicas",
            par.stage_replicas,
            "stage replication runs one GPU type; "
            "with mixed node_groups GPUs use pp × dp with partition balanced and dp_split",
        )
    for field in ("gradient_compression", "activation_compression"):
        if getattr(par, field) is not None:
            raise ScenarioError(
                f"parallel.{field}",
                getattr(par, field).model_dump(),
                "not supported with parallel.stage_replicas yet; remove one of them",
            )
    if par.dp not in ("auto", 1):
        raise ScenarioError(
            "parallel.dp", par.dp, "stage_replicas sets each stage's replication; accepted: auto or 1"
        )
    if par.zero:
        raise ScenarioError("parallel.zero", par.zero, "stage_replicas runs plain replicas; accepted: 0")
    if par.partition == "pipedream":
        raise ScenarioError(
            "parallel.partition",
            "pipedream",
            "with stage_replicas, accepted: even, balanced or a "
            "list (`clustersim plan` prints the planner's partition and replication)",
        )
    # (expert parallelism needs each stage's tp × cp × dp GPUs to divide by etp × ep, at
    # load: with stage replicas tp = dp = 1, so only a cp > 1 allows it, refused here)
    if par.cp > 1:
        raise cp_conflict("parallel.stage_replicas", par.stage_replicas, par.cp)
    if par.data_parallel is not None:
        raise data_parallel_conflict("stage_replicas")
    check_iterations(job)
