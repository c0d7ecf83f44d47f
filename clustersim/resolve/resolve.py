"""``resolve(scenario) -> Job``: everything a run derives from its scenario, computed once."""

from __future__ import annotations

from ..errors import ScenarioError
from ..hardware.node_groups import gpu_types
from ..parallel.hetero import needs_replica_work, replica_work
from ..parallel.plan import Plan
from ..parallel.replica_layout import ReplicaLayout
from ..planner import resolve_partition
from ..scenario import MultiJobScenario, Scenario
from ..schedules.registry import SCHEDULES
from ..workload.rules import model_layers
from ..workload.stage_cost import chunk_costs
from .job import Job


def resolve(sc: Scenario, layers: bool = False) -> Job:
    """The :class:`Job` of scenario ``sc``: its layout, partition (the planner runs here,
    once), chunk costs per GPU type and micro-batches per replica. ``layers``: the chunk
    costs label their segments with model layers (a Chakra export's,
    :func:`~clustersim.workload.stage_cost.chunk_costs`)."""
    if isinstance(sc, MultiJobScenario):  # each of its jobs resolves alone (clustersim.multijob)
        raise ScenarioError(
            "jobs", list(sc.jobs), "a multi-job scenario is simulated as a whole (simulate, clustersim run)"
        )
    par, cl = sc.parallel, sc.cluster
    plan = Plan.of(sc)
    layout = plan if par.stage_replicas is None else ReplicaLayout(par.stage_replicas, cl.gpus_per_node)
    schedule = SCHEDULES[par.schedule]
    chunks = plan.pp * par.virtual_stages
    parts = schedule.model_chunks(plan.pp, par.virtual_stages)  # a bidirectional schedule holds each twice
    partition = resolve_partition(sc, parts)
    types = list(dict.fromkeys([cl.gpu, *gpu_types(cl)]))
    trace = sc.model.kind == "trace"  # the trace holds its ops' times: nothing to price
    if trace:
        costs = {g: [] for g in types}
    else:
        costs = {
            g: chunk_costs(sc, parts, partition, gpu=g, layers=layers) * schedule.directions for g in types
        }
    layer_costs = None
    if par.parameter_server is not None:  # workers push and pull per layer
        n = model_layers(sc.model)
        layer_costs = {g: chunk_costs(sc, n, [1] * n, gpu=g) for g in types}
    replicas = None
    if needs_replica_work(cl, par) and par.parameter_server is None and not trace:
        replicas = tuple(replica_work(cl, par, sc.training, plan, schedule, costs, sc.num_microbatches))
    return Job(
        name=sc.name,
        cluster=cl,
        model=sc.model,
        training=sc.training,
        parallel=par,
        simulation=sc.simulation,
        resolved=sc.resolved(),
        dp=sc.dp,
        num_microbatches=sc.num_microbatches,
        plan=plan,
        layout=layout,
        schedule=schedule,
        chunks=chunks,
        partition=None if partition is None else tuple(partition),
        costs=costs,
        layer_costs=layer_costs,
        replicas=replicas,
    )
