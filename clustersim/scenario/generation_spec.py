"""The ``generation`` section: autoregressive token generation served with continuous
batching (docs/generation.md). Present, it turns a ``training.mode: inference`` scenario's
one forward per request into a prompt's prefill and its output tokens' decode steps."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, model_validator

from .fields import Bandwidth, Range, Time, _Spec

#: the longest prompt or output a length may take (tokens)
MAX_TOKENS = 10_000_000


def _shorthand(value):
    """A bare integer is a fixed length."""
    return (
        {"dist": "fixed", "value": value} if isinstance(value, int) and not isinstance(value, bool) else value
    )


class LengthSpec(_Spec):
    """A distribution of token counts: ``fixed`` (``value``), ``uniform`` integers in
    [``low``, ``high``], or ``lognormal`` of median ``median`` and shape ``sigma``, rounded
    and clipped to [``low``, ``high``]. A bare integer is ``fixed``."""

    dist: Literal["fixed", "uniform", "lognormal"] = "fixed"
    value: Annotated[int | None, Range(0, MAX_TOKENS)] = None
    low: Annotated[int | None, Range(0, MAX_TOKENS)] = None
    high: Annotated[int | None, Range(0, MAX_TOKENS)] = None
    median: Annotated[float | None, Range(0, MAX_TOKENS, open_lo=True)] = None
    sigma: Annotated[float | None, Range(0, 10)] = None

    @model_validator(mode="after")
    def _parameters(self) -> LengthSpec:
        want = {
            "fixed": ("value",),
            "uniform": ("low", "high"),
            "lognormal": ("median", "sigma", "low", "high"),
        }
        need = want[self.dist]
        given = [f for f in ("value", "low", "high", "median", "sigma") if getattr(self, f) is not None]
        if sorted(given) != sorted(need):
            raise ValueError(
                f"a {self.dist} length takes {', '.join(need)} (given: {', '.join(given) or 'none'})"
            )
        if self.low is not None and self.low > self.high:
            raise ValueError(f"low ({self.low}) must be at most high ({self.high})")
        return self


Length = Annotated[LengthSpec, BeforeValidator(_shorthand)]


class RequestArrivalSpec(_Spec):
    """When generation requests arrive: ``constant`` (request i at i × ``interval``),
    ``poisson`` (exponential gaps of mean 1 / ``rate`` requests per second, from
    ``simulation.seed``), or ``all_at_once`` (every request at t = 0, an offline batch)."""

    process: Literal["all_at_once", "constant", "poisson"] = "all_at_once"
    interval: Time | None = None
    rate: Annotated[float | None, Range(0, 1e9, open_lo=True)] = None

    @model_validator(mode="after")
    def _one_parameter(self) -> RequestArrivalSpec:
        want = {"constant": ["interval"], "poisson": ["rate"], "all_at_once": []}[self.process]
        given = [f for f in ("interval", "rate") if getattr(self, f) is not None]
        if given != want:
            raise ValueError(f"a {self.process} arrival process takes {' and '.join(want) or 'no parameter'}")
        return self


class GenerationSpec(_Spec):
    """Requests (``requests`` of ``prompt_len`` and ``output_len`` tokens arriving as
    ``arrival`` says, or read from ``trace``: a CSV of ``arrival_s,prompt_len,output_len``)
    served by a continuous-batching scheduler above the engine (the defaults: vLLM's OpenAI
    server's on A100, ``vllm/engine/arg_utils.py`` ``get_batch_defaults``):
    at most ``max_num_seqs`` sequences and ``max_num_batched_tokens`` new tokens a step,
    prompts split across steps with ``chunked_prefill``; a paged KV cache of ``block_size``
    tokens per block in ``kv_memory_fraction`` of the GPU's memory minus the weights and the
    runtime's reserve (``kv_blocks`` states the block count instead); when a running
    sequence needs a block and none is free, ``preemption`` ``recompute`` (drop its blocks,
    prefill again) or ``swap`` (copy its blocks to the host at ``swap_bandwidth`` and back),
    or ``wait``: a request is admitted only once blocks for its prompt and all its output
    are free, so nothing is ever preempted. ``disaggregated``: prefill and decode on separate
    GPU pools — the first tp × pp GPUs prefill, the next tp × pp decode (``parallel.dp: 2``),
    each prompt's KV cache sent between them over the fabric. Otherwise ``parallel.dp``
    replicas serve, each on tp × pp GPUs with its own scheduler and KV cache, the requests
    handed to them by ``dispatch``: ``round_robin`` (request i to replica i mod dp) or
    ``least_loaded`` (to the replica with the fewest requests outstanding at its arrival).
    ``host_overhead``: every step also pays vLLM's CPU time per step (scheduling, input
    preparation, sampler, output processing) as Vidur profiled it on A100 (off by default:
    later vLLM engines overlap it)."""

    requests: Annotated[int, Range(1, 1_000_000)] = 1
    prompt_len: Length | None = None
    output_len: Length | None = None
    arrival: RequestArrivalSpec = RequestArrivalSpec()
    trace: str | None = None
    max_num_seqs: Annotated[int, Range(1, 1_000_000)] = 256
    max_num_batched_tokens: Annotated[int, Range(1, MAX_TOKENS)] = 2048
    chunked_prefill: bool = True
    block_size: Annotated[int, Range(1, 1_000_000)] = 16
    kv_memory_fraction: Annotated[float, Range(0, 1, open_lo=True)] = 0.9
    kv_blocks: Annotated[int | None, Range(1, 1_000_000_000)] = None
    preemption: Literal["recompute", "swap", "wait"] = "recompute"
    swap_bandwidth: Bandwidth | None = None
    disaggregated: bool = False
    dispatch: Literal["round_robin", "least_loaded"] = "round_robin"
    host_overhead: bool = False

    @model_validator(mode="after")
    def _requests(self) -> GenerationSpec:
        if self.trace is None and (self.prompt_len is None or self.output_len is None):
            raise ValueError("give prompt_len and output_len, or a trace file")
        if self.trace is not None and (self.prompt_len or self.output_len):
            raise ValueError(
                "a trace file gives each request's lengths: leave prompt_len and output_len unset"
            )
        if (self.preemption == "swap") != (self.swap_bandwidth is not None):
            raise ValueError("swap_bandwidth is what preemption: swap copies at (and only it)")
        return self
