"""Rules of the ``rlhf`` section (docs/rlhf.md) across the scenario's other sections: the
scenario is the actor's training job, so it trains (``training.mode: train``) a transformer,
and its phases are composed by the RLHF driver alone (no ``generation`` section, no faults,
no energy report)."""

from __future__ import annotations

from ..errors import ScenarioError
from ..workload.resolve import resolve_transformer


def check_rlhf(spec) -> None:
    """Raise ScenarioError (field, value, accepted) where ``rlhf`` conflicts with the rest."""
    if spec.rlhf is None:
        return
    why = "an rlhf scenario is the actor's training job"
    if spec.training.mode != "train":
        raise ScenarioError("training.mode", spec.training.mode, f"{why}; accepted: train")
    if spec.model.kind != "transformer":
        raise ScenarioError("model.kind", spec.model.kind, f"{why}: a transformer; accepted: transformer")
    experts = resolve_transformer(spec.model).experts
    if experts > 1:  # generation serves MoE models; the phases' weight moves are per dense layer
        raise ScenarioError(
            "model.experts", experts, "the RLHF phases are modelled for dense actors; accepted: 1"
        )
    for field, value in (
        ("generation", spec.generation),
        ("faults", spec.faults or None),
        ("recovery", spec.recovery),
        ("energy", spec.energy),
    ):
        if value is not None:
            raise ScenarioError(
                field, "set", "the rlhf driver composes the phases (rollouts: rlhf.rollout); remove it"
            )
