"""Cross-field rules of ``parallel.parameter_server``: what a parameter-server job cannot combine.

The parameter-server compiler's :meth:`~clustersim.compilers.base.TrainingMode.check`,
run on the resolved Job before anything is compiled or run. The modes' words (``sync``,
``async``, ``hybrid``) are defined here and read by the compiler (:mod:`.compile`).
"""

from __future__ import annotations

from ...errors import ScenarioError
from ...resolve import Job
from ...scenario.context_parallel_rules import cp_conflict
from ...scenario.expert_rules import expert_field
from ...workload.rules import model_layers
from ..pipeline.check import data_parallel_conflict

SYNC, ASYNC, HYBRID = "sync", "async", "hybrid"


def check_parameter_server(job: Job) -> None:
    """Raise ScenarioError if ``parallel.parameter_server`` cannot run as asked."""
    par = job.parallel
    ps, f = par.parameter_server, "parallel.parameter_server"
    if par.cp > 1:
        raise cp_conflict(f, "set", par.cp)
    if par.data_parallel is not None:
        raise data_parallel_conflict("parameter_server")
    if expert_field(par) is not None:
        raise ScenarioError(
            f, "set", "not supported with expert parallelism (trains without all-reduce groups); remove one"
        )
    for name in ("tp", "pp", "virtual_stages"):
        if getattr(par, name) != 1:
            raise ScenarioError(
                f"parallel.{name}",
                getattr(par, name),
                "parameter-server workers each run the whole model (data parallel only); accepted: 1",
            )
    for name, off, accepted in (
        ("stage_replicas", None, "unset"),
        ("gradient_compression", None, "unset"),
        ("activation_compression", None, "unset"),
        ("zero", 0, "0"),
        ("dp_split", "even", "even"),
    ):
        if getattr(par, name) != off:
            raise ScenarioError(
                f"parallel.{name}", getattr(par, name), f"not supported with {f}; accepted: {accepted}"
            )
    if ps.mode == SYNC and ps.staleness is not None:
        raise ScenarioError(
            f"{f}.staleness", ps.staleness, "bounds async iterations; leave it unset with mode sync"
        )
    if (ps.mode == HYBRID) != (ps.sync_after is not None):
        raise ScenarioError(
            f"{f}.sync_after",
            ps.sync_after,
            "the async iterations before switching to sync: "
            "required with mode hybrid (a whole number ≥ 1), unset otherwise",
        )
    if job.simulation.network == "direct":
        raise ScenarioError(
            "simulation.network",
            "direct",
            f"{f} needs a topology for its servers; accepted: packet, flow or analytical",
        )
    if ps.buckets is not None:
        layers = model_layers(job.model)
        if not ps.per_layer or sum(ps.buckets) != layers:
            raise ScenarioError(
                f"{f}.buckets",
                ps.buckets,
                f"layers per tensor in forward order, summing to the "
                f"model's {layers} layers, with per_layer true",
            )
    if len(set(ps.servers)) != len(ps.servers):
        raise ScenarioError(f"{f}.servers", ps.servers, "each server once")
    # the Job's own graph: built once per Job (resolve's rule), not again for a check
    others = sorted(n for n, kind in job.graph.nodes(data="kind") if kind != "gpu")
    for k, name in enumerate(ps.servers):
        if name not in others:
            raise ScenarioError(
                f"{f}.servers[{k}]",
                name,
                "not a node of the topology that is not a GPU; known: " + ", ".join(others),
            )
