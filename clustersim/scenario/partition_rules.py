"""Cross-field rules of ``parallel.partition``: the layers must split into the model chunks.

Called by :func:`clustersim.scenario.rules.check_rules`. ``even`` needs the chunks to divide
the layers; a list must give every chunk's layers; Megatron-Core's uneven split
(:mod:`clustersim.workload.megatron_split`) must satisfy Megatron's own rules. Each refusal
names ``parallel.partition`` and its forms (docs/schedules.md, "Stage splits").
"""

from __future__ import annotations

from ..errors import ScenarioError
from ..schedules import SCHEDULES
from ..workload.megatron_split import megatron_placement, model_split, uneven_split
from .schema import PARTITION_FORMS, MegatronSplitSpec


def check_partition(spec, layers: int) -> None:
    """The model's ``layers`` split into the schedule's model chunks as ``parallel.partition`` asks."""
    par = spec.parallel
    schedule = SCHEDULES[par.schedule]
    chunks = schedule.model_chunks(par.pp, par.virtual_stages)  # a bidirectional schedule holds each twice
    what = "pp × virtual_stages" if schedule.directions == 1 else "pp × virtual_stages / 2"
    part = par.partition
    if isinstance(part, MegatronSplitSpec):
        if spec.model.kind != "transformer" or not megatron_placement(schedule):
            raise ScenarioError(
                "parallel.partition",
                part.model_dump(exclude_defaults=True),
                "Megatron-Core's uneven split cuts a transformer for a schedule placing chunk "
                "a·pp + b on stage b (one direction, looping: 1f1b, interleaved, zb_h1, …); "
                "accepted here: even, balanced or a list of layers per model chunk",
            )
        try:
            model_split(spec.model, par.pp, par.virtual_stages, part.model_dump())
        except ValueError as why:
            raise ScenarioError(
                "parallel.partition", part.model_dump(exclude_defaults=True), f"{why}"
            ) from None
        return
    if isinstance(part, list) and (len(part) != chunks or sum(part) != layers):
        raise ScenarioError(
            "parallel.partition",
            part,
            f"give the layers of each of the {what} = {chunks} model chunks, summing to the "
            f"model's {layers} layers",
        )
    if part != "even" and layers < chunks:
        raise ScenarioError(
            "parallel.pp", par.pp, f"the model has {layers} layers; accepted: pp × virtual_stages ≤ {layers}"
        )
    if spec.model.kind != "cnn" and part == "even" and layers % chunks:
        form = uneven_split(layers, par.pp, par.virtual_stages) if megatron_placement(schedule) else None
        hint = f"; e.g. parallel.partition: {form}" if form and spec.model.kind == "transformer" else ""
        raise ScenarioError(
            "parallel.pp",
            par.pp,
            f"model.layers = {layers} must divide evenly into {what} = {chunks} stages under "
            f"parallel.partition: even; accepted: a divisor of {layers}, or an uneven split by "
            f"parallel.partition (its forms: {PARTITION_FORMS}){hint}",
        )
