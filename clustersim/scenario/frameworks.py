"""``training.framework``: the bundle of defaults of the stack a scenario says it runs.

A profile fills what the scenario does not state — ``parallel.data_parallel`` options
(:mod:`clustersim.compilers.pipeline.data_parallel`), ``parallel.zero`` (FSDP2 shards fully) and
``model.attention`` — before validation; a stated value always wins, field by field. Where a
value it would fill cannot run with the stated fields it fills what can and records why
(:mod:`.adapt`): TP overlap off with CP or stage granularity, no ``data_parallel`` under a
bidirectional schedule, gradient compression, stage replicas, a parameter server, uneven
``dp_split`` or inference, and FSDP2's ``zero: 3`` not with EP, inference, a CNN, stage
replicas or a parameter server.
``megatron_2021`` (the default) fills nothing: today's results stay identical. Every
other profile runs today's NCCL, whose ring across hosts pays its α's in full
(``cluster.collective_latency: nccl``, :mod:`clustersim.collectives.cost`).

* ``megatron_core``: the distributed optimizer with ``overlap_grad_reduce`` and
  ``overlap_param_gather`` (the flags Megatron-Core's performance recipes turn on),
  Megatron-Core's bucket (max(40M, 1M·dp) fp32 gradients), flash attention on
  Transformer Engine's cuDNN kernel (``model.attention_kernel: cudnn``; FA2 below Hopper,
  :mod:`clustersim.workload.attention_kernels`), and
  ``parallel.tp_comm_overlap`` where sequence parallelism runs (tp > 1, per-layer
  granularity, cp = 1): NeMo's Megatron-Core H100 performance recipes set ``tp_comm_overlap=True``
  (``MegatronCommOverlapCallback`` with the ``userbuffers_*_h100_*`` configs, e.g.
  nemo/collections/llm/recipes/llama3_70b.py); with ``training.precision: fp8`` also FP8
  parameters (``param_gather_dtype: fp8``): NeMo's ``bf16_with_fp8_mixed``
  (nemo/collections/llm/recipes/precision/mixed_precision.py) sets ``fp8_param_gather=True``;
  and Transformer Engine's fused MoE permutation (``parallel.moe_permute_fusion``): the
  Megatron-Core MoE README's Quick Start (megatron/core/transformer/moe/README.md) trains
  every MoE model with ``--moe-permute-fusion`` (TransformerConfig's own default is off)
  and ``--moe-grouped-gemm`` (``parallel.moe_expert_mlp: te_grouped``, TEGroupedMLP), and
  its dropless dispatchers copy the split sizes to the host every MoE layer
  (``parallel.moe_host_sync``, ``token_dispatcher.py``'s ``cuda_sync_point``); the
  experts' token load of a router balanced by Megatron-Core's auxiliary loss
  (``model.expert_load: auto``: the Zipf load fitted to measured MaxVio for softmax routers,
  uniform for sigmoid ones; :mod:`clustersim.workload.moe_routing`);
  and the gradient buffer in the model dtype (``grad_reduce_dtype: bf16`` under bf16 and
  fp8): Megatron-Core's ``DistributedDataParallelConfig.grad_reduce_in_fp32`` defaults to
  False and Megatron-Bridge's and NeMo's performance recipes set it False, bf16 included,
  though Megatron-LM's launcher and ``bf16_mixed()`` reduce in fp32 (sources:
  :mod:`.grad_reduce`) — 2 bytes per parameter held, not fp32 ``main_grad``'s 4;
  with ``parallel.zero: 3``, Megatron-FSDP (``megatron_fsdp`` with Megatron-LM's defaults:
  no double buffer, the default communication unit size;
  :mod:`clustersim.parallel.megatron_fsdp`);
* ``deepspeed``: buckets of 5e8 elements (``reduce_bucket_size`` /
  ``allgather_bucket_size``), ``overlap_comm`` on for ZeRO-3 only (DeepSpeed's dynamic
  default), ZeRO-2 reducing its buckets after every micro-batch's backward (its gradient
  hooks run while ``partition_gradients``; ZeRO-1's only at the accumulation boundary,
  deepspeed/runtime/zero/stage_1_and_2.py), gradients reduced in the model dtype
  (``communication_data_type`` unset; :mod:`.grad_reduce`), and for ZeRO-3 DeepSpeed's parameter coordinator
  (``deepspeed_zero3`` with DeepSpeed's defaults, :mod:`clustersim.parallel.zero3`; a
  transformer's only — other models run FSDP units):
  ``fetch_sub_module`` gathers per submodule, prefetching the trace's next parameters up
  to ``stage3_prefetch_bucket_size`` (5e7 elements, so one matrix of a large model), and
  biases and norms stay resident under ``stage3_param_persistence_threshold`` (1e5)
  (deepspeed/runtime/zero/partitioned_param_coordinator.py); the attention kernel is not
  implied;
* ``fsdp2``: ``parallel.zero: 3`` (``fully_shard``) run as FSDP2 runs it (``fsdp2``:
  :mod:`clustersim.compilers.pipeline.fsdp2`), ``reshard_after_forward`` unless ``pp`` > 1
  (torchtitan's default policy), prefetch 1, fp32 gradient reduction (the
  ``MixedPrecisionPolicy`` reduce dtype torchtitan sets; :mod:`.grad_reduce`);
  with ``zero: 0`` stated it is PyTorch DDP: overlapped buckets of 25 MiB, the first 1 MiB,
  fp32 gradients (torchtitan's autocast keeps fp32 parameters);
  flash attention through SDPA, which torchtitan runs cuDNN-first (``attention_kernel: cudnn``).

Every profile but ``megatron_2021`` also turns ``training.fixed_costs.pipeline_gather`` off:
Megatron-Core removed Megatron-LM 2021's scatter/gather of pipeline boundary tensors, and
DeepSpeed and FSDP never had it.

Where the filled-in scenario overlaps something (a data-parallel overlap flag, FSDP units,
``tp_comm_overlap``), a profile other than ``megatron_2021`` also fills
``cluster.comm_compute_slowdown`` with the GPU's default (:mod:`clustersim.hardware.interference`).
"""

from __future__ import annotations

from typing import Any

from ..hardware.interference import custom_slowdown, default_slowdown
from ..workload.attention_kernels import FRAMEWORK_KERNEL
from .adapt import bidirectional, granularity, note, section, whole
from .cluster_spec import ClusterSpec
from .grad_reduce import default_grad_reduce_dtype
from .model_spec import _model_kind

FRAMEWORKS = ("megatron_2021", "megatron_core", "deepspeed", "fsdp2")
#: DeepSpeed's reduce_bucket_size / allgather_bucket_size: 5e8 elements (bf16: 2 bytes)
DEEPSPEED_BUCKET_BYTES = int(5e8) * 2


def _data_parallel(
    framework: str, zero: int, precision: object, transformer: bool, pp: object
) -> dict[str, Any]:
    """The profile's ``parallel.data_parallel`` defaults under ZeRO stage ``zero`` and
    ``training.precision`` ``precision`` (``transformer``: the model has the submodules
    DeepSpeed's ZeRO-3 coordinator fetches for; ``pp``: the pipeline degree)."""
    grad = {"grad_reduce_dtype": default_grad_reduce_dtype(framework, precision)}  # by source: .grad_reduce
    if framework == "megatron_core":
        fp8 = {"param_gather_dtype": "fp8"} if precision == "fp8" else {}
        return {
            "distributed_optimizer": True,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            **grad,
            **fp8,
            **({"megatron_fsdp": {}} if zero == 3 else {}),
        }
    if framework == "deepspeed":
        return {
            "bucket_size": DEEPSPEED_BUCKET_BYTES,
            "overlap_grad_reduce": zero == 3,
            **grad,
            **({"deepspeed_zero3": {}} if zero == 3 and transformer else {}),
            **({"reduce_every_micro_batch": True} if zero == 2 else {}),
        }
    if zero == 0:  # fsdp2's stack without sharding: PyTorch DDP
        return {"overlap_grad_reduce": True, "bucket_size": "25 MiB", "first_bucket_size": "1 MiB", **grad}
    # torchtitan's "default" reshard policy: not under pipeline parallelism (per-micro-batch
    # all-gathers), else every block but the last (torchtitan/models/llama3/infra/parallelize.py)
    reshard = pp in (1, None)
    fsdp2 = {"fsdp2": True} if zero == 3 else {}
    return {"reshard_after_forward": reshard, "prefetch": 1, **grad, **fsdp2}


def apply_framework(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with its ``training.framework`` profile's defaults filled in where the
    scenario states nothing (module doc); ``raw`` itself is not changed. Malformed
    sections are left for validation to report."""
    training = raw.get("training")
    framework = training.get("framework", "megatron_2021") if isinstance(training, dict) else None
    if framework not in FRAMEWORKS[1:]:
        return raw
    if not isinstance(raw.get("parallel", {}), dict):
        return raw
    out = dict(raw)
    parallel = dict(out.get("parallel") or {})
    by = f"training.framework: {framework}"
    if framework == "fsdp2" and "zero" not in parallel:
        why = _unshardable(raw)
        if why is None:
            parallel["zero"] = 3
        else:  # PyTorch DDP, the fsdp2 stack's unsharded form
            note(out, "parallel.zero", 0, by, f"not 3 (fully_shard): {why}")
    zero = parallel.get("zero", 0)
    stated = parallel.get("data_parallel") or {}
    blocked = None if "data_parallel" in parallel else _no_data_parallel(raw)
    if blocked is not None:
        note(out, "parallel.data_parallel", None, by, f"left unset: {blocked}")
    elif isinstance(stated, dict) and isinstance(zero, int):
        precision = training.get("precision")
        transformer = _model_kind(raw.get("model")) == "literal['transformer']"
        # (DeepSpeed's ZeRO-3 under a pipeline stays: DeepSpeed refuses it, naming parallel.pp)
        filled = _data_parallel(framework, zero, precision, transformer, parallel.get("pp"))
        parallel["data_parallel"] = {**filled, **stated}
    if framework == "megatron_core" and "tp_comm_overlap" not in parallel and _sequence_parallel(raw):
        cp = whole(parallel.get("cp")) > 1
        why = "parallel.cp > 1" if cp else None
        if why is None and granularity(raw) != "layer":
            why = f"simulation.granularity: {granularity(raw)} (no per-layer segments to overlap)"
        if why is None:
            parallel["tp_comm_overlap"] = True
        else:
            note(out, "parallel.tp_comm_overlap", False, by, f"off: its precondition fails with {why}")
    if framework == "megatron_core":
        parallel.setdefault("moe_permute_fusion", True)
        parallel.setdefault("moe_expert_mlp", "te_grouped")
        parallel.setdefault("moe_host_sync", True)
    out["parallel"] = parallel
    cluster = out.get("cluster")
    if isinstance(cluster, dict) and "comm_compute_slowdown" not in cluster and _overlaps(parallel):
        gpu = cluster.get("gpu", ClusterSpec.model_fields["gpu"].default)
        slowdown = default_slowdown(gpu) if isinstance(gpu, str) else custom_slowdown(gpu)
        if slowdown is not None:
            cluster = {**cluster, "comm_compute_slowdown": slowdown}
    if isinstance(cluster, dict):
        out["cluster"] = {"collective_latency": "nccl", **cluster}
    training = out.get("training")
    fixed = training.get("fixed_costs") if isinstance(training, dict) else None
    if isinstance(training, dict) and (fixed is None or isinstance(fixed, dict)):
        # Megatron-Core dropped Megatron-LM 2021's pipeline scatter/gather; the others never had
        # it. Megatron-Core fuses the main_grad accumulation into the wgrad GEMM; DeepSpeed's and
        # FSDP's accumulation is not modelled
        off = {"pipeline_gather": False, "grad_accumulation": False}
        out["training"] = {**training, "fixed_costs": {**off, **(fixed or {})}}
    model = out.get("model")
    transformer = isinstance(model, dict) and _model_kind(model) == "literal['transformer']"
    if transformer and framework in FRAMEWORK_KERNEL:
        out["model"] = model = {
            "attention": "flash",
            "attention_kernel": FRAMEWORK_KERNEL[framework],
            **model,
        }
    if transformer and framework == "megatron_core" and section(raw, "simulation").get("fold") is not True:
        # routers balanced by the auxiliary loss spread tokens unevenly (workload/moe_routing.py),
        # the experts' ranking drawn from the scenario's seed — except where the user asks to
        # fold (`simulation.fold: true`), which needs identical expert-parallel ranks: a profile
        # default never makes a scenario invalid, so that one keeps the even load
        seed = section(raw, "simulation").get("seed", 0)
        drawn = {"expert_seed": seed % 2**63} if isinstance(seed, int) else {}
        out["model"] = {"expert_load": "auto", **drawn, **model}
    return out


def _sequence_parallel(raw: dict[str, Any]) -> bool:
    """Whether ``raw`` runs sequence parallelism (tp > 1), which TP overlap needs."""
    parallel = section(raw, "parallel")
    return parallel.get("sequence_parallel") is True and whole(parallel.get("tp")) > 1


def _unshardable(raw: dict[str, Any]) -> str | None:
    """Why the fsdp2 profile cannot shard the scenario fully (None if it can)."""
    parallel, training = section(raw, "parallel"), section(raw, "training")
    if whole(parallel.get("ep")) > 1:
        return "FSDP units with expert parallelism are not modelled"
    if training.get("mode") == "inference":
        return "inference keeps whole replicas"
    if _model_kind(raw.get("model")) == "literal['cnn']":
        return "FSDP units need per-layer passes, which a CNN's chunks do not have"
    for key in ("stage_replicas", "parameter_server"):
        if parallel.get(key) is not None:
            return f"parallel.{key} trains plain replicas"
    return None


def _no_data_parallel(raw: dict[str, Any]) -> str | None:
    """Why ``parallel.data_parallel`` cannot run with the scenario (None if it can):
    the uniform pipeline compiler's refusals (:mod:`clustersim.compilers.pipeline.check`)."""
    parallel = section(raw, "parallel")
    if bidirectional(parallel):
        return "a bidirectional schedule synchronises gradients without it"
    for key in ("gradient_compression", "stage_replicas", "parameter_server"):
        if parallel.get(key) is not None:
            return f"not with parallel.{key}"
    if parallel.get("dp_split", "even") != "even":
        return "its replicas run alike (parallel.dp_split: even)"
    if section(raw, "training").get("mode") == "inference":
        return "inference synchronises no gradients"
    return None


def _overlaps(parallel: dict[str, Any]) -> bool:
    """Whether the filled-in ``parallel`` section runs communication beside compute."""
    dp = parallel.get("data_parallel")
    dp = dp if isinstance(dp, dict) else {}
    fsdp = parallel.get("zero") == 3 and "data_parallel" in parallel
    return bool(dp.get("overlap_grad_reduce") or dp.get("overlap_param_gather") or fsdp) or (
        parallel.get("tp_comm_overlap") is True
    )
