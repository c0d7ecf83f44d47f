"""Rules of expert parallelism (``parallel.ep``, ``etp``, ``moe_token_dispatcher``,
``moe_shared_expert_overlap``), checked when a scenario loads.

Megatron-Core's constraints (``megatron/core/parallel_state.py``,
``initialize_model_parallel``; ``megatron/training/arguments.py``): the expert groups
regroup one pipeline stage's ``tp × cp × dp`` GPUs (context parallelism folds into the
expert-data-parallel side: the expert ``RankGenerator`` has ``cp = 1``), so that must divide
by ``etp × ep`` (the world size by ``etp × ep × pp``); ``num_experts`` must divide by
``ep``; with EP and TP together sequence parallelism is required (MoE README: "When using
MoE with expert parallelism and tensor parallelism, sequence parallelism must be
enabled"); the shared expert overlap needs the ``alltoall`` dispatcher. A bidirectional
schedule (DualPipe) runs with expert parallelism: the compiler sums the mirrored stages'
expert gradients (:mod:`clustersim.compilers.pipeline.compile`). Stage replicas, parameter
servers and inference run without expert parallelism: their compilers refuse it in their
check (``clustersim/compilers/*/check.py``), with :func:`expert_field` naming the field.
"""

from __future__ import annotations

from ..errors import ScenarioError
from ..workload.resolve import resolve_transformer


def expert_field(par) -> tuple[str, object] | None:
    """The field (and its value) that turns expert parallelism on in section ``par`` —
    ``parallel.ep`` > 1, else an ``etp`` other than tp — or None when it is off."""
    if par.ep > 1:
        return "parallel.ep", par.ep
    if (par.etp or par.tp) != par.tp:
        return "parallel.etp", par.etp
    return None


def check_expert_parallel(spec, dp: int) -> None:
    """Raise ScenarioError naming the field when the expert-parallel settings cannot run
    (the training modes that run without EP refuse it in their compiler's check)."""
    par = spec.parallel
    etp = par.etp or par.tp
    on = expert_field(par)
    if on is None:
        if par.moe_shared_expert_overlap:
            raise ScenarioError(
                "parallel.moe_shared_expert_overlap",
                True,
                "overlaps the shared expert with the expert-parallel all-to-alls: needs parallel.ep > 1",
            )
        return
    field, value = on
    experts = resolve_transformer(spec.model).experts if spec.model.kind == "transformer" else 1
    if experts <= 1:
        raise ScenarioError(
            field, value, "splits MoE experts: needs a transformer model with model.experts > 1"
        )
    if experts % par.ep:
        raise ScenarioError(
            "parallel.ep", par.ep, f"must divide the {experts} routed experts (model.experts) evenly"
        )
    stage = par.tp * par.cp * dp
    if stage % (etp * par.ep):
        cp = "cp × " if par.cp > 1 else ""
        raise ScenarioError(
            field,
            value,
            f"the expert groups regroup each stage's tp × {cp}dp = {stage} GPUs: etp × ep = "
            f"{etp} × {par.ep} must divide {stage}",
        )
    ffn = resolve_transformer(spec.model).expert_ffn
    if ffn % etp:
        raise ScenarioError(
            "parallel.etp", etp, f"must divide the experts' FFN size {ffn} (model.moe_ffn_hidden)"
        )
    if par.tp > 1 and not par.sequence_parallel:
        raise ScenarioError(
            "parallel.sequence_parallel",
            False,
            "expert parallelism with tp > 1 needs sequence parallelism (as Megatron-Core); set it true",
        )
    if par.moe_shared_expert_overlap and par.moe_token_dispatcher != "alltoall":
        raise ScenarioError(
            "parallel.moe_shared_expert_overlap", True, "needs parallel.moe_token_dispatcher: alltoall"
        )
    if par.moe_token_dispatcher == "flex" and etp > 1:
        raise ScenarioError(
            "parallel.etp",
            etp,
            "DeepEP's flex dispatcher is modelled without expert-tensor parallelism; accepted: 1",
        )
    if par.data_parallel is not None and par.zero == 3:
        raise ScenarioError(
            "parallel.zero", 3, "FSDP units with expert parallelism are not modelled; accepted: 0, 1, 2"
        )
    if par.dp_split != "even":
        raise ScenarioError(
            "parallel.dp_split", par.dp_split, "expert-parallel groups span replicas: accepted: even"
        )
