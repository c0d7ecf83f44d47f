"""Per-stage costs of a model, the input the schedules compile into a Program.

A :class:`StageCost` is what one pipeline stage costs per micro-batch (forward,
backward-input, backward-weight times; activation bytes sent downstream and kept in
memory) and per iteration (optimizer time; parameter bytes). The synthetic model maps
onto it directly; real models (transformers, CNNs) will compute it from their layers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageCost:
    """Costs of one pipeline stage on its GPU.

    ``backward`` is the whole backward time (B + W); ``backward_weight`` its W part.
    ``activation_bytes`` is sent to the next stage per micro-batch (and the same gradient
    size comes back); ``activation_memory`` is kept per in-flight micro-batch.
    """

    forward: float
    backward: float
    backward_weight: float
    activation_bytes: int
    activation_memory: int
    param_bytes: int
    optimizer: float
    forward_flops: float = 0.0
    backward_flops: float = 0.0


def stage_costs(model, pp: int) -> list[StageCost]:
    """Split ``model`` into ``pp`` equal stages of consecutive layers and cost each one."""
    if model.kind != "synthetic":
        raise NotImplementedError(f"model kind {model.kind!r}")
    per = model.layers // pp
    stage = StageCost(
        forward=per * model.forward,
        backward=per * model.backward,
        backward_weight=per * model.backward_weight,
        activation_bytes=int(model.activation),
        activation_memory=int(per * model.activation),
        param_bytes=int(per * model.params),
        optimizer=model.optimizer,
    )
    return [stage] * pp
