"""Autoregressive generation: prefill and decode steps, a paged KV cache, continuous
batching, request arrivals and serving latencies (docs/generation.md).

A scenario with a ``generation`` section is served by :func:`simulate_generation`: the
continuous-batching scheduler (:mod:`.scheduler`) runs above the engine, picks each step's
batch and has it priced (:mod:`.step_cost`), compiled (:mod:`clustersim.compilers.generation`)
and run; :mod:`.metrics` reports TTFT, TPOT, ITL, throughput and KV use.
"""

from .runner import simulate_generation

__all__ = ["simulate_generation"]
