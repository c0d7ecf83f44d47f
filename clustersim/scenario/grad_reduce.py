"""The dtype each ``training.framework`` profile reduces data-parallel gradients in, by default.

What the named stack runs in the configuration its published performance comes from
(``parallel.data_parallel.grad_reduce_dtype``; a stated value always wins). "The model dtype"
is the parameters' dtype: bf16 under ``training.precision`` bf16 and fp8 (FP8 recipes keep
bf16 parameters and gradients), fp16 under fp16, fp32 under fp32.

* ``megatron_core``: the model dtype. Megatron-Core's ``DistributedDataParallelConfig``
  has ``grad_reduce_in_fp32: bool = False`` (megatron/core/distributed/
  distributed_data_parallel_config.py:15, Megatron-LM d98e8a6), and the gradient buffer is
  then ``param.dtype``. Megatron-LM's own launcher differs: with ``--bf16``, ``validate_args``
  sets ``accumulate_allreduce_grads_in_fp32`` unless ``--grad-reduce-in-bf16``
  (megatron/training/arguments.py:1213-1216, passed on at training.py:2635), and
  Megatron-Bridge's ``bf16_mixed()`` sets ``grad_reduce_in_fp32=True``
  (src/megatron/bridge/training/mixed_precision.py:196, Megatron-Bridge 067f987). The
  published Megatron-Core numbers come from the NeMo / Megatron-Bridge performance recipes,
  and those reduce in the model dtype: Megatron-Bridge's ``_benchmark_common`` sets
  ``mixed_precision.grad_reduce_in_fp32 = False`` and ``ddp.grad_reduce_in_fp32 = False``
  for every performance recipe, bf16 included (src/megatron/bridge/perf_recipes/_common.py:
  73-74, and ``_perf_precision`` :122; in scripts/performance/configs/*_llm_pretrain.py since
  bf75c65, 2025-11), NeMo 2.0's ``pretrain_performance_optimizations`` likewise (e.g.
  nemo/collections/llm/recipes/gpt3_175b.py). Megatron-FSDP (``zero: 3``) reads the same
  flag. A run of Megatron-LM's own scripts, or of the published Automodel Megatron-FSDP
  profile (``ReduceScatter_Sum_f32``, :mod:`clustersim.validation.published_step`), states
  ``grad_reduce_dtype: fp32``.
* ``deepspeed``: the model dtype. ``DeepSpeedEngine.communication_data_type`` returns the
  configured value, else fp16 / bf16 when enabled, else fp32 (deepspeed/runtime/engine.py:
  1405-1416, DeepSpeed edaa722); with ``grad_accum_dtype`` unset the gradients accumulate
  in the model dtype (``get_data_types``, :1485-1496), so bf16 runs the ZeRO optimizer, not
  ``BF16_Optimizer`` (that one only with ``grad_accum_dtype: fp32`` under ZeRO-1, :1994-1996).
* ``fsdp2`` with ``zero: 3``: fp32. ``MixedPrecisionPolicy(reduce_dtype=None)`` would reduce
  in ``param_dtype``, but torchtitan passes ``reduce_dtype`` from
  ``training.mixed_precision_reduce``, whose only value is ``"float32"``
  (torchtitan/config/configs.py:102, torchtitan b5bcd76).
* ``fsdp2`` with ``zero: 0`` (PyTorch DDP): fp32. Under DDP torchtitan keeps fp32 parameters
  and runs bf16 compute through ``torch.autocast`` (``mixed_precision_param``'s doc,
  configs.py:94-99), so the gradients DDP all-reduces are fp32.
"""

from __future__ import annotations

#: the parameters' (and gradients') dtype per ``training.precision`` (fp8 keeps bf16 parameters)
MODEL_DTYPE = {"bf16": "bf16", "fp8": "bf16", "fp16": "fp16", "fp32": "fp32"}


def default_grad_reduce_dtype(framework: str, precision: object) -> str:
    """``grad_reduce_dtype`` that ``framework`` runs by default under ``training.precision``
    ``precision`` (module doc; unset or unknown: bf16's, the schema's default precision —
    validation reports an unknown one)."""
    if framework == "fsdp2":
        return "fp32"
    return MODEL_DTYPE.get(precision if isinstance(precision, str) else "bf16", "bf16")
