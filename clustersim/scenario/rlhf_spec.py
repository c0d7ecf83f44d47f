"""The ``rlhf`` section: one RLHF / GRPO iteration as phases of one timeline — rollout
generation on the actor, the scoring forwards, the training step and the weight transfer
from the training layout to the generation layout (docs/rlhf.md). The scenario's own
``cluster``, ``model``, ``training`` and ``parallel`` describe the actor's training job."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import model_validator

from .fields import Bandwidth, Range, _Spec
from .generation_spec import Length


class RolloutEngineSpec(_Spec):
    """One generation replica's layout (``tp`` × ``pp`` GPUs) and its continuous-batching
    knobs, as the ``generation`` section spells them (vLLM's defaults on A100)."""

    tp: Annotated[int, Range(1, 1024)] = 1
    pp: Annotated[int, Range(1, 1024)] = 1
    max_num_seqs: Annotated[int, Range(1, 1_000_000)] = 256
    max_num_batched_tokens: Annotated[int, Range(1, 10_000_000)] = 2048
    kv_memory_fraction: Annotated[float, Range(0, 1, open_lo=True)] = 0.9


class RlhfSpec(_Spec):
    """``algorithm`` ``grpo`` (no critic) or ``ppo`` (a critic of the actor's architecture);
    each iteration ``prompts`` prompts of ``prompt_len`` tokens, each answered
    ``samples_per_prompt`` times with ``output_len`` tokens; ``reward_model``: a reward
    model's forward (the actor's architecture), else a rule-based reward (free).
    ``generation_gpus``: 0 colocates every phase on all GPUs (the weights resharded in place,
    ``offload`` moving the training state to the host at ``offload_bandwidth`` and back);
    N > 0 gives the first N GPUs to generation and the rest to scoring and training (the
    weights broadcast over the fabric). ``staleness``: how many updates a rollout's weights
    may lag (0: synchronous; ≥ 1 needs split pools). ``iterations`` on the timeline."""

    algorithm: Literal["grpo", "ppo"] = "grpo"
    prompts: Annotated[int, Range(1, 1_000_000)] = 32
    samples_per_prompt: Annotated[int, Range(1, 1024)] = 4
    prompt_len: Length = 256
    output_len: Length = 256
    reward_model: bool = False
    rollout: RolloutEngineSpec = RolloutEngineSpec()
    generation_gpus: Annotated[int, Range(0, 10_000_000)] = 0
    staleness: Annotated[int, Range(0, 64)] = 0
    iterations: Annotated[int, Range(1, 10_000)] = 4
    offload: bool = False
    offload_bandwidth: Bandwidth | None = None

    @model_validator(mode="after")
    def _offload(self) -> RlhfSpec:
        if self.offload != (self.offload_bandwidth is not None):
            raise ValueError("offload_bandwidth is what offload: true copies at (and only it)")
        if self.offload and self.generation_gpus:
            raise ValueError("offload applies to colocated phases (generation_gpus: 0)")
        if self.staleness and not self.generation_gpus:
            raise ValueError(
                "staleness ≥ 1 overlaps generation with training: it needs split pools (generation_gpus > 0)"
            )
        return self
