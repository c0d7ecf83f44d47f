"""The typed scenario schema (pydantic v2): cluster, model, training, parallel, simulation.

Quantities accept base-unit numbers or unit strings (see :mod:`clustersim.units`) and
are stored in base units (s, bytes, bytes/s). Every model forbids unknown fields, so a
typo is an error, not a silently ignored setting. Cross-field rules (``tp × pp × dp`` =
GPUs, divisibility of layers and batch) live in :mod:`clustersim.scenario.rules`.

The cluster and model sections live in :mod:`.cluster_spec` and :mod:`.model_spec`;
quantity types and the base model in :mod:`.fields`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..collectives import ALGORITHMS, KINDS
from ..collectives.registry import SELECTORS
from ..network.factory import network_model_names
from ..schedules import SCHEDULES
from .cluster_spec import (  # noqa: F401  (re-exported: the schema's public names)
    ClusterSpec,
    IntraNodeSpec,
    LinkDegradationSpec,
    NicSpec,
    NodeGroupSpec,
    NoiseSpec,
    PcieSpec,
    StragglerSpec,
)
from .fields import Bandwidth, Bytes, Range, Time, _Spec, known
from .generation_spec import GenerationSpec
from .model_spec import CNNModel, ModelSpec, SyntheticModel, TraceModel, TransformerModel  # noqa: F401
from .rlhf_spec import RlhfSpec


class ArrivalSpec(_Spec):
    """When inference requests arrive (``training.mode: inference``): ``constant`` — request
    i at i × ``interval``; ``poisson`` — request 0 at 0, then exponential gaps of mean
    1 / ``rate`` (requests per second) drawn from ``simulation.seed``."""

    process: Literal["constant", "poisson"] = "constant"
    interval: Time | None = None
    rate: Annotated[float | None, Range(0, 1e9, open_lo=True)] = None

    @model_validator(mode="after")
    def _one_parameter(self) -> ArrivalSpec:
        want, other = ("interval", "rate") if self.process == "constant" else ("rate", "interval")
        if getattr(self, want) is None or getattr(self, other) is not None:
            raise ValueError(f"a {self.process} arrival process takes {want} (and not {other})")
        return self


class PrecisionAwareOptimizerSpec(_Spec):
    """Megatron-Core's precision-aware optimizer (``--use-precision-aware-optimizer``;
    clustersim.workload.precision_aware): Adam's moments in ``exp_avg_dtype`` /
    ``exp_avg_sq_dtype``, and with ``store_param_remainders`` the fp32 master weight held
    as its 16-bit remainder beside the BF16 parameter."""

    exp_avg_dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
    exp_avg_sq_dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
    store_param_remainders: bool = True


class FixedCostsSpec(_Spec):
    """The fixed costs of a training step that are not FLOPs or bytes of the model
    (docs/models.md, "Fixed costs"), each an op of the Program: ``kernel_launch`` per kernel
    (None: the GPU's calibrated launch, ``launch_s`` of clustersim.workload.cost_model; 0:
    none) and the GPU's wait for the host that issues each kernel at ``host_dispatch``,
    ``microbatch_overhead`` per pass of a micro-batch on a model chunk (the
    framework's host-side gap), and the per-step work before the optimizer — the fp16 loss
    scale's unscale and inf check, the gradient-clipping norm, the tied-embedding gradient
    all-reduce between the first and the last stage — and ``pipeline_gather``, the TP
    all-gather of a pipeline boundary tensor sent in 1/tp pieces — each on unless turned
    off; ``grad_accumulation``, Megatron-LM 2021's unfused add of every weight gradient
    into its fp32 ``main_grad`` after each micro-batch's backward (transformers;
    clustersim.workload.grad_accumulation). Real models only: a synthetic model's times are
    the whole pass."""

    kernel_launch: Annotated[Time | None, Range(0, 0.01)] = None
    #: host seconds per kernel issued (None: the measured dispatch of the framework's
    #: stack, clustersim.workload.host; 0: the host never holds the GPU back)
    host_dispatch: Annotated[Time | None, Range(0, 0.01)] = None
    microbatch_overhead: Annotated[Time, Range(0, 1)] = 50e-6
    loss_scale_check: bool = True
    grad_clip: bool = True
    tied_embedding_allreduce: bool = True
    pipeline_gather: bool = True
    grad_accumulation: bool = True
    #: the small kernels eager frameworks issue beyond the priced ones (bias-free glue:
    #: norm reductions, gradient sums, split/cat, attention pre/post passes;
    #: clustersim.workload.host_kernels), each a launch, a host dispatch and its bytes
    small_kernels: bool = True


class TrainingSpec(_Spec):
    """Batch sizes (samples; m = global / (micro × dp)), precision, recompute, optimizer.

    ``mode: inference`` runs forward passes only: every micro-batch is one request
    (global_batch / micro_batch requests), arriving as ``arrival`` says (default: all at
    t = 0). See ``docs/inference.md``."""

    global_batch: Annotated[int, Range(1, 100_000_000)]
    micro_batch: Annotated[int, Range(1, 1_000_000)] = 1
    #: ``fp8``: Transformer-Engine FP8 linears (BF16 weights and activations otherwise;
    #: clustersim.workload.fp8), on GPUs with FP8 tensor cores only
    precision: Literal["bf16", "fp16", "fp32", "fp8"] = "bf16"
    #: Transformer Engine's recipe under ``precision: fp8`` (clustersim.workload.fp8_recipes):
    #: delayed, current (per-tensor), block (1×128 / 128×128), mxfp8 or nvfp4 (Blackwell);
    #: unset: the framework profile's on that GPU
    fp8_recipe: Literal["delayed", "current", "block", "mxfp8", "nvfp4"] | None = None
    recompute: Literal["none", "selective", "full"] = "none"
    #: with ``recompute: selective`` under a Megatron framework, the modules recomputed
    #: (Megatron-Core's ``recompute_modules``; None: its default ``[core_attn]``;
    #: clustersim.workload.selective_ac)
    recompute_modules: list[Literal["core_attn", "mla_up_proj", "moe_act", "layernorm"]] | None = Field(
        default=None, min_length=1
    )
    optimizer: Literal["adam", "sgd"] = "adam"
    #: Megatron-Core's precision-aware optimizer (None: off, its default)
    precision_aware_optimizer: PrecisionAwareOptimizerSpec | None = None
    mode: Literal["train", "inference"] = "train"
    arrival: ArrivalSpec | None = None
    #: the stack whose defaults fill what the scenario leaves unstated
    #: (clustersim.scenario.frameworks); ``megatron_2021`` fills nothing
    framework: Literal["megatron_2021", "megatron_core", "deepspeed", "fsdp2"] = "megatron_2021"
    #: whose memory-bound kernels (norms, activation, residual, RoPE, cross-entropy) run,
    #: fused or unfused (clustersim.workload.kernel_impls); None: ``framework``'s own
    memory_kernels: Literal["megatron_2021", "megatron_core", "deepspeed", "fsdp2"] | None = None
    fixed_costs: FixedCostsSpec = FixedCostsSpec()
    #: kernels replayed from CUDA graphs: no host dispatch per kernel, the GPU launch
    #: latency stays (clustersim.workload.host); no framework profile turns it on
    cuda_graphs: bool = False


class CompressionSpec(_Spec):
    """Compression of gradients (for the data-parallel all-reduce) or of pipeline
    activations: bytes shrink ``ratio`` times; compressing and decompressing cost
    ``time_per_gib`` of GPU time per GiB of uncompressed data (half before the transfer,
    half after). ``links``: where — ``all``, ``inter_site`` or ``inter_node`` (only what
    crosses sites / servers; clustersim.parallel.compression and .gradient_sync)."""

    ratio: Annotated[float, Range(1, 1_000_000)]
    time_per_gib: Time = 0.0
    links: Literal["all", "inter_site", "inter_node"] = "all"


def _dp_value(dp: object) -> int | str:
    if dp == "auto" or (isinstance(dp, int) and not isinstance(dp, bool) and dp >= 1):
        return dp
    raise ValueError("expected a whole number ≥ 1 or 'auto' (GPUs / (tp × pp))")


def _words_or_counts(words: tuple, expected: str):
    """A validator accepting one of ``words`` or a non-empty list of whole numbers ≥ 1."""

    def check(value: object):
        if value in words or (
            isinstance(value, list)
            and value
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in value)
        ):
            return value
        raise ValueError(f"expected {expected}")

    return BeforeValidator(check)


#: the forms ``parallel.partition`` accepts, as its messages name them
PARTITION_FORMS = (
    "even, balanced, pipedream, a list of layers per model chunk (each ≥ 1), or Megatron-Core's "
    "uneven split {first_stage_layers, last_stage_layers}, {account_for_embedding, account_for_loss} "
    "or {layout}"
)
_partition_words = _words_or_counts(("even", "balanced", "pipedream"), PARTITION_FORMS)


def _partition_value(value: object) -> object:
    if not isinstance(value, dict):
        return _partition_words.func(value)
    unknown = sorted(set(value) - set(MegatronSplitSpec.model_fields), key=str)
    if unknown:  # (a union's member is not where the loader looks up a section's fields)
        accepted = ", ".join(MegatronSplitSpec.model_fields)
        raise ValueError(
            f"unknown field {unknown[0]!r} of Megatron-Core's uneven split; accepted: {accepted}"
        )
    return value


def _partition_kind(value: object) -> str:
    """The branch of ``parallel.partition`` a value is checked against (tags the loader
    drops from error locations)."""
    if isinstance(value, (dict, MegatronSplitSpec)):
        return "literal['megatron']"
    return "literal['list']" if isinstance(value, list) else "str"


class MegatronSplitSpec(_Spec):
    """Megatron-Core's uneven pipeline split (:mod:`clustersim.workload.megatron_split`):
    ``first_stage_layers`` / ``last_stage_layers`` are ``--decoder-first-pipeline-num-layers`` /
    ``--decoder-last-pipeline-num-layers``; ``account_for_embedding`` / ``account_for_loss``
    are ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``
    (the embedding or loss counted as one layer); ``layout`` is
    ``--pipeline-model-parallel-layout`` (e.g. ``Et|(tt|)*29,t|tmL``)."""

    first_stage_layers: Annotated[int | None, Range(1, 100_000)] = None
    last_stage_layers: Annotated[int | None, Range(1, 100_000)] = None
    account_for_embedding: bool = False
    account_for_loss: bool = False
    layout: str | None = None


_dp_split_value = _words_or_counts(
    ("even", "speed"), "even, speed or a list of micro-batches per data-parallel replica (each ≥ 1)"
)
_replicas_value = _words_or_counts((None,), "a list of GPUs per pipeline stage (each ≥ 1), e.g. [15, 1]")


class ParameterServerSpec(_Spec):
    """Parameter-server training (docs/parameter_server.md): every GPU is a worker; it
    pulls each tensor from its server(s) before using it and pushes its gradient as soon
    as the backward produced it. ``mode``: ``sync`` (the server aggregates every worker's
    push, then updates), ``async`` (each push applied on arrival; ``staleness`` s bounds
    how many iterations a worker may run ahead of the slowest, unset = unbounded) or
    ``hybrid`` (async for ``sync_after`` iterations, then sync). ``servers``: topology
    nodes holding the parameters (the star's ``server`` by default); ``partition``
    shards every tensor over all servers, else tensors go round robin; ``per_layer``:
    one tensor per layer (push/pull overlap compute), else the whole model is one;
    ``buckets``: layers per tensor instead (DynaComm-style transmission segments)."""

    mode: Literal["sync", "async", "hybrid"] = "sync"
    staleness: Annotated[int | None, Range(0, 1_000_000)] = None
    sync_after: Annotated[int | None, Range(1, 1_000_000)] = None
    servers: list[str] = Field(default_factory=lambda: ["server"], min_length=1)
    partition: bool = False
    per_layer: bool = True
    buckets: list[Annotated[int, Field(ge=1)]] | None = Field(default=None, min_length=1)


class DeepSpeedZero3Spec(_Spec):
    """ZeRO-3 as DeepSpeed's parameter coordinator runs it (v0.6–v0.9,
    ``partitioned_param_coordinator.py``; :mod:`clustersim.parallel.zero3`): each submodule's
    parameters all-gathered before it runs, the next ones in the first step's trace
    prefetched up to ``min(max_live_parameters − available, prefetch_bucket_size)``
    elements, parameters under ``param_persistence_threshold`` elements kept whole, the
    gradients reduce-scattered in buckets of ``parallel.data_parallel.bucket_size``.
    The fields are DeepSpeed's ``stage3_*`` settings, in elements, with its defaults.
    ``coordinator: v0.3``: DeepSpeed v0.3–v0.5's (2021), which synchronises the device at
    each fetch that gathers and gathers parameter by parameter."""

    coordinator: Literal["v0.6", "v0.3"] = "v0.6"

    prefetch_bucket_size: Annotated[int, Range(0, 10**15)] = 50_000_000
    max_live_parameters: Annotated[int, Range(0, 10**15)] = 1_000_000_000
    max_reuse_distance: Annotated[int, Range(0, 10**15)] = 1_000_000_000
    param_persistence_threshold: Annotated[int, Range(0, 10**15)] = 100_000


class MegatronFsdpSpec(_Spec):
    """ZeRO-3 as Megatron-FSDP runs it (``--use-megatron-fsdp``, ``optim_grads_params``;
    :mod:`clustersim.parallel.megatron_fsdp`): each unit's bucket all-gathered with the next
    ones while fewer than ``communication_unit_size`` // 2 elements are taken, the compute
    waiting for queued reduce-scatters beyond ``communication_unit_size`` elements.
    ``communication_unit_size``: ``--suggested-communication-unit-size`` (unset: Megatron-FSDP's
    max(1e9, 2 × the mean unit's elements)); ``double_buffer``: ``--fsdp-double-buffer``
    (at most the next unit prefetched)."""

    communication_unit_size: Annotated[int | None, Range(1, 10**15)] = None
    double_buffer: bool = False


class DataParallelSpec(_Spec):
    """How data-parallel gradients and parameters move, under the frameworks' names
    (:mod:`clustersim.compilers.pipeline.data_parallel`). Absent: one all-reduce per stage after its
    last backward, ZeRO changing memory only (the 2021 Megatron-LM model).

    ``overlap_grad_reduce``: each bucket's reduction starts when the last backward that
    produced its gradients ends (Megatron-Core's flag; PyTorch DDP always does). Buckets
    fill in reverse layer order up to ``bucket_size`` bytes (unset: one bucket without
    overlap, Megatron-Core's max(40M, 1M·dp) parameters × ``grad_reduce_dtype`` with it);
    ``first_bucket_size`` caps the first bucket (PyTorch DDP: 1 MiB, then ``bucket_cap_mb``).
    ``distributed_optimizer`` (Megatron's ``use_distributed_optimizer``) or ``parallel.zero``
    1/2: reduce-scatter buckets, the optimizer step on the shard, then an all-gather of the
    parameters in ``param_gather_dtype`` — overlapped with the next forward, each layer
    waiting for its bucket, with ``overlap_param_gather``. ``parallel.zero: 3`` (FSDP):
    per unit of ``fsdp_unit`` layers, an all-gather before each forward and (with
    ``reshard_after_forward``) again before each backward, issued ``prefetch`` units ahead,
    and a reduce-scatter after each unit's backward; ``shard_group_size`` (HSDP) shards
    within groups of that many replicas and all-reduces the shards across groups.
    ``parameters_per_layer`` (ZeRO-3): each layer's weights are that many parameters of equal
    bytes, each all-gathered on its own (DeepSpeed fetches per parameter), their gradients
    reduce-scattered in buckets of ``bucket_size`` filled by DeepSpeed's rule.
    ``reduce_every_micro_batch`` (ZeRO-1/2): the buckets reduce after every micro-batch's
    backward, not only the last one's (DeepSpeed ZeRO-2's partitioned gradients)."""

    overlap_grad_reduce: bool = False
    bucket_size: Annotated[Bytes | None, Range(1, 2**50)] = None
    first_bucket_size: Annotated[Bytes | None, Range(1, 2**50)] = None
    distributed_optimizer: bool = False
    overlap_param_gather: bool = False
    #: each profile's default and its source: clustersim.scenario.grad_reduce
    grad_reduce_dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
    #: ``fp8``: the FP8 linears' weights are FP8 parameters (Megatron-Core's
    #: ``--fp8-param-gather``; training.precision fp8 only; clustersim.workload.fp8)
    param_gather_dtype: Literal["bf16", "fp32", "fp8"] = "bf16"
    fsdp_unit: Annotated[int, Range(1, 100_000)] = 1
    #: an integer g (FSDP2 only, its ``reshard_after_forward: int``): after forward keep a
    #: 1/g shard and gather it again over g consecutive GPUs of the shard group
    reshard_after_forward: bool | Annotated[int, Range(1, 100_000)] = True
    prefetch: Annotated[int, Range(0, 1_000)] = 1
    shard_group_size: Annotated[int | None, Range(1, 100_000)] = None
    #: ZeRO-3 as PyTorch FSDP2's ``fully_shard`` runs it, torchtitan's wrapping (the ``fsdp2``
    #: profile fills it): the copy-in/copy-out kernels, its streams' waits, the last unit kept
    #: after forward (clustersim.compilers.pipeline.fsdp2); false: idealised FSDP units
    fsdp2: bool = False
    #: ZeRO-3 as Megatron-FSDP runs it (the ``megatron_core`` profile fills it)
    megatron_fsdp: MegatronFsdpSpec | None = None
    parameters_per_layer: Annotated[int, Range(1, 10_000)] = 1
    reduce_every_micro_batch: bool = False
    #: ZeRO-3 (``parallel.zero: 3``) through DeepSpeed's parameter coordinator instead of
    #: FSDP units (the ``deepspeed`` profile fills it)
    deepspeed_zero3: DeepSpeedZero3Spec | None = None


class ParallelSpec(_Spec):
    """The parallel plan: degrees of tensor, pipeline and data parallelism, and schedule."""

    tp: Annotated[int, Range(1, 100_000)] = 1
    pp: Annotated[int, Range(1, 100_000)] = 1
    dp: Annotated[int | str, BeforeValidator(_dp_value)] = "auto"
    #: GPUs the job runs on: the cluster's first ``gpus`` in device order (unset: all of
    #: them); the others idle, their links still carry nothing of this job
    gpus: Annotated[int | None, Range(1, 10_000_000)] = None
    schedule: str = "1f1b"
    #: model chunks per stage; unset: the schedule's declared chunk count (1 where it takes any)
    virtual_stages: Annotated[int, Range(1, 10_000)] = 1
    #: layers per model chunk: even | balanced (by compute) | pipedream (planner) | [l0, l1, ...]
    #: | Megatron-Core's uneven split (:class:`MegatronSplitSpec`)
    partition: Annotated[
        Annotated[str, Tag("str")]
        | Annotated[list[int], Tag("literal['list']")]
        | Annotated[MegatronSplitSpec, Tag("literal['megatron']")],
        Discriminator(_partition_kind),
        BeforeValidator(_partition_value),
    ] = "even"
    #: micro-batches per data-parallel replica: even | speed (by each replica's GPUs) | [m0, m1, ...]
    dp_split: Annotated[str | list[int], _dp_split_value] = "even"
    #: GPUs per pipeline stage, PipeDream-style (e.g. [15, 1]); stage s's replicas take
    #: micro-batches round robin (clustersim.compilers.replicated). Needs tp = 1, dp = 1/auto
    stage_replicas: Annotated[list[int] | None, _replicas_value] = None
    sequence_parallel: bool = False
    #: Megatron-Core ``--tp-comm-overlap`` (Transformer Engine userbuffers): with sequence
    #: parallelism, each TP all-gather / reduce-scatter runs in chunks pipelined with the
    #: GEMM it feeds (clustersim.workload.tp_overlap, docs/overlap.md)
    tp_comm_overlap: bool = False
    #: ``num_splits`` of TE's ``pipeline`` method (the reduce-scatters after the attention
    #: projection and FC2), set per GEMM in ``--tp-comm-overlap-cfg``; TE's default 4
    tp_comm_overlap_num_splits: Annotated[int, Range(1, 1024)] = 4
    #: context parallelism: each sequence split over ``cp`` GPUs (docs/context_parallel.md);
    #: world = tp × cp × pp × dp
    cp: Annotated[int, Range(1, 100_000)] = 1
    #: how attention crosses the CP group: ``p2p`` ring attention (K/V blocks around the ring)
    #: or ``a2a`` Ulysses (all-to-alls over heads) — Megatron-Core's ``--cp-comm-type`` names
    cp_comm_type: Literal["p2p", "a2a"] = "p2p"
    #: expert parallelism: each MoE layer's routed experts split over ep GPUs carved out of
    #: the data-parallel group (Megatron-Core ``--expert-model-parallel-size``; docs/moe.md)
    ep: Annotated[int, Range(1, 100_000)] = 1
    #: expert-tensor-parallel size: each expert's FFN split over etp GPUs (unset: tp, as
    #: Megatron-Core's ``--expert-tensor-parallel-size``)
    etp: Annotated[int | None, Range(1, 100_000)] = None
    #: MoE token dispatcher with ep > 1 or etp ≠ tp (Megatron-Core ``--moe-token-dispatcher-type``)
    #: (``flex``: DeepEP's node-deduplicated dispatch, ``--moe-enable-deepep``; workload/deepep.py)
    moe_token_dispatcher: Literal["alltoall", "allgather", "flex"] = "alltoall"
    #: run the shared expert beside the dispatch/combine all-to-alls (``--moe-shared-expert-overlap``)
    moe_shared_expert_overlap: bool = False
    #: Transformer Engine's fused permute / unpermute / sort-chunks kernels
    #: (``--moe-permute-fusion``; Megatron-Core's default off; workload/moe_kernels.py)
    moe_permute_fusion: bool = False
    #: the routed experts' module: ``sequential`` (SequentialMLP, Megatron-Core's default),
    #: ``te_grouped`` (``--moe-grouped-gemm``: TEGroupedMLP) or ``grouped`` (one grouped
    #: kernel: ``--moe-use-legacy-grouped-gemm``); workload/moe_experts.py
    moe_expert_mlp: Literal["sequential", "te_grouped", "grouped"] = "sequential"
    #: the host waits for the device before each MoE layer's dispatch (dropless Megatron-Core:
    #: the split sizes' ``.cpu()``); workload/host.py
    moe_host_sync: bool = False
    zero: int = Field(default=0, ge=0, le=3)
    #: bucketed, overlapped and sharded data-parallel communication (unset: the 2021 model)
    data_parallel: DataParallelSpec | None = None
    #: compress data-parallel gradients before their all-reduce (e.g. over WAN links)
    gradient_compression: CompressionSpec | None = None
    #: train with parameter server(s) instead of all-reduce (clustersim.compilers.parameter_server)
    parameter_server: ParameterServerSpec | None = None
    #: compress pipeline activations and their gradients on the chosen links' sends
    activation_compression: CompressionSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _chunks_of_schedule(cls, raw: Any) -> Any:
        if not isinstance(raw, dict) or "virtual_stages" in raw:
            return raw
        name = raw.get("schedule", cls.model_fields["schedule"].default)
        schedule = SCHEDULES.get(name) if isinstance(name, str) else None  # a bad name: field check
        chunks = None if schedule is None else schedule.chunks
        return raw if chunks is None else {**raw, "virtual_stages": chunks}

    @field_validator("schedule")
    @classmethod
    def _known_schedule(cls, name: str) -> str:
        return known(name, SCHEDULES, "schedule")


#: ``simulation.fidelity`` → the settings it stands for (docs/fidelity.md); a field the
#: scenario states itself wins over its preset. ``exact`` is today's defaults.
FIDELITY_PRESETS: dict[str, dict[str, str | bool]] = {
    "exact": {"network": "packet", "collective_model": "fabric", "granularity": "layer", "fold": "auto"},
    "balanced": {
        "network": "flow",
        "collective_model": "fabric",
        "granularity": "stage",
        "fold": "auto",
        # folded twins' traffic as one weighted flow per orbit: the same max-min rates
        # (docs/fidelity.md), k times fewer flows (issue 38 item 3)
        "fold_contention": True,
    },
    "fast": {
        "network": "analytical",
        "collective_model": "analytical",
        "granularity": "stage",
        "fold": "auto",
    },
}


class CongestionSpec(_Spec):
    """``simulation.congestion`` (docs/network.md): ``ecn_threshold`` — mark a chunk that
    finds this many bytes queued at a link; ``dcqcn`` — senders cut and recover their rate
    on the marks (needs ``ecn_threshold``); ``pfc_xoff``/``pfc_xon`` — pause the upstream
    link while a queue holds xoff bytes, until it drains to xon; ``dcqcn_byte_counter`` —
    DCQCN's byte counter B (the paper's 10 MB), which adds rate increases per B bytes sent
    and hyper increase (unset: timer-driven recovery only)."""

    ecn_threshold: Bytes | None = None
    dcqcn: bool = False
    pfc_xoff: Bytes | None = None
    pfc_xon: Bytes | None = None
    dcqcn_byte_counter: Bytes | None = None


class SimulationSpec(_Spec):
    """How to simulate: iterations, network model, packet chunk size, seed."""

    #: ``exact`` | ``balanced`` | ``fast``: network, collective model, granularity and
    #: folding together (:data:`FIDELITY_PRESETS`); the fields stated beside it win
    fidelity: Literal["exact", "balanced", "fast"] = "exact"
    #: refuse a run estimated past this many simulated events or Program ops before compiling
    #: it (clustersim.resolve.estimate): a few minutes' work on a 2-core machine
    max_events: Annotated[int, Range(1, 10**12)] = 200_000_000
    max_ops: Annotated[int, Range(1, 10**10)] = 10_000_000
    iterations: Annotated[int, Range(1, 100_000)] = 1
    network: str = "packet"
    #: bytes per packet-model chunk (default 1 MiB); at least 4 KiB, so a message is never
    #: millions of events
    chunk_size: Annotated[Bytes | None, Range(4096, 2**40)] = None
    #: simulate one GPU per stage and mirror it to its TP/DP twins (clustersim.resolve.fold);
    #: ``auto`` folds large uniform jobs
    fold: bool | Literal["auto"] = "auto"
    #: a folded run on the ``flow`` network: each transfer and its folded twins' shadows as
    #: one flow with a multiplicity per link, where the twins are symmetric
    #: (clustersim.network.orbits); false: every shadow is a flow of its own
    fold_contention: bool = False
    #: cap on chunks per message (packet model): bigger messages use bigger chunks — fewer
    #: events, up to (hops − 1)/max_chunks of a message's time in extra pipelining delay
    max_chunks: Annotated[int | None, Range(1, 1_000_000)] = None
    seed: Annotated[int, Range(0, 2**64 - 1)] = 0
    #: random per-op compute time factors (mean 1), drawn from ``seed``: stragglers by chance
    compute_noise: NoiseSpec | None = None
    #: the packet model's RoCE congestion control: ECN marking, DCQCN, PFC
    #: (clustersim.network.congestion); unset: none
    congestion: CongestionSpec | None = None
    #: real models: ``layer`` = segments per layer (TP collectives as run); ``stage`` = one
    #: compute segment + one summed collective per pass (fewer events, for huge runs)
    granularity: Literal["layer", "stage"] = "layer"
    #: collective kind → algorithm (``auto`` = the fastest by the α-β model; ``nccl`` = NCCL's
    #: tuner's pick among Ring, Tree, NVLS, PAT: clustersim.collectives.nccl_tuner)
    collectives: dict[str, str] = Field(default_factory=dict)
    #: ``fabric``: collectives as point-to-point steps on the network model (contention is
    #: real); ``analytical``: the algorithm's α-β time on the group's links, one event each
    collective_model: Literal["fabric", "analytical"] = "fabric"
    #: ``des``: the SimPy engine; ``dag``: the DAG evaluator, exact where the run is
    #: contention-free (clustersim.engine.dag); ``auto``: ``dag`` where it is exact
    evaluator: Literal["auto", "des", "dag"] = "auto"

    @model_validator(mode="before")
    @classmethod
    def _apply_fidelity(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        name = raw.get("fidelity", "exact")
        preset = FIDELITY_PRESETS.get(name) if isinstance(name, str) else None
        if preset is None:
            return raw  # (a bad name or type: the field check)
        merged = {**preset, **raw}
        if "fold_contention" not in raw and merged["network"] != "flow":
            merged.pop(
                "fold_contention", None
            )  # a preset's default never invalidates a network the user names
        return merged

    @field_validator("collectives")
    @classmethod
    def _known_algorithms(cls, mapping: dict[str, str]) -> dict[str, str]:
        for kind, algo in mapping.items():
            if kind not in KINDS:
                raise ValueError(f"{kind!r} is not a collective kind; known: {', '.join(KINDS)}")
            if algo not in SELECTORS and (algo not in ALGORITHMS or kind not in ALGORITHMS[algo].kinds):
                fits = sorted(a for a, spec in ALGORITHMS.items() if kind in spec.kinds)
                raise ValueError(
                    f"{algo!r} is not an algorithm for {kind}; known: auto, nccl, {', '.join(fits)}"
                )
        return mapping

    @field_validator("network")
    @classmethod
    def _known_network(cls, name: str) -> str:
        names = network_model_names()
        return known(name, names, "network model", names)

    @field_validator("fold_contention")
    @classmethod
    def _fold_contention_on_flow(cls, on: bool, info: ValidationInfo) -> bool:
        network = info.data.get("network")  # (declared above: checked first)
        if on and network not in ("flow", None):
            raise ValueError(
                "folds twin flows of the flow network (fidelity balanced) only; "
                f"with network {network!r} it takes false"
            )
        return on


class FaultSpec(_Spec):
    """One event of the job (docs/faults.md): ``gpu_fail`` (``gpu``: the failed GPU's
    index; its node leaves the job), ``link_fail`` (``link``: [a, b] topology nodes) or
    ``node_join`` (``nodes``: how many nodes join). It strikes ``at`` a job time or
    ``at_iteration`` x: when the running job has done x iterations (5.5 = half-way
    through iteration 5; 5 = as iteration 5 starts)."""

    kind: Literal["gpu_fail", "link_fail", "node_join"]
    gpu: Annotated[int | None, Range(0, 100_000_000)] = None
    link: tuple[str, str] | None = None
    nodes: Annotated[int | None, Range(1, 100_000)] = None
    at: Time | None = None
    at_iteration: Annotated[float | None, Range(0, 10_000_000)] = None

    @model_validator(mode="after")
    def _fields_of_kind(self) -> FaultSpec:
        if (self.at is None) == (self.at_iteration is None):
            raise ValueError("give exactly one of at (a job time, e.g. '30 min') or at_iteration (e.g. 5)")
        needs = {"gpu_fail": "gpu", "link_fail": "link", "node_join": "nodes"}
        for kind, name in needs.items():
            given = getattr(self, name) is not None
            if kind == self.kind and not given:
                raise ValueError(f"a {kind} fault needs {name}")
            if kind != self.kind and given:
                raise ValueError(
                    f"{name} belongs to {kind} faults; a {self.kind} fault takes {needs[self.kind]}"
                )
        return self


#: component classes of rate-driven failures (clustersim.faults.rates: the unit each is per)
FAILURE_CLASSES = ("gpu", "node", "nic", "link", "switch", "network", "software", "leaf", "rack")


class FailuresSpec(_Spec):
    """Failures drawn at rates over a long job (docs/fleet.md): a ``study`` of
    ``data/failure_rates.csv`` (or a list of them) and/or per-unit ``mtbf`` by component
    class (overriding the study's; 0: none; ``leaf`` and ``rack`` are failure domains, one
    failure taking several nodes — a rack of ``rack_nodes``), drawn with ``seed`` (``seeds`` jobs: seed, seed+1, …). After a
    failure the job is down ``detection_time`` + ``recovery.restart_time`` (+
    ``replacement_time`` for a gpu/node/nic failure unless one of ``spares`` hot spares is
    free — a leaf's or rack's needs one per node it takes; a spare taken is free again
    ``repair_time`` later) + the checkpoint read.
    ``checkpoint_write``: ``blocking`` (the job waits for the write) or ``async`` (it waits
    only for a copy to host memory at ``snapshot_bandwidth`` per GPU)."""

    study: str | list[str] | None = None
    mtbf: dict[Literal[FAILURE_CLASSES], Time] = Field(default_factory=dict)
    seed: Annotated[int, Range(0, 2**31 - 1)] = 0
    seeds: Annotated[int, Range(1, 100_000)] = 1
    detection_time: Time = 0.0
    replacement_time: Time = 0.0
    spares: Annotated[int, Range(0, 100_000)] = 0
    repair_time: Time = 0.0
    checkpoint_write: Literal["blocking", "async"] = "blocking"
    snapshot_bandwidth: Bandwidth | None = None
    #: nodes per rack, the ``rack`` failure domain (clustersim.faults.domains)
    rack_nodes: Annotated[int | None, Range(1, 100_000)] = None

    @model_validator(mode="after")
    def _complete(self) -> FailuresSpec:
        if self.mtbf.get("rack") and self.rack_nodes is None:
            raise ValueError("mtbf.rack needs rack_nodes (the nodes one rack's power takes down)")
        if self.study is None and not self.mtbf:
            raise ValueError(
                "give a study (e.g. llama3_405b) or mtbf per component class, e.g. {gpu: 50000 h}"
            )
        if self.checkpoint_write == "async" and self.snapshot_bandwidth is None:
            raise ValueError(
                "checkpoint_write: async needs snapshot_bandwidth (per GPU, device to host, e.g. 20 GB/s)"
            )
        return self


class RecoverySpec(_Spec):
    """How the job of ``job_iterations`` iterations survives its ``faults``
    (docs/faults.md): ``checkpoint_restart`` (restart on a spare from the last checkpoint)
    or ``elastic`` (re-plan onto the GPUs there are, moving state over the fabric).
    Checkpoints are written every ``checkpoint_every`` iterations (None: never) at the
    aggregate ``storage_bandwidth`` (all GPUs' writes together). ``restart_time`` is the
    pause to relaunch the job on a spare before the checkpoint is read back; ``replan_time``
    the pause to re-form an elastic job on the GPUs there are, before state migration."""

    policy: Literal["checkpoint_restart", "elastic"] = "checkpoint_restart"
    job_iterations: Annotated[int, Range(1, 10_000_000)]
    checkpoint_every: Annotated[int | None, Range(1, 10_000_000)] = None
    storage_bandwidth: Bandwidth = 10e9
    restart_time: Time = 0.0
    replan_time: Time = 0.0
    #: failures drawn at rates instead of the scripted ``faults`` (docs/fleet.md)
    failures: FailuresSpec | None = None


class EnergySpec(_Spec):
    """Energy and power of the step (docs/energy.md): the facility's ``pue`` (facility
    energy / IT energy), each NIC's and switch's power in watts (constant; unset: the
    datasheet row of the NIC's rate in ``data/network_power.csv``, fabric switches only;
    a number: every NIC / every switch, NVSwitches included; 0: not counted) and prices for
    the costs per million tokens (None: not reported)."""

    pue: Annotated[float, Range(1, 10)] = 1.0
    nic_power: Annotated[float | None, Range(0, 10_000)] = None
    switch_power: Annotated[float | None, Range(0, 100_000)] = None
    price_per_kwh: Annotated[float | None, Range(0, 1_000)] = None
    price_per_gpu_hour: Annotated[float | None, Range(0, 100_000)] = None


class AdaptedSpec(_Spec):
    """One default a profile or preset adapted: ``field`` set to ``value`` by ``by`` (e.g.
    ``training.framework: megatron_core``) because ``why``."""

    field: str
    value: Any = None
    by: str
    why: str


class ScenarioSpec(_Spec):
    """A whole scenario as validated field by field (before cross-field rules)."""

    name: str = "unnamed"
    cluster: ClusterSpec = ClusterSpec()
    model: ModelSpec
    training: TrainingSpec
    parallel: ParallelSpec = ParallelSpec()
    simulation: SimulationSpec = SimulationSpec()
    #: events of a multi-iteration job (docs/faults.md); they need ``recovery``
    faults: list[FaultSpec] = Field(default_factory=list)
    recovery: RecoverySpec | None = None
    #: token generation with continuous batching (docs/generation.md); needs ``training.mode: inference``
    generation: GenerationSpec | None = None
    #: an RLHF / GRPO iteration's phases on one timeline (docs/rlhf.md); the rest is the actor's training job
    rlhf: RlhfSpec | None = None
    #: power and energy of the step (docs/energy.md); None: not reported
    energy: EnergySpec | None = None
    #: what ``training.framework`` or ``simulation.fidelity`` filled differently from their
    #: usual defaults because the scenario's own fields refuse those, and why
    #: (:mod:`clustersim.scenario.adapt`); written by the loader, read by no rule
    adapted: list[AdaptedSpec] = Field(default_factory=list)


def field_ranges(model: type[BaseModel] = ScenarioSpec, prefix: str = "") -> dict[str, Range]:
    """Every number field's :class:`Range` by dotted path (``simulation.iterations``), the
    ``model`` branches as ``model.<field>`` — what docs/limits.md tabulates."""
    out: dict[str, Range] = {}
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        for meta in info.metadata:
            if isinstance(meta, Range):
                out[path] = meta
        for sub_model, listed in _models_in(info.annotation):
            for sub, rng in field_ranges(sub_model, f"{path}{'[]' if listed else ''}.").items():
                out.setdefault(sub, rng)
    return out


def _models_in(annotation, listed: bool = False) -> list[tuple[type[BaseModel], bool]]:
    """The pydantic models inside an annotation (through Optional, unions, Annotated), each
    with whether it sits in a list."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, listed)]
    listed = listed or get_origin(annotation) is list
    return [m for arg in get_args(annotation) for m in _models_in(arg, listed)]
