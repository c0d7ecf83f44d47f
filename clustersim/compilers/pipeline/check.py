"""What the uniform pipeline compiler cannot run: its :meth:`~clustersim.compilers.base.TrainingMode.check`.

Cross-feature refusals on the resolved Job, run right after resolve
(:func:`clustersim.compilers.check_job`): a flush-free schedule's reported period, the
``parallel.data_parallel`` options with the rest of the plan, and gradient compression on
chosen links, whose hierarchical all-reduce needs each data-parallel group spread evenly
over sites or servers. The stage-replicated and parameter-server compilers refuse
``data_parallel`` outright (:func:`data_parallel_conflict`).
"""

from __future__ import annotations

from collections import Counter

from ... import metrics
from ...errors import ScenarioError
from ...resolve import Job


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


def data_parallel_conflict(field: str) -> ScenarioError:
    """The refusal of ``parallel.<field>`` together with ``parallel.data_parallel``."""
    return ScenarioError(f"parallel.{field}", "set", "not with parallel.data_parallel; accepted: unset")


def check_data_parallel(job: Job) -> None:
    """Refuse ``parallel.data_parallel`` settings that cannot run (field, value, accepted);
    the gradient group spans dp × cp replicas."""
    par, opts = job.parallel, job.parallel.data_parallel
    if opts is None:
        return
    if par.gradient_compression is not None:
        raise data_parallel_conflict("gradient_compression")
    if job.schedule.directions > 1:
        raise ScenarioError(
            "parallel.data_parallel",
            "set",
            f"runs one-directional schedules; {par.schedule!r} sends micro-batches both ways "
            "and synchronises gradients without it; remove it",
        )
    if par.dp_split != "even":
        raise ScenarioError(
            "parallel.dp_split", par.dp_split, "replicas of parallel.data_parallel run alike; accepted: even"
        )
    if opts.deepspeed_zero3 is not None and par.zero == 3:
        _check_deepspeed_zero3(job)
    if par.zero == 3 and job.model.kind == "cnn":  # a CNN chunk's passes have no per-layer split
        raise ScenarioError(
            "parallel.zero",
            3,
            "FSDP units need per-layer passes (a transformer or synthetic model); accepted: 0-2",
        )
    g, dp = opts.shard_group_size, job.plan.replicas
    if g is not None and (par.zero != 3 or dp % g):
        raise ScenarioError(
            "parallel.data_parallel.shard_group_size",
            g,
            f"HSDP needs parallel.zero: 3 and a divisor of dp = {dp}",
        )


def _check_deepspeed_zero3(job: Job) -> None:
    """DeepSpeed ZeRO-3 runs one model on each GPU, each micro-batch's forward then its
    backward (its engine's loop; its PipelineEngine refuses ZeRO-3)."""
    par = job.parallel
    accepted = (
        "DeepSpeed ZeRO-3 runs without pipeline parallelism, each micro-batch's forward then its backward"
    )
    if job.plan.pp > 1:
        raise ScenarioError("parallel.pp", job.plan.pp, f"{accepted}; accepted: 1")
    if par.virtual_stages > 1:
        raise ScenarioError("parallel.virtual_stages", par.virtual_stages, f"{accepted}; accepted: 1")
    if par.schedule != "1f1b":
        raise ScenarioError("parallel.schedule", par.schedule, f"{accepted}; accepted: 1f1b")


def check_even_domains(job: Job) -> None:
    """Raise ScenarioError unless every data-parallel group holds as many GPUs in each site
    (``inter_site``) or server (``inter_node``) where gradients are compressed on those
    links: the hierarchical compressed all-reduce
    (:mod:`clustersim.compilers.pipeline.gradient_sync`) needs it."""
    gc, plan = job.gradient_compression, job.plan
    if gc is None or gc.domains is None:
        return
    where = "site" if gc.links == "inter_site" else "server"
    for s in range(plan.pp):
        for t in range(plan.tp):
            counts = Counter(gc.domains[d] for d in plan.dp_group(s, t))
            if len(counts) > 1 and len(set(counts.values())) > 1:
                raise ScenarioError(
                    "parallel.gradient_compression.links",
                    gc.links,
                    f"stage {s}'s data-parallel group holds {dict(counts)} GPUs per {where}; the hierarchical "
                    f"compressed all-reduce needs the same number in each {where}; accepted: all, or a "
                    f"plan/cluster that does",
                )


def check_pipeline(job: Job) -> None:
    """The uniform pipeline compiler's refusals, in the order a user meets them."""
    check_data_parallel(job)
    check_even_domains(job)
    check_iterations(job)
