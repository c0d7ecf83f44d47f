"""The Job: a scenario resolved once into what compilers, the network build and result
building read.

``resolve(scenario)`` computes the layout, the partition, the chunk costs per GPU type and
the micro-batches per replica eagerly; the topology graph, the compression domains and the
fold decision on first use (a run on ``network: direct`` without compression or folding
never builds a graph), each at most once per Job. Nothing past :func:`.resolve` reads the
Scenario: the Job keeps the typed spec sections later stages read settings from
(``cluster``, ``model``, ``training``, ``parallel``, ``simulation``) and the ``resolved``
dict saved with the Result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any

import networkx as nx

from ..errors import ScenarioError
from ..hardware.node_groups import device_specs
from ..parallel.compression import Compression, compression_of
from ..parallel.data_parallel import DataParallel
from ..parallel.hetero import ReplicaWork
from ..parallel.plan import Plan
from ..program import Program
from ..scenario.cluster_spec import ClusterSpec
from ..scenario.model_spec import ModelSpec
from ..scenario.schema import ParallelSpec, SimulationSpec, TrainingSpec
from ..schedules.orders import stage_chunks
from ..schedules.registry import SCHEDULES, Schedule
from ..workload.resolve import TransformerConfig, resolve_transformer
from ..workload.runtime_memory import reserve_bytes, runtime_reserve
from ..workload.stage_cost import StageCost
from . import fold as folding
from .fold import FoldDecision, Placement, decide_fold
from .layout import Layout
from .topology import topology_graph


def flush_orders() -> dict:
    """The order functions a trace's pipeline schedule is recognised among at ``model.replay_pp``:
    the registered flush schedules of one chunk per stage, in one direction."""
    return {
        name: s.order
        for name, s in SCHEDULES.items()
        if s.flush and s.chunks == 1 and s.placement == "loop" and s.directions == 1
    }


def job_identity(
    resolved: Mapping[str, Any], costs: Mapping[str, list[StageCost]], layer_costs=None
) -> tuple:
    """What two jobs that simulate alike share, as ``(text, costs)``: the resolved scenario
    (less its ``adapted`` record) without ``training.recompute`` — which reaches the simulation only through the chunk
    costs (``costs``, ``layer_costs``, compared by value) and, as ``full``, the hardware
    FLOPs (kept as a flag) — as text. Under FlashAttention ``selective`` recompute re-runs
    nothing, so its job is the job of ``none`` (a plan search lists such plans once)."""
    training = {k: v for k, v in resolved["training"].items() if k != "recompute"}
    full = resolved["training"].get("recompute") == "full"
    kept = {k: v for k, v in resolved.items() if k != "adapted"}  # the record of defaults: not run
    return repr(({**kept, "training": training}, full)), (dict(costs), layer_costs)


@dataclass(frozen=True, eq=False)
class Job:
    """A resolved scenario (see the module docstring).

    ``plan``: the uniform TP × PP × DP plan (with ``stage_replicas``: pp from the list,
    dp = 1); ``layout``: where each device sits (the plan, or the stage-replica layout);
    ``chunks``: model chunks, ``pp × virtual_stages``; ``partition``: layers per chunk
    (None: the model's default split); ``costs``: per GPU type (``cluster.gpu`` and every
    node-group type), the StageCost of every chunk; ``layer_costs``: per GPU type, one
    StageCost per layer — only for a parameter-server job, whose workers push per layer;
    ``replicas``: each data-parallel replica's chunk costs on its GPUs and micro-batches
    (None when replicas do not differ); ``placement``: where a job of a multi-job run sits on
    the cluster (None: alone, on the cluster's first ``num_gpus`` GPUs); ``fold_refused``: why
    a folded run of this job was found inexact once compiled or run (another job's traffic
    meeting its twins, a mixed ring's hop that did not hide), which then refuses folding it."""

    name: str
    cluster: ClusterSpec
    model: ModelSpec
    training: TrainingSpec
    parallel: ParallelSpec
    simulation: SimulationSpec
    resolved: dict[str, Any]
    dp: int
    num_microbatches: int
    plan: Plan
    layout: Layout
    schedule: Schedule
    chunks: int
    partition: tuple[int, ...] | None
    costs: Mapping[str, list[StageCost]]
    layer_costs: Mapping[str, list[StageCost]] | None
    replicas: tuple[ReplicaWork, ...] | None
    placement: Placement | None = None
    fold_refused: str | None = None

    @property
    def num_gpus(self) -> int:
        """The GPUs the job runs on (``parallel.gpus``, else the whole cluster)."""
        return self.parallel.gpus or self.cluster.num_gpus

    @property
    def chunk_costs(self) -> list[StageCost]:
        """The StageCost of every model chunk on ``cluster.gpu``."""
        return self.costs[self.cluster.gpu]

    @cached_property
    def runtime_reserve(self) -> int:
        """Bytes each GPU holds outside the framework's allocator: the CUDA context and NCCL's
        communicators (:func:`~clustersim.workload.runtime_memory.runtime_reserve`) — none for
        a synthetic model, whose bytes are all the scenario states."""
        return 0 if self.model.kind == "synthetic" else runtime_reserve(self.plan)

    def replica_reserve(self, replicas: int) -> int:
        """:attr:`runtime_reserve` of a GPU of a stage run by ``replicas`` GPUs
        (``parallel.stage_replicas``, tp = 1): its stage's replica group and the pipeline's."""
        if self.model.kind == "synthetic":
            return 0
        return reserve_bytes([("group", replicas), ("group", self.plan.pp)])

    def stage_chunks(self, stage: int) -> list[int]:
        """The model chunks the schedule places on pipeline ``stage``."""
        return stage_chunks(self.schedule, stage, self.plan.pp, self.parallel.virtual_stages)

    @cached_property
    def graph(self) -> nx.DiGraph:
        """The topology graph (degradation windows applied), shared read-only."""
        return topology_graph(self.cluster)

    @cached_property
    def gradient_compression(self) -> Compression | None:
        """``parallel.gradient_compression`` with its domains read off the topology."""
        return self._compression(self.parallel.gradient_compression)

    @cached_property
    def activation_compression(self) -> Compression | None:
        """``parallel.activation_compression`` with its domains read off the topology."""
        return self._compression(self.parallel.activation_compression)

    def _compression(self, spec) -> Compression | None:
        if spec is None:
            return None
        return compression_of(spec, None if spec.links == "all" else self.graph)

    @cached_property
    def data_parallel(self) -> DataParallel | None:
        """``parallel.data_parallel`` resolved for this job's gradient group of dp × cp ranks
        (None: one all-reduce per stage and step; :mod:`clustersim.compilers.pipeline.data_parallel`)."""
        memory = min(gpu.memory_bytes for gpu in device_specs(self.cluster))  # what ZeRO-3's gathers may fill
        return DataParallel.of(self.parallel, self.plan.replicas, memory)

    @cached_property
    def identity(self) -> tuple:
        """This job's :func:`job_identity`: equal for jobs that simulate alike."""
        return job_identity(self.resolved, self.costs, self.layer_costs)

    @property
    def trace(self) -> Program | None:
        """A trace model's Program (:attr:`trace_read`); None for every other model."""
        return None if self.trace_read is None else self.trace_read[0]

    @cached_property
    def trace_read(self) -> tuple[Program, dict] | None:
        """A trace model's Program, read once from ``model.chakra`` (:mod:`clustersim.interop`;
        its ranks must be the job's GPUs, nodes without a duration priced on ``cluster.gpu``;
        replayed at ``model.replay_pp`` stages and ``model.replay_dp`` replicas where set), and how many nodes were priced each
        way (in the trace as read); None for every other model."""
        if self.model.kind != "trace":
            return None
        from ..interop.chakra_import import read_chakra  # (protobuf: only trace models need it)
        from ..workload.cost_model import CostModel

        cost = partial(CostModel.for_gpu, self.cluster.gpu, custom=self.cluster.custom_gpu)
        dp, pp = self.model.replay_dp, self.model.replay_pp
        prog, counts = read_chakra(
            self.model.chakra, self.num_gpus if dp is None and pp is None else None, cost
        )
        if pp is not None:
            from ..interop.chakra_layers import read_table
            from ..interop.chakra_restage import replay_at_pp

            prog = replay_at_pp(prog, pp, flush_orders(), read_table(self.model.chakra))
        if dp is not None:
            from ..interop.chakra_rescale import replay_at_dp

            prog = replay_at_dp(prog, dp)
        if prog.num_devices != self.num_gpus:
            field, value = ("model.replay_dp", dp) if dp is not None else ("model.replay_pp", pp)
            raise ScenarioError(
                field,
                value,
                f"the trace replayed at {dp or pp} {'replicas' if dp else 'stages'} of {prog.num_devices // (dp or pp)} "
                f"rank(s) runs on {prog.num_devices} GPUs; the job has {self.num_gpus}",
            )
        return prog, counts

    @cached_property
    def transformer(self) -> TransformerConfig | None:
        """The resolved transformer of a ``model.kind: transformer`` job (its closed-form
        FLOPs and tokens, :func:`clustersim.workload.resolve.resolve_transformer`); None for
        every other model."""
        return resolve_transformer(self.model) if self.model.kind == "transformer" else None

    @cached_property
    def fold(self) -> FoldDecision:
        """``simulation.fold`` applied to this job (:mod:`clustersim.resolve.fold`)."""
        return decide_fold(self)

    @cached_property
    def fold_obstacle(self) -> str | None:
        """Why folding this job would not be exact, whatever ``simulation.fold`` asks (None:
        it is exact; :func:`clustersim.resolve.fold.fold_obstacle`), computed once: the fold
        decision, :attr:`foldable` and the replicated evaluation's check all read it."""
        return folding.fold_obstacle(self)

    @property
    def foldable(self) -> bool:
        """Whether folding this job is exact, whatever ``simulation.fold`` asks."""
        return self.fold_obstacle is None
