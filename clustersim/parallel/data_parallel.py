"""The resolved ``parallel.data_parallel`` options and the bucket arithmetic they imply.

:class:`DataParallel` is what the pipeline compiler's data-parallel emitter
(:mod:`clustersim.compilers.pipeline.data_parallel`, which describes the traffic) and the
estimates read; the helpers cut a chunk's gradients and parameters into buckets and
pieces and split a data-parallel group for HSDP; :func:`grad_stats_group` is the group of a
step's scalar all-reduces (:mod:`clustersim.compilers.pipeline.step_work`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

from ..errors import ProgramError, ScenarioError
from ..workload.memory_model import DTYPE_BYTES
from .megatron_fsdp import MegatronFsdp
from .zero3 import Zero3Limits

#: Megatron-Core's default bucket with overlap_grad_reduce: max(40M, 1M·dp) parameters
#: (megatron/core/distributed/distributed_data_parallel_config.py, ``bucket_size``)
MCORE_BUCKET_PARAMS, MCORE_BUCKET_PARAMS_PER_DP = 40_000_000, 1_000_000


@dataclass(frozen=True)
class DataParallel:
    """The resolved ``parallel.data_parallel`` options (see :mod:`clustersim.scenario.schema`)."""

    overlap_grad_reduce: bool = False
    bucket_size: int | None = None
    first_bucket_size: int | None = None
    sharded: bool = False
    overlap_param_gather: bool = False
    fsdp: bool = False
    unit: int = 1
    reshard_after_forward: bool = True
    #: FSDP2's ``reshard_after_forward`` as an integer: the GPUs a unit's post-forward shard spans
    reshard_group: int | None = None
    prefetch: int = 1
    shard_group: int | None = None
    #: FSDP2's runtime (:mod:`clustersim.compilers.pipeline.fsdp2`) in place of idealised units
    fsdp2: bool = False
    #: Megatron-FSDP's prefetch budget and reduce queue (:mod:`.megatron_fsdp`) in place of ``prefetch``
    megatron_fsdp: MegatronFsdp | None = None
    #: bytes per element of the parameter all-gathers and of the gradient reductions
    gather_bytes: int = 2
    reduce_bytes: int = 4
    parameters: int = 1
    every_micro_batch: bool = False
    #: ZeRO-3 through DeepSpeed's parameter coordinator (:mod:`.zero3`); None: FSDP units
    zero3: Zero3Limits | None = None

    @classmethod
    def of(cls, parallel, dp: int, memory: float = float("inf")) -> DataParallel | None:
        """The options of a scenario's ``parallel`` section with ``dp`` replicas on GPUs of
        ``memory`` bytes; None when ``data_parallel`` is unset (today's single all-reduce)."""
        spec = parallel.data_parallel
        if spec is None:
            return None
        bucket = spec.bucket_size
        if bucket is None and spec.overlap_grad_reduce:
            params = max(MCORE_BUCKET_PARAMS, MCORE_BUCKET_PARAMS_PER_DP * dp)
            bucket = params * DTYPE_BYTES[spec.grad_reduce_dtype]
        return cls(
            overlap_grad_reduce=spec.overlap_grad_reduce,
            bucket_size=None if bucket is None else int(bucket),
            first_bucket_size=None if spec.first_bucket_size is None else int(spec.first_bucket_size),
            sharded=parallel.zero in (1, 2) or spec.distributed_optimizer,
            overlap_param_gather=spec.overlap_param_gather,
            fsdp=parallel.zero == 3,
            unit=spec.fsdp_unit,
            reshard_after_forward=bool(spec.reshard_after_forward),
            reshard_group=_reshard_group(spec),
            prefetch=spec.prefetch,
            shard_group=spec.shard_group_size,
            fsdp2=_fsdp2(spec, parallel.zero),
            megatron_fsdp=_megatron_fsdp(spec, parallel.zero),
            gather_bytes=DTYPE_BYTES[spec.param_gather_dtype],
            reduce_bytes=DTYPE_BYTES[spec.grad_reduce_dtype],
            parameters=spec.parameters_per_layer,
            every_micro_batch=spec.reduce_every_micro_batch and parallel.zero != 3,
            zero3=_zero3(spec, memory) if parallel.zero == 3 else None,
        )


def _fsdp2(spec, zero: int) -> bool:
    """Whether ``spec`` runs FSDP2's runtime (under ZeRO stage ``zero``); refuses what it
    does not run with."""
    if not spec.fsdp2:
        return False
    if zero != 3:
        raise ScenarioError("parallel.zero", zero, "parallel.data_parallel.fsdp2 shards fully: 3")
    if spec.deepspeed_zero3 is not None:
        raise ScenarioError(
            "parallel.data_parallel.fsdp2",
            True,
            "FSDP2 or DeepSpeed's coordinator, not both; accepted: false",
        )
    if spec.param_gather_dtype == "fp8":
        raise ScenarioError("parallel.data_parallel.param_gather_dtype", "fp8", "with fsdp2: bf16 or fp32")
    return True


def _reshard_group(spec) -> int | None:
    """``reshard_after_forward`` as a group size (None for true or false); FSDP2's only."""
    value = spec.reshard_after_forward
    if isinstance(value, bool):
        return None
    if not spec.fsdp2:
        raise ScenarioError(
            "parallel.data_parallel.reshard_after_forward",
            value,
            "an integer with fsdp2 only; accepted: true, false",
        )
    return value


def _megatron_fsdp(spec, zero: int) -> MegatronFsdp | None:
    """Megatron-FSDP's settings of ``spec`` (None when unset); refuses what it does not run with."""
    m = spec.megatron_fsdp
    if m is None:
        return None
    if zero != 3 or spec.fsdp2 or spec.deepspeed_zero3 is not None:
        raise ScenarioError(
            "parallel.data_parallel.megatron_fsdp",
            "set",
            "with parallel.zero 3, without fsdp2 or deepspeed_zero3; accepted: null",
        )
    return MegatronFsdp(m.communication_unit_size, m.double_buffer)


def _zero3(spec, memory: float) -> Zero3Limits | None:
    """The coordinator's limits of ``spec``'s ``deepspeed_zero3`` section on GPUs of
    ``memory`` bytes (None when unset)."""
    z = spec.deepspeed_zero3
    if z is None:
        return None
    return Zero3Limits(
        z.prefetch_bucket_size,
        z.max_live_parameters,
        z.max_reuse_distance,
        z.param_persistence_threshold,
        DTYPE_BYTES[spec.param_gather_dtype],
        DTYPE_BYTES[spec.grad_reduce_dtype],
        z.coordinator,
        memory,
    )


def buckets(layer_bytes: tuple[int, ...], size: int | None, first: int | None = None) -> list[list[int]]:
    """Layer indices per bucket: filled last layer first, a bucket closing once it holds
    ``size`` bytes (None: one bucket of all) — the first once it holds ``first`` bytes
    when given (PyTorch DDP's small first bucket)."""
    out, cur, held = [], [], 0
    for layer in reversed(range(len(layer_bytes))):
        cur.append(layer)
        held += layer_bytes[layer]
        cap = first if first is not None and not out else size
        if cap is not None and held >= cap:
            out.append(cur)
            cur, held = [], 0
    if cur:
        out.append(cur)
    return out


def parameter_pieces(layer_bytes, layers, parameters: int) -> list[int]:
    """The bytes of each separately gathered parameter of ``layers`` (model order):
    ``parameters`` equal pieces per layer (DeepSpeed ZeRO-3 gathers each weight matrix on
    its own), or with one, the unit's flat parameter (FSDP: one collective per unit)."""
    if parameters == 1:
        return [sum(int(layer_bytes[layer]) for layer in layers)]
    out = []
    for layer in layers:
        base, rem = divmod(int(layer_bytes[layer]), parameters)
        out += [base + (1 if i < rem else 0) for i in range(parameters)]
    return out


def fill_buckets(sizes: list[int], cap: int | None) -> list[int]:
    """Bytes per bucket of parameters ``sizes`` in the order they are reduced, by
    DeepSpeed's rule: a bucket holding something is reduced before a parameter that would
    take it past ``cap`` joins (stage3.py ``reduce_independent_p_g_buckets_and_remove_grads``);
    None: one bucket."""
    out = [0]
    for size in sizes:
        if cap is not None and out[-1] and out[-1] + size > cap:
            out.append(0)
        out[-1] += size
    return out


def hsdp_groups(group: tuple[int, ...], dev: int, g: int | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shard group, replicate group) of ``dev`` in DP ``group``: g consecutive members
    shard; members at the same place in each shard group replicate (g None: all shard)."""
    g = g or len(group)
    if len(group) % g:
        raise ProgramError(f"shard_group_size {g} does not divide the data-parallel group of {len(group)}")
    i = group.index(dev)
    start = i - i % g
    return group[start : start + g], group[i % g :: g]


#: bytes of the scalar each step's found-inf and norm all-reduces move (one fp32)
SCALAR_BYTES = 4


def grad_stats_group(plan, r: int, sharded: bool) -> tuple[int, ...]:
    """The devices the step's scalar all-reduces span: replica ``r``'s model-parallel group
    (every stage, every TP rank), or every device with a sharded (distributed) optimizer."""
    if sharded:
        return tuple(range(plan.num_devices))
    # each stage's tp ranks are consecutive devices: device(s, r, t) for t in 0 .. tp − 1
    return tuple(
        chain.from_iterable(range(plan.device(s, r), plan.device(s, r) + plan.tp) for s in range(plan.pp))
    )
