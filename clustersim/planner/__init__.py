"""Partition planning: how to cut a model into pipeline stages.

``parallel.partition`` picks the layers of each model chunk: ``even`` (the model's
default split), ``balanced`` (contiguous, minimising the slowest chunk's compute),
``pipedream`` (PipeDream's optimizer, :mod:`.pipedream`, with the scenario's uniform
dp), an explicit list, or Megatron-Core's uneven split (first/last stage layer counts, or
the embedding and loss counted as layers: :mod:`clustersim.workload.megatron_split`). :func:`plan_scenario` runs the full optimizer (stages with
their own replication) and the best uniform plan for ``clustersim plan``.
"""

from __future__ import annotations

from ..errors import ScenarioError
from ..hardware.node_groups import gpu_types, heterogeneity
from ..schedules.registry import SCHEDULES
from ..workload.megatron_split import model_split
from ..workload.stage_builder import balanced_partition
from ..workload.stage_cost import StageCost, chunk_costs
from .pipedream import Optimizer, PipelinePlan, Stage, data_parallel_time, uniform_partition
from .profiles import LayerProfile, Network, layer_profiles, network_of
from .report import PlanReport, plan_scenario


def resolve_partition(sc, chunks: int) -> list[int] | None:
    """The layers per chunk ``parallel.partition`` asks for (None: the model's default).

    On a heterogeneous cluster (``cluster.node_groups``) ``balanced`` and ``pipedream``
    price each stage on its own GPUs (:mod:`.hetero`), and a CNN's default split — balanced
    — does too, so every GPU type prices the same layers."""
    part = sc.parallel.partition
    if isinstance(part, list):
        return list(part)
    if not isinstance(part, str):  # Megatron-Core's uneven split (the loader checked its rules)
        return model_split(sc.model, sc.parallel.pp, sc.parallel.virtual_stages, part.model_dump())
    mixed = heterogeneity(sc.cluster) is not None
    if part == "even" and not (sc.model.kind == "cnn" and len(gpu_types(sc.cluster)) > 1):
        return None
    if mixed and part in ("even", "balanced"):
        from .hetero import balanced_by_stage

        return balanced_by_stage(sc, chunks)
    profiles = layer_profiles(sc)
    if part == "balanced":
        return balanced_partition([lp.compute for lp in profiles], chunks)
    if sc.parallel.virtual_stages != 1:
        raise ScenarioError(
            "parallel.partition",
            part,
            "the PipeDream planner cuts one chunk per stage; "
            "accepted with virtual_stages > 1: even, balanced or a list",
        )
    if mixed:
        from .hetero import stage_limits

        factors, memory = stage_limits(sc)
        fitting = uniform_partition(
            profiles, network_of(sc), sc.parallel.pp, sc.dp, stage_factors=factors, stage_memory=memory
        )
        # nothing fits: split by time alone, and let the simulation report the OOM
        return fitting or uniform_partition(
            profiles, network_of(sc), sc.parallel.pp, sc.dp, stage_factors=factors
        )
    return uniform_partition(profiles, network_of(sc), sc.parallel.pp, sc.dp)


def run_chunk_costs(sc) -> list[StageCost]:
    """The StageCost of every model chunk (``pp × virtual_stages`` of them), cut by the
    partition the run uses (``parallel.partition`` resolved): what a GPU of each stage holds."""
    schedule = SCHEDULES[sc.parallel.schedule]
    chunks = schedule.model_chunks(sc.parallel.pp, sc.parallel.virtual_stages)
    return chunk_costs(sc, chunks, resolve_partition(sc, chunks)) * schedule.directions


__all__ = [
    "LayerProfile",
    "Network",
    "Optimizer",
    "PipelinePlan",
    "PlanReport",
    "Stage",
    "data_parallel_time",
    "layer_profiles",
    "network_of",
    "plan_scenario",
    "resolve_partition",
    "run_chunk_costs",
    "uniform_partition",
]
