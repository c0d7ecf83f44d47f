"""Rules of forward-only (inference) scenarios: ``training.mode: inference``.

Inference compiles forward passes only (:mod:`clustersim.compilers.inference`), so every
setting that exists for the backward pass, the gradients or the optimizer is refused by
name rather than silently ignored (``training.optimizer`` alone is ignored: it has a
default and no effect without an optimizer step).
"""

from __future__ import annotations

from ..errors import ScenarioError
from ..schedules import SCHEDULES
from .generation_rules import check_generation
from .schema import ScenarioSpec


def check_inference(spec: ScenarioSpec) -> None:
    """Raise ScenarioError if an inference scenario sets a training-only option, or a
    training scenario sets inference-only ``training.arrival``."""
    tr, par = spec.training, spec.parallel
    check_generation(spec)
    if tr.mode != "inference":
        if tr.arrival is not None:
            raise ScenarioError(
                "training.arrival",
                tr.arrival.model_dump(),
                "request arrivals apply only with training.mode: inference",
            )
        return
    why = "is training-only; inference runs forward passes only"
    if not SCHEDULES[par.schedule].inference:
        serving = [s.name for s in SCHEDULES.values() if s.inference]
        raise ScenarioError(
            "parallel.schedule",
            par.schedule,
            f"{why} (every stage runs the requests' forwards in "
            f"request order); accepted: {', '.join(serving)}",
        )
    if par.gradient_compression is not None:
        raise ScenarioError(
            "parallel.gradient_compression",
            par.gradient_compression.model_dump(),
            f"{why}, without gradients; remove it",
        )
    if par.activation_compression is not None:
        raise ScenarioError(
            "parallel.activation_compression",
            par.activation_compression.model_dump(),
            "not supported with inference yet; remove it",
        )
    if par.parameter_server is not None:
        raise ScenarioError(
            "parallel.parameter_server", par.parameter_server.model_dump(), f"{why}; remove it"
        )
    if par.dp_split != "even":
        raise ScenarioError(
            "parallel.dp_split", par.dp_split, "inference replicas take requests round robin; accepted: even"
        )
    if par.zero:
        raise ScenarioError(
            "parallel.zero", par.zero, f"ZeRO shards optimizer state and gradients, which {why}; accepted: 0"
        )
    if tr.recompute != "none":
        raise ScenarioError(
            "training.recompute",
            tr.recompute,
            "recomputation serves the backward pass, which inference does not run; accepted: none",
        )
    if par.virtual_stages != 1:
        raise ScenarioError(
            "parallel.virtual_stages",
            par.virtual_stages,
            "inference runs one model chunk per stage; accepted: 1",
        )
    if par.stage_replicas is not None:
        raise ScenarioError(
            "parallel.stage_replicas",
            par.stage_replicas,
            "not supported with inference; accepted: none (use dp for replicas serving disjoint requests)",
        )
    if spec.simulation.iterations != 1:
        raise ScenarioError(
            "simulation.iterations",
            spec.simulation.iterations,
            "inference serves global_batch / micro_batch requests once; accepted: 1",
        )
