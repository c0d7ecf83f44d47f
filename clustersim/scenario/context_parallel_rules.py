"""Rules of context parallelism (``parallel.cp`` > 1; docs/context_parallel.md).

Megatron-Core runs context parallelism inside Transformer Engine's fused attention
(``TEDotProductAttention`` → ``attn_forward_func_with_cp``), so a CP job needs
``model.attention: flash`` and a model whose sequence and heads split as TE splits them:

* ``p2p`` (ring attention, ``AttnFuncWithCPAndKVP2P``): with a causal mask the sequence is
  cut into 2·cp chunks, rank r holding chunks r and 2cp−1−r, so ``seq_len`` must divide
  by 2·cp (by cp without a causal mask);
* ``a2a`` (Ulysses, ``AttnFuncWithCPAndQKVOA2A``): the all-to-all scatters heads, so the
  query heads and the key/value heads on each TP rank must divide by cp ("The number of
  attention heads needs to be divisible by CP size!"), and the sequence as for ``p2p``.

CP runs with the uniform pipeline compiler only: the other modes (stage replicas,
parameter servers, inference) refuse it in their compiler's check, and here features that
lay devices out otherwise (mixed GPU types, uneven ``dp_split``, faults) or merge a pass's
collectives (``granularity: stage``, and TP overlap's GEMM–collective pipelines, not
modelled together with CP) are refused.
"""

from __future__ import annotations

from ..errors import ScenarioError
from ..workload.resolve import resolve_transformer


def cp_conflict(field: str, value: object, cp: int) -> ScenarioError:
    """The refusal of ``field`` (at ``value``) together with ``parallel.cp`` = ``cp`` > 1 —
    here, and by the compilers of the other training modes (stage replicas, parameter
    servers, inference: :mod:`clustersim.compilers`), which refuse CP in their check."""
    return ScenarioError(field, value, f"not with parallel.cp > 1 (cp = {cp}); remove one of them")


def check_context_parallel(spec) -> None:
    """Raise ScenarioError if ``parallel.cp`` cannot run with the rest of the scenario."""
    par = spec.parallel
    cp = par.cp
    if cp == 1:
        return
    for field, value, on in (
        ("cluster.node_groups", "set", spec.cluster.node_groups is not None),
        ("parallel.dp_split", par.dp_split, par.dp_split != "even"),
        ("faults", "set", bool(spec.faults)),
        ("simulation.granularity", spec.simulation.granularity, spec.simulation.granularity == "stage"),
        ("parallel.tp_comm_overlap", True, par.tp_comm_overlap),
    ):
        if on:
            raise cp_conflict(field, value, cp)
    if spec.model.kind != "transformer":
        raise ScenarioError(
            "parallel.cp",
            cp,
            f"context parallelism splits a transformer's sequence; model.kind is "
            f"{spec.model.kind}; accepted: 1",
        )
    cfg = resolve_transformer(spec.model)
    if cfg.attention != "flash":
        raise ScenarioError(
            "model.attention",
            cfg.attention,
            "context parallelism runs in fused attention (Transformer Engine); accepted: flash",
        )
    if cfg.mla:
        raise ScenarioError(
            "parallel.cp", cp, "multi-head latent attention with CP is not modelled; accepted: 1"
        )
    chunks = 2 * cp if cfg.causal else cp
    if cfg.seq_len % chunks:
        raise ScenarioError(
            "model.seq_len",
            cfg.seq_len,
            f"must divide into {'2 × cp' if cfg.causal else 'cp'} = {chunks} sequence chunks "
            f"(causal load balancing); accepted: a multiple of {chunks}",
        )
    if par.cp_comm_type == "a2a":
        kv = max(1, cfg.n_kv // par.tp)
        ulysses = "Ulysses (cp_comm_type a2a) scatters heads over the CP group"
        if cfg.heads % (par.tp * cp):
            why = f"model.heads = {cfg.heads} must divide by tp × cp = {par.tp * cp}"
        elif kv % cp:
            why = f"the {kv} key/value heads per TP rank (model.kv_heads = {cfg.n_kv} / tp) must divide by cp"
        else:
            return
        raise ScenarioError(
            "parallel.cp", cp, f"{ulysses}: {why}; accepted: a divisor of both, or cp_comm_type p2p"
        )
