"""The paged KV cache: its capacity from the memory model, and blocks per sequence.

Every GPU holds the K and V of its own layers (a pipeline stage's) and its own heads
(``kv_heads / tp``) for every cached token, in blocks of ``block_size`` tokens (vLLM's
PagedAttention). A sequence holds ⌈tokens / block_size⌉ blocks. The cache gets what vLLM's
``gpu_memory_utilization`` leaves: ``kv_memory_fraction`` × the GPU's memory, less the
stage's weights and the runtime's reserve (CUDA context, NCCL; :attr:`clustersim.resolve.Job.runtime_reserve`);
the fullest stage decides the block count (every stage holds every sequence's blocks).
The working buffers of the forward itself are not subtracted (vLLM's profiling run measures
them; here they are not modelled), so the capacity errs high by them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ScenarioError
from ..hardware.node_groups import device_specs
from ..workload.memory_model import ELEMENT_BYTES
from ..workload.stage_cost import even_partition
from .step_cost import kv_bytes_per_token

GiB = 2**30


@dataclass(frozen=True)
class KVCache:
    """``blocks`` of ``block_size`` tokens, each ``block_bytes`` on the fullest GPU;
    ``stage_bytes``: a block's bytes on a GPU of each pipeline stage."""

    blocks: int
    block_size: int
    block_bytes: float
    stage_bytes: tuple[float, ...] = ()

    def blocks_for(self, tokens: int) -> int:
        """Blocks a sequence of ``tokens`` cached tokens holds."""
        return -(-tokens // self.block_size)


def kv_cache_of(job, cfg, gen) -> KVCache:
    """The KV cache of ``job`` (its transformer ``cfg``, ``generation`` section ``gen``)."""
    par = job.parallel
    e = ELEMENT_BYTES[job.training.precision]
    partition = list(job.partition) if job.partition else even_partition(cfg.layers, par.pp)
    per_token = [n * kv_bytes_per_token(cfg, par.tp, e) for n in partition]
    block_bytes = max(per_token) * gen.block_size
    stage_bytes = tuple(tok * gen.block_size for tok in per_token)
    if gen.kv_blocks is not None:
        return KVCache(gen.kv_blocks, gen.block_size, block_bytes, stage_bytes)
    memory = min(g.memory_bytes for g in device_specs(job.cluster)[: job.num_gpus])
    reserve = job.runtime_reserve
    blocks = min(
        math.floor((gen.kv_memory_fraction * memory - cost.weight_bytes - reserve) / (tok * gen.block_size))
        for cost, tok in zip(job.chunk_costs, per_token)
    )
    if blocks < 1:
        heaviest = max(cost.weight_bytes for cost in job.chunk_costs)
        raise ScenarioError(
            "generation.kv_memory_fraction",
            gen.kv_memory_fraction,
            f"leaves no KV cache block: {gen.kv_memory_fraction} × {memory / GiB:.1f} GiB less the weights "
            f"({heaviest / GiB:.1f} GiB) and the runtime reserve ({reserve / GiB:.1f} GiB) is under one "
            f"block ({block_bytes / GiB:.4f} GiB); raise it, or spread the model over more GPUs (tp, pp)",
        )
    return KVCache(blocks, gen.block_size, block_bytes, stage_bytes)
