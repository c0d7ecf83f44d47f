"""PipeDream's partitioning optimizer (Narayanan et al., SOSP'19 §3.1).

For layers 0..L−1 with profiled compute T_l, output bytes a_l and parameter bytes w_l,
a stage holding layers i..j replicated on r workers processes one minibatch per

    T(i→j, r) = (1/r) · max( Σ T_l , Σ W_l^r ),   W_l^r = 4 (r − 1) w_l / (r · B)

(its compute, or its weight synchronisation among the r replicas at bandwidth B), and
the best pipeline of layers 0..j on n workers has per-minibatch time

    A(j, n) = min( T(0→j, n),  min_{i<j, 1≤r<n} max( A(i, n − r), 2 C_i, T(i+1→j, r) ) )

with C_i = a_i / B the transfer of layer i's output to the next stage. The pipeline's
throughput is 1 / A(L−1, N). Stages whose memory (weights, gradients and optimizer
state, one stashed weight version and one activation set per in-flight minibatch) does
not fit are excluded. :func:`uniform_partition` solves the same recursion with every
stage replicated ``dp`` times — the plans clustersim's uniform Plan can simulate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from .profiles import LayerProfile, Network


@dataclass(frozen=True)
class Stage:
    """Layers ``first..last`` (inclusive) replicated on ``replicas`` workers."""

    first: int
    last: int
    replicas: int

    @property
    def layers(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True)
class PipelinePlan:
    """A partition of the layers into stages and the planner's time per minibatch."""

    stages: tuple[Stage, ...]
    time_per_minibatch_s: float

    @property
    def config(self) -> str:
        """PipeDream's notation: replicas per stage, e.g. ``15-1``."""
        return "-".join(str(s.replicas) for s in self.stages)

    @property
    def partition(self) -> list[int]:
        return [s.layers for s in self.stages]


class Optimizer:
    """Solves the recursion over ``layers`` on a ``net``work for up to ``gpus`` workers."""

    def __init__(self, layers: list[LayerProfile], net: Network, memory_bytes: float = math.inf):
        self.layers, self.net, self.memory = layers, net, memory_bytes
        self.prefix_t = [0.0]
        self.prefix_w = [0.0]
        self.prefix_m = [0.0]
        self.prefix_s = [0.0]
        self.prefix_v = [0.0]
        for lp in layers:
            self.prefix_s.append(self.prefix_s[-1] + lp.resident)
            self.prefix_t.append(self.prefix_t[-1] + lp.compute)
            self.prefix_w.append(self.prefix_w[-1] + lp.param_bytes)
            self.prefix_m.append(self.prefix_m[-1] + lp.activation_memory)
            self.prefix_v.append(self.prefix_v[-1] + lp.stashed)

    def stage_time(
        self, i: int, j: int, r: int, in_flight: int = 1, factor: float = 1.0, memory: float | None = None
    ) -> float:
        """T(i→j, r), or infinity when the stage does not fit in memory. ``factor`` scales
        the compute (a stage on slower GPUs); ``memory`` replaces the optimizer's capacity."""
        w = self.prefix_w[j + 1] - self.prefix_w[i]
        mem = (self.prefix_s[j + 1] - self.prefix_s[i]) + (
            self.prefix_v[j + 1] - self.prefix_v[i] + self.prefix_m[j + 1] - self.prefix_m[i]
        ) * in_flight
        if mem > (self.memory if memory is None else memory):
            return math.inf
        sync = 4 * (r - 1) * w / (r * self.net.bandwidth(r)) if r > 1 else 0.0
        return max(factor * (self.prefix_t[j + 1] - self.prefix_t[i]), sync) / r

    def transfer(self, i: int, gpus: int) -> float:
        """2·C_i: layer i's output forward plus its gradient back."""
        return 2 * self.layers[i].activation_bytes / self.net.bandwidth(gpus)

    def best(self, gpus: int) -> PipelinePlan:
        """PipeDream's plan (stages with their own replication) for exactly ``gpus`` workers."""
        n_layers = len(self.layers)

        @cache
        def a(j: int, n: int) -> tuple[float, tuple[Stage, ...]]:
            # the last stage of a pipeline of n workers has ~ceil(n_total / n) in flight; the
            # planner's memory check uses the pipeline depth seen from this stage
            best = (self.stage_time(0, j, n, math.ceil(gpus / n)), (Stage(0, j, n),))
            for i in range(j):
                for r in range(1, n):
                    head, stages = a(i, n - r)
                    t = max(
                        head,
                        self.transfer(i, gpus),
                        self.stage_time(i + 1, j, r, math.ceil(gpus / max(r, 1))),
                    )
                    if t < best[0]:
                        best = (t, stages + (Stage(i + 1, j, r),))
            return best

        t, stages = a(n_layers - 1, gpus)
        return PipelinePlan(stages, t)

    def uniform(
        self,
        pp: int,
        dp: int,
        stage_factors: list[float] | None = None,
        stage_memory: list[float] | None = None,
    ) -> PipelinePlan:
        """The best split into ``pp`` stages, each replicated ``dp`` times. On a
        heterogeneous cluster ``stage_factors[s]`` scales stage s's compute and
        ``stage_memory[s]`` is its GPUs' memory (:mod:`.hetero`)."""
        n_layers, gpus = len(self.layers), pp * dp
        inf = (math.inf, ())
        factors = stage_factors or [1.0] * pp
        memory = stage_memory or [None] * pp

        @cache
        def b(j: int, s: int) -> tuple[float, tuple[Stage, ...]]:
            depth = pp - s + 1  # in-flight minibatches on stage s (1F1B): stages from here on
            if s == 1:
                return self.stage_time(0, j, dp, pp, factors[0], memory[0]), (Stage(0, j, dp),)
            best = inf
            for i in range(s - 2, j):
                head, stages = b(i, s - 1)
                t = max(
                    head,
                    self.transfer(i, gpus),
                    self.stage_time(i + 1, j, dp, depth, factors[s - 1], memory[s - 1]),
                )
                if t < best[0]:
                    best = (t, stages + (Stage(i + 1, j, dp),))
            return best

        t, stages = b(n_layers - 1, pp)
        return PipelinePlan(stages, t)


def data_parallel_time(layers: list[LayerProfile], net: Network, gpus: int) -> float:
    """Per-minibatch time of pure data parallelism on ``gpus`` workers, by the same model."""
    return Optimizer(layers, net).stage_time(0, len(layers) - 1, gpus)


def uniform_partition(
    layers: list[LayerProfile],
    net: Network,
    pp: int,
    dp: int,
    memory_bytes: float = math.inf,
    stage_factors: list[float] | None = None,
    stage_memory: list[float] | None = None,
) -> list[int]:
    """Layers per stage of the best ``pp``-stage pipeline with every stage on ``dp`` replicas
    (per-stage compute factors and memory on a heterogeneous cluster)."""
    return Optimizer(layers, net, memory_bytes).uniform(pp, dp, stage_factors, stage_memory).partition
