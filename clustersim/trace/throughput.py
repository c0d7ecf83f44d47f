"""Throughput metrics that need the model: tokens/s, TFLOP/s per GPU, MFU and HFU.

Definitions (docs/metrics.md): model FLOPs are the matmul FLOPs of forward + backward
(3 × forward) without recompute — forward only (1 ×) for inference; hardware FLOPs add
the recomputed forward under full recompute (Megatron-LM's convention for its TFLOP/s).
MFU = model FLOPs per second / (Σ over the GPUs of their peak — each GPU type's catalog
peak on a heterogeneous cluster, before node-group speed factors); HFU the same with
hardware FLOPs; ``tflops_per_gpu`` is hardware FLOP/s per GPU, comparable with
Megatron's published numbers.

Transformers take their FLOPs from the closed form of the model
(:meth:`~clustersim.workload.transformer.TransformerConfig.iteration_flops`). Other models
whose ops carry FLOPs (CNNs) take them from the spans (:func:`span_flops`): hardware FLOPs
are what the GPUs of one iteration executed; model FLOPs leave out the forward a full
recompute repeats inside each backward. The two agree for transformers
(``tests/test_throughput_metrics.py`` states the exact relation). Synthetic models carry
no FLOPs, so these are None for them.
"""

from __future__ import annotations

import pandas as pd

from ..hardware.node_groups import device_specs

NONE = {"tokens_per_s": None, "tflops_per_gpu": None, "mfu": None, "hfu": None}


def span_flops(spans: pd.DataFrame, twins: int = 1) -> tuple[float, float]:
    """(hardware, forward) FLOPs of one iteration from the spans: summed over the GPU spans
    of the last iteration (every iteration runs the same work); ``twins``: the GPUs each
    simulated GPU stands for (tp × dp in a folded run, else 1)."""
    last = spans[spans["iteration"] == spans["iteration"].max()]
    forward = last.loc[last["phase"] == "F", "flops"].sum()
    return float(last["flops"].sum()) * twins, float(forward) * twins


def throughput_metrics(job, iteration_time_s: float, spans: pd.DataFrame) -> dict:
    """``tokens_per_s``, ``tflops_per_gpu``, ``mfu``, ``hfu`` of a :class:`~clustersim.resolve.Job`
    for the summary, from the model's closed form (transformers) or the run's ``spans``."""
    if iteration_time_s <= 0 or job.model.kind == "synthetic":
        return NONE
    if job.model.kind != "transformer":
        twins = job.plan.tp * job.plan.dp if job.fold.enabled else 1
        hw_flops, forward = span_flops(spans, twins)
        if hw_flops == 0:
            return NONE
        full = job.training.recompute == "full" and job.training.mode != "inference"
        return _rates(job, iteration_time_s, hw_flops - forward if full else hw_flops, hw_flops)
    cfg = job.transformer
    batch = job.training.global_batch
    model_flops = cfg.iteration_flops(batch, recompute=False)
    hw_flops = cfg.iteration_flops(batch, recompute=job.training.recompute == "full")
    if job.training.mode == "inference":  # forward passes only: a third of forward + backward
        model_flops = hw_flops = model_flops / 3
    rates = _rates(job, iteration_time_s, model_flops, hw_flops)
    return rates | {"tokens_per_s": batch * cfg.seq_len / iteration_time_s}


def _rates(job, iteration_time_s: float, model_flops: float, hw_flops: float) -> dict:
    peak = sum(gpu.peak_flops for gpu in device_specs(job.cluster)[: job.num_gpus])  # the job's GPUs
    return {
        "tokens_per_s": None,
        "tflops_per_gpu": hw_flops / iteration_time_s / job.num_gpus / 1e12,
        "mfu": model_flops / iteration_time_s / peak,
        "hfu": hw_flops / iteration_time_s / peak,
    }
