"""``plan_scenario``: PipeDream's optimizer on a scenario, and the plan clustersim can run.

The full optimizer may give every stage its own replication (e.g. VGG-16's ``15-1``);
:meth:`PlanReport.best_overrides` runs it through ``parallel.stage_replicas`` (see
:mod:`clustersim.compilers.replicated`). The report also holds the best *uniform* plan
(pp stages × dp replicas, over every divisor pp of the GPU count), whose
:meth:`PlanReport.overrides` run it with the uniform Plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ScenarioError
from ..hardware.node_groups import gpu_spec, heterogeneity
from .pipedream import Optimizer, PipelinePlan, data_parallel_time
from .profiles import layer_profiles, network_of


@dataclass(frozen=True)
class PlanReport:
    """What the planner found for a scenario (times are per minibatch, the model's estimate)."""

    gpus: int  # the planner's workers: GPUs, or tensor-parallel groups of ``tp`` GPUs
    best: PipelinePlan
    uniform: PipelinePlan
    uniform_pp: int
    data_parallel_s: float
    #: why only uniform pp × dp plans were searched (then the best plan is the best uniform
    #: one); empty when per-stage replication was searched too
    uniform_only: str = ""
    tp: int = 1
    cp: int = 1  # a worker is a tp × cp group of GPUs

    @property
    def speedup_over_dp(self) -> float:
        return self.data_parallel_s / self.best.time_per_minibatch_s

    def overrides(self, schedule: str = "pipedream") -> dict:
        """Scenario overrides that run the best uniform plan."""
        return {
            "parallel.pp": self.uniform_pp,
            "parallel.dp": self.gpus // self.uniform_pp,
            "parallel.partition": self.uniform.partition,
            "parallel.schedule": schedule,
        }

    def best_overrides(self, schedule: str = "pipedream") -> dict:
        """Scenario overrides that run the planner's best plan (per-stage replication)."""
        if self.uniform_only:
            return self.overrides(schedule)
        return {
            "parallel.pp": len(self.best.stages),
            "parallel.dp": 1,
            "parallel.stage_replicas": [s.replicas for s in self.best.stages],
            "parallel.partition": self.best.partition,
            "parallel.schedule": schedule,
        }

    def table(self) -> str:
        """A human-readable summary (what ``clustersim plan`` prints)."""
        on = f"{self.gpus} GPUs" if self.tp == 1 else f"{self.gpus} tensor-parallel groups of {self.tp} GPUs"
        if self.cp > 1:
            on = f"{self.gpus} tensor × context-parallel groups of {self.tp} × {self.cp} GPUs"
        lines = [
            f"PipeDream planner on {on} (model estimates, per minibatch):",
            f"  data parallel             {self.data_parallel_s * 1e3:10.3f} ms",
            f"  best pipeline {self.best.config:<11} {self.best.time_per_minibatch_s * 1e3:10.3f} ms  "
            f"({self.speedup_over_dp:.2f}x over DP; layers per stage {self.best.partition})",
            f"  best uniform  pp={self.uniform_pp:<2} dp={self.gpus // self.uniform_pp:<3}"
            f"{self.uniform.time_per_minibatch_s * 1e3:10.3f} ms  (layers per stage {self.uniform.partition})",
            "run the planner's plan with: " + _sets(self.best_overrides()),
            "run the uniform plan with: " + _sets(self.overrides()),
        ]
        if self.uniform_only:  # the planner's plan is the uniform one: say it once
            del lines[-1]
        if self.uniform_only:
            lines.insert(
                1, f"  (uniform pp × dp plans only — {self.uniform_only}; each stage priced on its own GPUs)"
            )
        return "\n".join(lines)


def _sets(overrides: dict) -> str:
    return " ".join(f"--set {k}={str(v).replace(' ', '')}" for k, v in overrides.items())


def plan_scenario(sc) -> PlanReport:
    """Run the planner on ``sc``'s model, cluster and GPU count.

    On a heterogeneous cluster (``cluster.node_groups``) stage replication would have to
    choose which GPUs each stage gets, so the planner searches the uniform plans only —
    pp stages × dp replicas, each stage priced on its own GPUs (:mod:`.hetero`) — and the
    best of them is the plan it proposes."""
    layers, net, tp, cp, ep = (
        layer_profiles(sc),
        network_of(sc),
        sc.parallel.tp,
        sc.parallel.cp,
        sc.parallel.ep,
    )
    n = sc.num_gpus // (tp * cp)  # workers: a tensor- (and context-) parallel group is one
    why = heterogeneity(sc.cluster)
    if why is None and tp > 1:
        why = f"tp = {tp}, and stage_replicas run without tensor parallelism"
    if why is None and (cp > 1 or ep > 1):  # the expert and context-parallel rules refuse stage_replicas
        why = f"{'cp' if cp > 1 else 'ep'} = {max(cp, ep)}, and stage_replicas run without it"
    if why is not None:
        return _plan_uniform_only(sc, layers, net, n, why)
    opt = Optimizer(layers, net, gpu_spec(sc.cluster, sc.cluster.gpu).memory_bytes)
    best = opt.best(n)
    uniform, upp = None, 1
    for pp in range(1, min(n, len(layers)) + 1):
        if n % pp:
            continue
        cand = opt.uniform(pp, n // pp)
        if uniform is None or cand.time_per_minibatch_s < uniform.time_per_minibatch_s:
            uniform, upp = cand, pp
    return PlanReport(n, best, uniform, upp, data_parallel_time(layers, net, n))


def _plan_uniform_only(sc, layers, net, workers: int, why: str) -> PlanReport:
    """The best uniform plan (searched alone for reason ``why``): per pp, the stage
    placement of that plan gives each stage its compute factor and memory (its slowest,
    smallest GPU)."""
    from .hetero import stage_limits

    opt = Optimizer(layers, net)
    plans, slowest = {}, 1.0
    for pp in range(1, min(workers, len(layers)) + 1):
        if workers % pp:
            continue
        try:
            placed = sc.with_overrides(
                {
                    "parallel.pp": pp,
                    "parallel.dp": workers // pp,
                    "parallel.virtual_stages": 1,
                    "parallel.schedule": "pipedream",  # what the report's overrides run
                    "parallel.partition": "balanced",
                    "parallel.dp_split": "even",
                }
            )
        except ScenarioError:  # e.g. the global batch does not split over this dp
            continue
        factors, memory = stage_limits(placed)
        plans[pp], slowest = opt.uniform(pp, workers // pp, factors, memory), max(slowest, *factors)
    if not plans:
        raise ScenarioError(
            "parallel.pp",
            sc.parallel.pp,
            "no pp × dp plan of this cluster accepts the scenario's "
            "batch and model; check training.global_batch",
        )
    upp = min(plans, key=lambda pp: plans[pp].time_per_minibatch_s)
    # data parallelism runs at the pace of the slowest GPU (every placement has it in a stage)
    dp_time = (
        plans[1].time_per_minibatch_s
        if 1 in plans
        else opt.stage_time(0, len(layers) - 1, workers, factor=slowest)
    )
    return PlanReport(workers, plans[upp], plans[upp], upp, dp_time, why, sc.parallel.tp, sc.parallel.cp)
