"""The space of parallel plans for N GPUs: every valid (tp, pp, dp, micro-batch, schedule, …).

A plan is a dict of scenario overrides. Rules (Megatron-LM's, and the project's Plan):

* ``tp × pp × dp = N``; TP groups sit inside a node (Megatron order: TP fastest, then DP,
  then PP), so ``tp`` divides ``gpus_per_node`` — a TP group never spans nodes;
* ``tp`` divides the attention heads (and key/value heads) of a transformer; a synthetic
  model has per-GPU layer costs and no heads, so it gets ``tp = 1`` only;
* ``pp × virtual_stages`` divides the layers; ``micro_batch × dp`` divides the global batch;
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
from ..schedules import SCHEDULES
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
DEFAULT_MICRO_BATCHES = (1, 2, 4, 8)


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


def plan_space(
    sc: Scenario,
    gpus: int,
    *,
    micro_batches: Sequence[int] | None = None,
    schedules: Sequence[str] | None = None,
    vary: Mapping[str, Sequence[Any]] | None = None,
) -> list[dict[str, Any]]:
    """Every plan for ``gpus`` GPUs as override dicts (cluster resize included)."""
    cluster = cluster_overrides(sc, gpus)
    gpn = cluster.get("cluster.gpus_per_node", sc.cluster.gpus_per_node)
    synthetic = sc.model.kind == "synthetic"
    layers = model_layers(sc.model)
    v = sc.parallel.virtual_stages
    if sc.model.kind == "transformer":  # the same rule the scenario check applies
        cfg = resolve_transformer(sc.model)
        tps = [t for t in divisors(gpn) if gpus % t == 0 and tp_obstacle(cfg, t) is None]
    else:
        tps = [1]
    mbs = list(micro_batches or ([sc.training.micro_batch] if synthetic else DEFAULT_MICRO_BATCHES))
    searched = sorted(
        (s for s in SCHEDULES.values() if s.search_rank is not None), key=lambda s: s.search_rank
    )
    scheds = list(schedules or [s.name for s in searched])
    unknown = [s for s in scheds if s not in SCHEDULES]
    if unknown:
        raise ScenarioError(
            "schedules", unknown[0], f"not a known schedule; known: {', '.join(sorted(SCHEDULES))}"
        )
    extra = {} if synthetic else {k: list(vals) for k, vals in KNOBS.items()}
    extra.update({k: list(vals) for k, vals in (vary or {}).items()})
    gb = sc.training.global_batch
    plans = []
    for tp in tps:
        for pp in divisors(gpus // tp):
            if layers % (pp * v):
                continue
            dp = gpus // (tp * pp)
            for mb, sched in itertools.product(mbs, scheds):
                if gb % (mb * dp):
                    continue
                core = {
                    **cluster,
                    "parallel.tp": tp,
                    "parallel.pp": pp,
                    "parallel.dp": dp,
                    "training.micro_batch": mb,
                    "parallel.schedule": sched,
                    **hetero_knobs(sc, pp, dp, sched),
                }
                for combo in itertools.product(*extra.values()):
                    plan = {**core, **dict(zip(extra, combo))}
                    if not _redundant(plan, dp, tp):
                        plans.append(plan)
    return plans


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
    to shard at dp = 1), sequence parallelism splits over tp (nothing at tp = 1)."""
    return (dp == 1 and plan.get("parallel.zero", 0) > 0) or (
        tp == 1 and plan.get("parallel.sequence_parallel", False) is True
    )


def label(plan: Mapping[str, Any]) -> str:
    """A short name of a plan: ``tp8 pp4 dp2 mb1 1f1b`` (+ other knobs as key=value)."""
    short = {"parallel.tp": "tp", "parallel.pp": "pp", "parallel.dp": "dp", "training.micro_batch": "mb"}
    parts = [f"{short[k]}{plan[k]}" for k in short if k in plan]
    parts += [str(plan["parallel.schedule"])] if "parallel.schedule" in plan else []
    parts += [
        f"{k.rpartition('.')[2]}={v}"
        for k, v in plan.items()
        if k not in short and k != "parallel.schedule" and not k.startswith("cluster.")
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
