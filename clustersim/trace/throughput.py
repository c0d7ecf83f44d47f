"""Throughput metrics that need the model: tokens/s, TFLOP/s per GPU, MFU and HFU.

Definitions (docs/metrics.md): model FLOPs are the matmul FLOPs of forward + backward
(3 × forward) without recompute — forward only (1 ×) for inference; hardware FLOPs add
the recomputed forward under full recompute (Megatron-LM's convention for its TFLOP/s).
MFU = model FLOPs per second / (Σ over the GPUs of their peak — each GPU type's catalog
peak on a heterogeneous cluster, before node-group speed factors); HFU the same with
hardware FLOPs; ``tflops_per_gpu`` is hardware FLOP/s per GPU, comparable with
Megatron's published numbers. Synthetic models carry no FLOPs,
so these are None for them.
"""

from __future__ import annotations

from ..hardware.node_groups import device_specs
from ..workload.resolve import resolve_transformer


def throughput_metrics(job, iteration_time_s: float) -> dict:
    """``tokens_per_s``, ``tflops_per_gpu``, ``mfu``, ``hfu`` of a :class:`~clustersim.resolve.Job`
    for the summary."""
    none = {"tokens_per_s": None, "tflops_per_gpu": None, "mfu": None, "hfu": None}
    if job.model.kind != "transformer" or iteration_time_s <= 0:
        return none
    cfg = resolve_transformer(job.model)
    batch, n = job.training.global_batch, job.num_gpus
    model_flops = cfg.iteration_flops(batch, recompute=False)
    hw_flops = cfg.iteration_flops(batch, recompute=job.training.recompute == "full")
    if job.training.mode == "inference":  # forward passes only: a third of forward + backward
        model_flops = hw_flops = model_flops / 3
    peak = sum(gpu.peak_flops for gpu in device_specs(job.cluster))  # all GPUs together
    return {
        "tokens_per_s": batch * cfg.seq_len / iteration_time_s,
        "tflops_per_gpu": hw_flops / iteration_time_s / n / 1e12,
        "mfu": model_flops / iteration_time_s / peak,
        "hfu": hw_flops / iteration_time_s / peak,
    }
