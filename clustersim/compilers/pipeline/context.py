"""The compile context: everything one pipeline Program is compiled from, in one frozen value.

The pipeline compiler's emitters (:mod:`.compile`, :mod:`.stages`) read the schedule, the
plan, the chunk costs and the run's options from one :class:`CompileContext` instead of
long positional parameter lists. A heterogeneous replica compiles under a copy with its
own ``costs`` and ``m`` (:func:`dataclasses.replace`). The emitters bind the fields they
read to locals once per stage, so the per-op loops pay no attribute lookups for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...parallel.compression import Compression
from ...parallel.data_parallel import DataParallel
from ...parallel.plan import Plan
from ...program import Program
from ...schedules.registry import Schedule
from ...workload.stage_cost import StageCost


@dataclass(frozen=True)
class CompileContext:
    """What a pipeline Program is compiled from (:func:`.compile.compile_pipeline`).

    ``costs``: one StageCost per model chunk (p·v, in model order); ``m``: micro-batches
    per iteration; ``iterations``: training iterations to emit. ``fold``: one
    representative per stage (:mod:`clustersim.resolve.fold`). ``compression``: DP
    gradients compressed for their all-reduce (:mod:`.gradient_sync`); ``activations``:
    pipeline sends across compressed links (:mod:`.codecs`). ``replicas`` (heterogeneous
    clusters): per data-parallel replica a :class:`~clustersim.parallel.hetero.ReplicaWork`
    — its own chunk costs and micro-batch count; replicas meet at the gradient all-reduce.
    ``data_parallel``: the data-parallel traffic of :mod:`.data_parallel` (None: one
    all-reduce per stage and step). ``sharded``: the optimizer is sharded over the
    data-parallel group (ZeRO ≥ 1, the distributed optimizer), so the step's scalar
    all-reduces span every GPU (:mod:`.step_work`). ``coarse``: each pass emitted once and
    stamped (:mod:`.pass_template`) is coarsened once, before stamping, as
    :func:`~clustersim.coarsen.coarsen` would coarsen its every copy. ``reserve``: bytes
    every GPU holds besides its chunks' (the CUDA context and NCCL's,
    :attr:`~clustersim.resolve.Job.runtime_reserve`). ``prog``: the Program being emitted
    (set by the compiler)."""

    schedule: Schedule
    plan: Plan
    costs: list[StageCost]
    m: int
    iterations: int = 1
    fold: bool = False
    compression: Compression | None = None
    activations: Compression | None = None
    replicas: tuple | None = None
    data_parallel: DataParallel | None = None
    sharded: bool = False
    coarse: bool = False
    reserve: int = 0
    prog: Program | None = None

    @property
    def v(self) -> int:
        """Model chunks per stage."""
        return len(self.costs) // self.plan.pp
