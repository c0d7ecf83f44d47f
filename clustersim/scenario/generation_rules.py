"""Rules of the ``generation`` section (docs/generation.md) across the scenario's other
sections: generation is a way of serving, so it needs ``training.mode: inference``, and its
requests arrive as ``generation.arrival`` says (not ``training.arrival``)."""

from __future__ import annotations

from ..errors import ScenarioError


def check_generation(spec) -> None:
    """Raise ScenarioError (field, value, accepted) where ``generation`` conflicts with the rest."""
    gen = spec.generation
    if gen is None:
        return
    if spec.training.mode != "inference":
        raise ScenarioError(
            "training.mode",
            spec.training.mode,
            "generation serves requests: accepted: inference (with generation set)",
        )
    if spec.training.arrival is not None:
        raise ScenarioError(
            "training.arrival",
            spec.training.arrival.model_dump(),
            "generation requests arrive as generation.arrival says; remove training.arrival",
        )
    if spec.energy is not None:
        raise ScenarioError(
            "energy",
            "set",
            "power and energy are reported for training steps, not yet for generation; remove it",
        )
    if spec.model.kind != "transformer":
        raise ScenarioError(
            "model.kind", spec.model.kind, "generation runs transformer models; accepted: transformer"
        )
