"""The space of parallel plans for N GPUs: every valid (tp, pp, dp, micro-batch, schedule, …).

A plan is a dict of scenario overrides. Rules (Megatron-LM's, and the project's Plan):

* ``tp × cp × pp × dp = N``; TP groups sit inside a node (Megatron order: TP fastest, then
  CP, DP, then PP), so ``tp`` divides ``gpus_per_node`` — a TP group never spans nodes;
* ``cp`` (context parallelism) takes the values the loader's context-parallel rules
  (:mod:`clustersim.scenario.context_parallel_rules`) accept for the model, probed once on
  the base scenario; ``ep`` (expert parallelism) the divisors of a MoE model's routed
  experts — each plan is then loaded, so the expert rules
  (:mod:`clustersim.scenario.expert_rules`: the expert groups inside a stage's
  tp × cp × dp GPUs, sequence parallelism with TP) refuse what
  cannot run and the plan is listed ``invalid`` with the loader's message;
* schedules: those registered with a ``search_rank`` and this wave's :data:`MODERN_SCHEDULES`
  (pp > 1 only: at pp = 1 they are 1F1B); a schedule taking any number of chunks per stage
  (interleaved) tries :data:`VIRTUAL_STAGES`; the schedules that split the backward are left
  out for a synthetic model without ``backward_weight`` (nothing to split);
* ``tp`` divides the attention heads (and key/value heads) of a transformer; a synthetic
  model has per-GPU layer costs and no heads, so it gets ``tp = 1`` only;
* the model chunks (``pp × virtual_stages``, halved for a bidirectional schedule) divide the
  layers, or — a transformer split ``even`` under a looping one-directional schedule — Megatron-Core's
  uneven split fits them (``parallel.partition``: the embedding and loss counted as layers, or
  first/last stage layer counts); ``micro_batch × dp`` divides the global batch;
* micro-batch sizes vary only for models whose costs scale with them (not synthetic:
  its costs are per micro-batch as given), and other knobs (recompute, ZeRO, sequence
  parallelism) only where the scenario schema has them — so the space grows as the
  workload package grows, without changes here;
* on a heterogeneous cluster (``cluster.node_groups``) every plan balances its stages on
  their GPUs and splits micro-batches by replica speed (:func:`hetero_knobs`); the GPU
  count is the cluster's own.

:func:`placement` describes where a plan's groups land on nodes (what the network sees).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ScenarioError
from ..hardware.node_groups import heterogeneity
from ..parallel.plan import Plan
from ..scenario import Scenario
from ..scenario.context_parallel_rules import check_context_parallel
from ..schedules import SCHEDULES
from ..schedules.orders import stage_order
from ..workload.megatron_split import megatron_placement, uneven_split
from ..workload.resolve import resolve_transformer
from ..workload.rules import model_layers, tp_obstacle

#: knobs searched when the schema has the field and the model is not synthetic:
#: dotted key → candidate values (None: the field's Literal values)
#: memory/time knobs a real model's plans vary over (synthetic models have none)
KNOBS: dict[str, tuple[Any, ...]] = {
    "training.recompute": ("none", "selective", "full"),
    "parallel.zero": (0, 1, 2, 3),
    "parallel.sequence_parallel": (False, True),
}
#: knobs added to the space with the estimate (session 6): a ``classic`` space leaves them,
#: cp, ep and :data:`MODERN_SCHEDULES` out — the space of the search before the estimate
MODERN_KNOBS: dict[str, tuple[Any, ...]] = {"parallel.tp_comm_overlap": (False, True)}
#: overlap knobs of ``parallel.data_parallel``, searched when the base scenario sets that section
DATA_PARALLEL_KNOBS: dict[str, tuple[Any, ...]] = {
    "parallel.data_parallel.overlap_grad_reduce": (False, True),
    "parallel.data_parallel.overlap_param_gather": (False, True),
}
DEFAULT_MICRO_BATCHES = (1, 2, 4, 8)
#: the schedules of the ZB / DeepSeek wave a search tries by default, after those registered
#: with a ``search_rank`` (kept out of the registry's ranks so older searches keep their space
#: when asked with ``schedules=``)
MODERN_SCHEDULES = ("interleaved", "zb_h1", "zb_h2", "zb_v", "dualpipe", "dualpipe_v")
#: model chunks per stage tried for a schedule that takes any number (interleaved)
VIRTUAL_STAGES = (2, 4)
#: context-parallel sizes probed (powers of two, as Transformer Engine's load balancing wants)
CP_SIZES = (2, 4, 8, 16)
#: below this sequence length a search leaves cp out unless the scenario uses it (CP is
#: Megatron-Core's long-context tool; ``vary={"parallel.cp": [...]}`` searches it anyway)
CP_MIN_SEQ_LEN = 8192


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def cluster_overrides(sc: Scenario, gpus: int) -> dict[str, Any]:
    """Overrides that resize the scenario's cluster to ``gpus`` GPUs (whole nodes)."""
    gpn, nodes = sc.cluster.gpus_per_node, sc.cluster.nodes
    if not isinstance(gpus, int) or gpus < 1:
        raise ScenarioError("gpus", gpus, "expected a whole number of GPUs ≥ 1")
    if sc.cluster.node_groups is not None and gpus != sc.num_gpus:
        raise ScenarioError(
            "gpus",
            gpus,
            f"a cluster of node_groups is searched at its own size; accepted: "
            f"{sc.num_gpus} (or edit cluster.node_groups)",
        )
    if gpus % gpn == 0:
        return {} if gpus // gpn == nodes else {"cluster.nodes": gpus // gpn}
    if gpus < gpn and nodes == 1:
        return {"cluster.gpus_per_node": gpus}
    raise ScenarioError("gpus", gpus, f"expected a multiple of cluster.gpus_per_node = {gpn} (whole nodes)")


def plan_space(sc: Scenario, gpus: int, **knobs: Any) -> list[dict[str, Any]]:
    """Every plan for ``gpus`` GPUs as override dicts (cluster resize included) that the
    loader accepts: the :func:`plan_candidates` (same keywords) whose scenario loads (its
    rules — expert groups, context-parallel chunks, each schedule's own check — refuse the
    others)."""
    out = []
    for plan in plan_candidates(sc, gpus, **knobs):
        try:
            sc.with_overrides(plan)
        except ScenarioError:
            continue
        out.append(plan)
    return out


def plan_candidates(
    sc: Scenario,
    gpus: int,
    *,
    micro_batches: Sequence[int] | None = None,
    schedules: Sequence[str] | None = None,
    vary: Mapping[str, Sequence[Any]] | None = None,
    classic: bool = False,
) -> list[dict[str, Any]]:
    """The plans for ``gpus`` GPUs by the divisibility rules of the module docstring, as
    override dicts (cluster resize included) — before the loader's own rules. ``classic``:
    the space of the search before the estimate (:data:`MODERN_KNOBS`)."""
    cluster = cluster_overrides(sc, gpus)
    gpn = cluster.get("cluster.gpus_per_node", sc.cluster.gpus_per_node)
    synthetic = sc.model.kind == "synthetic"
    layers = model_layers(sc.model)
    experts = 1
    if sc.model.kind == "transformer":  # the same rule the scenario check applies
        cfg = resolve_transformer(sc.model)
        tps = [t for t in divisors(gpn) if gpus % t == 0 and tp_obstacle(cfg, t) is None]
        experts = cfg.experts
    else:
        tps = [1]
    mbs = list(micro_batches or ([sc.training.micro_batch] if synthetic else DEFAULT_MICRO_BATCHES))
    scheds = list(schedules or default_schedules(sc, classic))
    unknown = [s for s in scheds if s not in SCHEDULES]
    if unknown:
        raise ScenarioError(
            "schedules", unknown[0], f"not a known schedule; known: {', '.join(sorted(SCHEDULES))}"
        )
    knobs = {} if synthetic else {**KNOBS, **({} if classic else MODERN_KNOBS)}
    if not synthetic and not classic and sc.parallel.data_parallel is not None:
        knobs.update(DATA_PARALLEL_KNOBS)
    extra = {k: list(vals) for k, vals in knobs.items()}
    axes = (
        {} if classic else {"parallel.cp": context_parallel_sizes(sc, gpus), "parallel.ep": divisors(experts)}
    )
    axes = {k: vals for k, vals in axes.items() if vals != [1]}  # absent: the scenario's own (1)
    extra.update(axes)
    extra.update({k: list(vals) for k, vals in (vary or {}).items()})
    cps = extra.pop("parallel.cp", [sc.parallel.cp])
    gb = sc.training.global_batch
    plans = []
    for tp, cp in itertools.product(tps, cps):
        if gpus % (tp * cp):
            continue
        for pp in divisors(gpus // (tp * cp)):
            dp = gpus // (tp * cp * pp)
            for mb, sched in itertools.product(mbs, scheds):
                if gb % (mb * dp):
                    continue
                for v, split in _chunks_per_stage(sc, sched, pp, layers, bool(schedules)):
                    core = {
                        **cluster,
                        "parallel.tp": tp,
                        "parallel.pp": pp,
                        "parallel.dp": dp,
                        **({"parallel.cp": cp} if "parallel.cp" in axes or cp != sc.parallel.cp else {}),
                        "training.micro_batch": mb,
                        "parallel.schedule": sched,
                        **({"parallel.virtual_stages": v} if v is not None else {}),
                        **split,
                        **hetero_knobs(sc, pp, dp, sched),
                    }
                    for combo in itertools.product(*extra.values()):
                        plan = {**core, **dict(zip(extra, combo))}
                        if not _redundant(plan, dp, tp):
                            plans.append(plan)
    return plans


def default_schedules(sc: Scenario, classic: bool = False) -> list[str]:
    """The schedules a search tries unless told: the registry's ``search_rank`` ones, then
    (unless ``classic``) :data:`MODERN_SCHEDULES`; for a synthetic model without a W part,
    none that splits the backward (it would run as 1F1B)."""
    ranked = sorted((s for s in SCHEDULES.values() if s.search_rank is not None), key=lambda s: s.search_rank)
    names = [s.name for s in ranked] + [n for n in MODERN_SCHEDULES if n in SCHEDULES and not classic]
    names = list(dict.fromkeys(names))
    if sc.model.kind == "synthetic" and sc.model.backward_weight == 0:
        names = [n for n in names if not splits_backward(SCHEDULES[n])]
    return names


def splits_backward(schedule) -> bool:
    """Whether ``schedule``'s order splits a backward into B and W (the zero-bubble family),
    read off its order for 2 stages and 4 micro-batches (a shape every schedule accepts)."""
    v = schedule.chunks or VIRTUAL_STAGES[0]
    order = stage_order(schedule, 1, 2, 4, v, 1 if schedule.flush else 2)
    return any(ph == "W" for ph, _, _ in order)


def _chunks_per_stage(
    sc: Scenario, name: str, pp: int, layers: int, asked: bool
) -> list[tuple[int | None, dict[str, Any]]]:
    """The ``parallel.virtual_stages`` to try for schedule ``name`` at ``pp`` stages (None:
    the scenario's own), each with the partition override it needs: the schedule's declared
    count, or :data:`VIRTUAL_STAGES` for one taking any — those whose model chunks divide the
    layers, and, for a transformer split ``even`` by a looping one-directional schedule, those that
    Megatron-Core's uneven split fits (:func:`~clustersim.workload.megatron_split.uneven_split`:
    Llama-3.1-405B's 126 layers at pp 8). A schedule outside the registry's ranked ones runs
    at pp > 1 only unless ``asked`` for (at pp = 1 it is 1F1B)."""
    schedule = SCHEDULES[name]
    if pp == 1 and schedule.search_rank is None and not asked:
        return []
    tries = list(VIRTUAL_STAGES) if schedule.chunks is None else [schedule.chunks]
    uneven = (
        sc.model.kind == "transformer" and megatron_placement(schedule) and sc.parallel.partition == "even"
    )
    out = []
    for v in tries:
        if pp * v % schedule.directions:
            continue
        form = uneven_split(layers, pp, v) if uneven and layers % schedule.model_chunks(pp, v) else None
        if form is None and layers % schedule.model_chunks(pp, v):
            continue
        own = v == sc.parallel.virtual_stages and schedule.chunks is not None
        out.append((None if own else v, {"parallel.partition": form} if form else {}))
    return out


def context_parallel_sizes(sc: Scenario, gpus: int) -> list[int]:
    """The context-parallel sizes to search: 1, the scenario's own, and each of
    :data:`CP_SIZES` dividing ``gpus`` that the loader's context-parallel rules accept for
    this model (probed on the base scenario at tp = 1: model kind, flash attention, sequence
    chunks, heads for Ulysses) — for a sequence of :data:`CP_MIN_SEQ_LEN` tokens or more, or a
    scenario already using cp."""
    if sc.model.kind != "transformer":
        return [sc.parallel.cp]
    if sc.parallel.cp == 1 and resolve_transformer(sc.model).seq_len < CP_MIN_SEQ_LEN:
        return [1]
    out = sorted({1, sc.parallel.cp})
    for cp in CP_SIZES:
        if gpus % cp or cp in out:
            continue
        par = sc.spec.parallel.model_copy(update={"cp": cp, "tp": 1, "tp_comm_overlap": False})
        try:
            check_context_parallel(sc.spec.model_copy(update={"parallel": par}))
        except ScenarioError:
            continue
        out.append(cp)
    return sorted(out)


def hetero_knobs(sc: Scenario, pp: int, dp: int, schedule: str) -> dict[str, Any]:
    """On a heterogeneous cluster, size each plan to its GPUs: stages balanced on their
    GPUs (pp > 1) and micro-batches split by replica speed (dp > 1, flushing schedules)."""
    if heterogeneity(sc.cluster) is None:
        return {}
    out: dict[str, Any] = {"parallel.partition": "balanced"} if pp > 1 else {}
    if dp > 1 and SCHEDULES[schedule].flush:
        out["parallel.dp_split"] = "speed"
    return out


def _redundant(plan: Mapping[str, Any], dp: int, tp: int) -> bool:
    """Knob settings that are the same plan as another one: ZeRO shards over dp (nothing
    to shard at dp = 1), sequence parallelism splits over tp (nothing at tp = 1), TP
    communication overlap pipelines sequence-parallel collectives (nothing without them)."""
    return (
        (dp == 1 and plan.get("parallel.zero", 0) > 0)
        or (tp == 1 and plan.get("parallel.sequence_parallel", False) is True)
        or (
            plan.get("parallel.tp_comm_overlap") is True
            and plan.get("parallel.sequence_parallel") is not True
        )
    )


def label(plan: Mapping[str, Any]) -> str:
    """A short name of a plan: ``tp8 pp4 dp2 mb1 1f1b`` (``interleaved v2``; + other knobs
    as key=value)."""
    short = {
        "parallel.tp": "tp",
        "parallel.cp": "cp",
        "parallel.ep": "ep",
        "parallel.pp": "pp",
        "parallel.dp": "dp",
        "training.micro_batch": "mb",
    }
    parts = [f"{short[k]}{plan[k]}" for k in short if k in plan]
    parts += [str(plan["parallel.schedule"])] if "parallel.schedule" in plan else []
    parts += [f"v{plan['parallel.virtual_stages']}"] if "parallel.virtual_stages" in plan else []
    named = (*short, "parallel.schedule", "parallel.virtual_stages")
    parts += [
        f"{k.rpartition('.')[2]}={v}"
        for k, v in plan.items()
        if k not in named and not k.startswith("cluster.")
    ]
    return " ".join(parts)


def placement(tp: int, pp: int, dp: int, gpus_per_node: int) -> dict[str, int]:
    """Where the plan's groups land (Megatron order): nodes spanned by one TP group and by
    one DP group, and how many of the pp − 1 stage-to-stage hops cross a node boundary."""
    plan = Plan(tp=tp, pp=pp, dp=dp, gpus_per_node=gpus_per_node)
    tp_group = [plan.device(0, 0, t) for t in range(tp)]
    hops = sum(plan.node(plan.device(s)) != plan.node(plan.device(s + 1)) for s in range(pp - 1))
    return {
        "tp_nodes": len({plan.node(d) for d in tp_group}),
        "dp_nodes": len({plan.node(d) for d in plan.dp_group(0)}),
        "pp_node_hops": int(hops),
    }
