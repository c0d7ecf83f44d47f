"""The per-step work between the gradient reduction and the optimizer (``training.fixed_costs``).

Megatron-LM's step, after each stage's data-parallel reduction (``finalize_model_grads``,
then ``optimizer.step``), runs on every GPU, in this order:

* the **tied-embedding gradient all-reduce** (``_allreduce_word_embeddings_grads``): when
  the word embedding of the first chunk and the output layer of the last share their
  matrix and sit on different stages, the two copies' gradients (fp32 ``main_grad``,
  vocab · hidden / tp) are summed over the embedding group — the first and the last
  stage's GPU of the same data-parallel and tensor-parallel rank — on the ``comm`` lane;
* with fp16, the loss scale's **unscale and inf check** (``_unscale_main_grads_and_check_for_nan``:
  one pass over the local fp32 gradients on the compute lane, then an all-reduce (MAX)
  of the one-element ``found_inf`` flag);
* the **gradient-clipping norm** (``clip_grads.get_grad_norm_fp32``: one pass over the local
  gradients, then an all-reduce (SUM) of one fp32 scalar). The rescale that follows when
  the norm exceeds ``clip_grad`` is not charged (it runs only on steps that clip).

Both scalar all-reduces run over the optimizer's ``grad_stats_parallel_group``: the
model-parallel group (every stage and TP rank of one data-parallel replica) without the
distributed optimizer, the whole world with it (ZeRO ≥ 1 here) — Megatron-Core's
``MegatronOptimizer.get_grad_stats_parallel_group`` and ``DistributedOptimizer``'s
override. They make every GPU's step wait for the slowest stage's gradients, as in
Megatron. Flush-free schedules (PipeDream's asynchronous updates) have no global norm
and no such rendezvous: the compiler asks for none there.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...parallel.data_parallel import SCALAR_BYTES, grad_stats_group
from ...program import COLLECTIVE, COMPUTE
from ...workload.stage_cost import StageCost
from .context import CompileContext


def emit_step_work(
    ctx: CompileContext,
    costs: Sequence[StageCost],
    ends: tuple[int, int],
    s: int,
    r: int,
    t: int,
    *,
    it: int,
    label: str,
    deps: tuple[int, ...],
) -> tuple[int, ...]:
    """Emit (stage ``s``, replica ``r``, TP rank ``t``)'s per-step work (module doc) for
    ``costs`` (the stage's chunks) into ``ctx.prog`` after ``deps``; return what the
    optimizer waits for. ``ends``: the stages of the first and the last model chunk.
    Folded (``ctx.fold``), only replica 0, TP rank 0 is emitted (one GPU per stage arrives
    at the scalar all-reduces); the folded twins' collectives ride as shadows."""
    prog, plan, sharded, fold = ctx.prog, ctx.plan, ctx.sharded, ctx.fold
    dev = plan.device(s, r, t)
    labels = {"stage": s, "iteration": it}
    tied = sum(c.tied_grad_bytes for c in costs)
    if tied and ends[0] != ends[1] and s in ends:
        twins = plan.twin_pairs(*ends) if fold else ()
        deps = (
            prog.add(
                dev,
                "comm",
                COLLECTIVE,
                f"tied-embedding all-reduce s{s}{label}",
                nbytes=tied,
                deps=deps,
                group=(plan.device(ends[0], r, t), plan.device(ends[1], r, t)),
                collective="all_reduce",
                tag=f"tied-embedding it{it}{label} r{r} t{t}",
                shadows=twins,
                **labels,
            ).id,
        )
    group = grad_stats_group(plan, r, sharded)
    replicas = range(1, plan.replicas) if fold and not sharded else ()  # the folded replicas' own groups
    shadows = tuple(grad_stats_group(plan, rr, sharded) for rr in replicas)
    for what, seconds, reduce in (
        ("loss-scale check", sum(c.unscale for c in costs), "found-inf"),
        ("grad norm", sum(c.grad_norm for c in costs), "grad-norm"),
    ):
        if not seconds:
            continue
        op = prog.add(
            dev, "compute", COMPUTE, f"{what}{label}", phase="O", duration=seconds, deps=deps, **labels
        )
        deps = (op.id,)
        if len(group) > 1:
            op = prog.add(
                dev,
                "comm",
                COLLECTIVE,
                f"{reduce} all-reduce{label}",
                nbytes=SCALAR_BYTES,
                deps=deps,
                group=group,
                collective="all_reduce",
                tag=f"{reduce} it{it}{label}" + ("" if sharded else f" r{r}"),
                arrivals=plan.pp if fold else 0,
                shadows=shadows,
                **labels,
            )
            deps = (op.id,)
    return deps
