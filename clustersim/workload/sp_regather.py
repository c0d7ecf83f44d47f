"""Sequence parallelism's backward all-gather of the column-parallel linears' inputs.

Under sequence parallelism a column-parallel linear (QKV, MLP up) all-gathers its [s/t, b, h]
input before its GEMM, and Megatron saves only the *sharded* input for the backward
(Korthikanti et al. 2022 §4.2.2: that is what keeps the activation at 1/t). The weight
gradient needs the whole input, so the backward gathers it again
(``megatron/core/tensor_parallel/layers.py``, ``LinearWithGradAccumulationAndAsyncCommunication.backward``:
``dist_all_gather_func(all_gather_buffer, input, ..., async_op=True)`` issued before
``grad_input = grad_output.matmul(weight)``, waited after it — "we rely on
CUDA_DEVICE_MAX_CONNECTIONS=1 to ensure that the gather is scheduled before the input
gradient computation"). Transformer Engine's ``LayerNormLinear`` / ``LayerNormMLP`` save
``ln_out`` sharded under SP and gather it the same way, async beside the dgrad GEMM (the
quantized tensor under FP8).

:func:`with_regather` inserts that all-gather (a :class:`~.ops.TPComm` with no forward and an
``all_gather`` backward, the bytes of the forward gather before it) after each column-parallel
linear that follows a sequence-parallel all-gather; :func:`~.segments.backward_items` puts the
linear's input-gradient GEMM beside it (the pass runs them side by side). Which stacks do it
(:data:`REGATHERS`, a profile's decision): Megatron-LM (``megatron_2021``), Megatron-Core
(``megatron_core``) and Megatron-DeepSpeed (``deepspeed``: its ``mpu`` layers are Megatron's);
not ``fsdp2`` — torchtitan's sequence parallelism is DTensor's ``ColwiseParallel``, whose matmul
saves the gathered input autograd hands it, so its backward gathers nothing. Under
``parallel.tp_comm_overlap`` TE's userbuffers move it beside the same GEMM (TE's
``qkv_dgrad`` / ``fc1_dgrad`` bulk overlap, :func:`.tp_overlap.merge_backward`): no NCCL call.
"""

from __future__ import annotations

from .ops import LayerOp, TPComm

#: the column-parallel linears whose input a sequence-parallel all-gather feeds
COLUMN_PARALLEL = ("qkv", "mlp_up")

#: whether each ``training.framework``'s backward re-gathers (module doc)
REGATHERS = {"megatron_2021": True, "megatron_core": True, "deepspeed": True, "fsdp2": False}

#: the name of the backward all-gather's collective point
NAME = "tp re-gather"


def regathers(framework: str) -> bool:
    """Whether ``framework``'s sequence-parallel backward gathers the column-parallel inputs
    again (:data:`REGATHERS`)."""
    return REGATHERS[framework]


def with_regather(layer: list) -> list:
    """``layer``'s ops with a backward-only all-gather after each column-parallel linear that
    follows a tensor-parallel all-gather (module doc); the same list where there is none."""
    out: list = []
    gather: TPComm | None = None
    for op in layer:
        out.append(op)
        if isinstance(op, TPComm):
            gather = op if op.group == "tp" and op.fwd == "all_gather" else None
        elif isinstance(op, LayerOp) and op.name in COLUMN_PARALLEL and gather is not None:
            out.append(TPComm(NAME, "", "all_gather", gather.forward_nbytes))
            gather = None
    return out
