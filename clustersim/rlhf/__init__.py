"""RLHF / GRPO iterations: rollout generation, scoring forwards, training steps and the
weight transfer between them as phases of one timeline (docs/rlhf.md).

A driver above the engine (:mod:`.runner`): each phase is a simulation of its own — the
generation mode's scheduler, the inference and training compile paths, transfers on the
fabric (:mod:`.phases`, :mod:`.layout`) — composed synchronously or with a staleness bound
(:mod:`.timeline`).
"""

from .runner import simulate_rlhf

__all__ = ["simulate_rlhf"]
