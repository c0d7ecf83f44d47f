"""Megatron-LM 2021's unfused gradient accumulation (``training.fixed_costs.grad_accumulation``).

Megatron-LM keeps an fp32 ``main_grad`` per parameter (``--accumulate-allreduce-grads-in-fp32``,
the gradients clustersim's data-parallel traffic and memory model count). Its 2021 local
DDP (``megatron/model/distributed.py`` ``_make_param_hook``) adds each 16-bit weight
gradient the backward produced into it, one ``param.main_grad.add_(param.grad.data)``
kernel per parameter and micro-batch: a memory-bound pass reading the gradient (``e``
bytes) and the fp32 buffer (4) and writing it back (4). Later Megatron-LM
(``--gradient-accumulation-fusion``, apex ``fused_weight_gradient_mlp_cuda``, there by
early 2022: NVIDIA/apex issue #1314) and Megatron-Core with Transformer Engine write the
weight-gradient GEMM's result straight into ``main_grad`` (a ``beta = 1`` epilogue), and
this pass is gone — so Korthikanti et al. 2022's layer times (Table 4, which calibrate
A100) do not contain it, and every ``training.framework`` but ``megatron_2021`` turns it off.
"""

from __future__ import annotations

from .ops import NO_WORK, ExpertRanks, LayerOp, Work

#: fp32 ``main_grad`` bytes per parameter: read and written back
MAIN_GRAD_BYTES = 8


def with_grad_accumulation(ops: list, e: int) -> list:
    """``ops`` (a layer, or the embedding or output ops) preceded by the weight-gradient
    accumulation of each op holding parameters: an op of ``params × (e + 8)`` bytes of
    backward-weight work, one kernel each. First in forward order, they run at the end of
    the layer's backward (Megatron's hooks fire during it, as each gradient is produced; the
    pass takes their sum either way) and never between a collective and the GEMM it is
    pipelined with (``parallel.tp_comm_overlap``); each expert-parallel rank's experts alike."""
    acc = [
        LayerOp("grad_accumulation", NO_WORK, NO_WORK, Work(0.0, op.params * (e + MAIN_GRAD_BYTES)))
        for op in ops
        if isinstance(op, LayerOp) and op.params
    ]
    rest = [
        op.map(lambda rank: with_grad_accumulation(rank, e)) if isinstance(op, ExpertRanks) else op
        for op in ops
    ]
    return acc + rest
