"""Memory model: what one GPU holds — weights, gradients, optimizer states, activations.

Static bytes per parameter by precision and optimizer (Megatron-LM mixed precision keeps
16-bit weights, fp32 gradients (``main_grad``) and fp32 master weights + Adam m, v:
2 + 4 + 12 = 18 bytes/param — Korthikanti et al. 2022 §2, Rajbhandari et al. 2020 §3.1
count the same 16 + 2). FP8 training (Transformer Engine) keeps the same BF16 weights and
fp32 states; its FP8 weight cache and FP8 saved inputs are in :mod:`.fp8`. ZeRO (Rajbhandari et al. 2020) shards over the data-parallel
group: stage 1 the optimizer states, 2 also gradients, 3 also weights.

Activations: a stage keeps its per-micro-batch activation bytes (Korthikanti's formulas,
built op by op in :mod:`.transformer_ops`) once per micro-batch in flight; the number in
flight is read off the schedule's own order (the largest count of forwards not yet
matched by their backward), so GPipe keeps m and 1F1B keeps p − s on stage s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..memory_kinds import StaticMemory
from ..program import Program

#: (precision, optimizer) → bytes per parameter of (weights, gradients, optimizer states)
BYTES_PER_PARAM: dict[tuple[str, str], tuple[int, int, int]] = {
    ("bf16", "adam"): (2, 4, 12),  # Megatron: 16-bit weights, fp32 main_grad, fp32 master + m + v
    ("fp16", "adam"): (2, 4, 12),
    ("fp8", "adam"): (2, 4, 12),  # TE: BF16 parameters, fp32 main_grad and optimizer (see .fp8)
    ("fp32", "adam"): (4, 4, 8),  # weights, grads, m + v
    ("bf16", "sgd"): (2, 4, 8),  # fp32 master + momentum
    ("fp16", "sgd"): (2, 4, 8),
    ("fp8", "sgd"): (2, 4, 8),
    ("fp32", "sgd"): (4, 4, 4),  # momentum
}

#: activation element size by precision (bytes); FP8 training computes and keeps activations
#: in BF16 except the FP8 GEMM inputs (:mod:`.fp8`)
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 2}
#: bytes per element of a data-parallel reduction / all-gather dtype (parallel.data_parallel)
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes one GPU holds at its peak, by kind (``static.stashed`` counting the stashed
    weight versions in flight then too); ``total`` and ``fits`` derived."""

    static: StaticMemory
    activations: float
    capacity: float

    @property
    def total(self) -> float:
        return self.static.total + self.activations

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity


#: kind of static bytes → the ZeRO stage from which they are sharded over the data-parallel
#: group (Rajbhandari et al. 2020: stage 1 the optimizer states, 2 also gradients, 3 also weights)
ZERO_STAGE = {"optimizer": 1, "grads": 2, "weights": 3}


def zero_shards(kind: str, zero: int, dp: int) -> int:
    """Over how many GPUs ZeRO stage ``zero`` divides the ``kind`` bytes (a
    :class:`~clustersim.memory_kinds.StaticMemory` kind: ``"weights"``, ``"grads"`` or
    ``"optimizer"``; buffers are never sharded) of a data-parallel group of ``dp``: all
    ``dp`` from the kind's :data:`ZERO_STAGE` on, else 1 (every GPU holds a whole copy)."""
    return max(1, dp) if zero >= ZERO_STAGE[kind] else 1


def static_bytes(
    params: float,
    precision: str,
    optimizer: str,
    zero: int,
    dp: int,
    *,
    grad_dtype=None,
    fp8_params=0.0,
    fp32_params: bool = False,
    optimizer_bytes: float | None = None,
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer states) bytes for ``params`` held on one GPU.

    ``grad_dtype``: the dtype of the gradient buffer the data-parallel reduction runs on
    (``parallel.data_parallel.grad_reduce_dtype``; None: the precision's own, fp32
    ``main_grad``). Megatron-Core allocates its grad buffer in fp32 only with
    ``grad_reduce_in_fp32``, else in the parameters' dtype
    (megatron/core/distributed/param_and_grad_buffer.py, ``grad_dtype``); DeepSpeed keeps
    bf16 gradients — the ZeRO paper's 2 + 2 + 12 = 16 bytes/param. ``fp8_params`` of the
    ``params`` are held as FP8 instead (1 byte: Megatron's ``--fp8-param-gather``, NeMo's
    FP8 recipes; the fp32 master copy stays in the optimizer states). ``fp32_params``: the
    held parameter is the fp32 master itself (FSDP2's ``MixedPrecisionPolicy`` shards fp32
    parameters and gathers them in bf16, torch/distributed/fsdp/_fully_shard/_fsdp_param.py),
    so the optimizer keeps no copy of its own: 4 + 4 + 8 = 16 bytes/param for Adam.
    ``optimizer_bytes``: the optimizer states' bytes per parameter where a precision-aware
    optimizer says (:mod:`.precision_aware`); None: the table's."""
    w, g, o = BYTES_PER_PARAM[(precision, optimizer)]
    o = o if optimizer_bytes is None else optimizer_bytes
    g = DTYPE_BYTES[grad_dtype] if grad_dtype else g
    if fp32_params and o >= DTYPE_BYTES["fp32"]:
        w, o = DTYPE_BYTES["fp32"], o - DTYPE_BYTES["fp32"]
    return (
        (params * w - fp8_params * (w - DTYPE_BYTES["fp8"])) / zero_shards("weights", zero, dp),
        params * g / zero_shards("grads", zero, dp),
        params * o / zero_shards("optimizer", zero, dp),
    )


def in_flight(order: list[tuple]) -> int:
    """Most micro-batches whose forward ran and backward has not, along a stage's order
    (items ``(phase, mb)`` or ``(phase, mb, chunk)``)."""
    live = peak = 0
    for item in order:
        live += 1 if item[0] == "F" else -1 if item[0] == "B" else 0
        peak = max(peak, live)
    return peak


def oom_hint(b: MemoryBreakdown, recompute: str, zero: int, tp: int, pp: int) -> str:
    """A one-line suggestion for a plan that does not fit, naming the biggest consumer."""
    gib, m = 2**30, b.static
    stashed = f"stashed weights {m.stashed / gib:.1f} GiB, " if m.stashed else ""
    parts = (
        f"params {m.weights / gib:.1f} GiB, grads {m.grads / gib:.1f} GiB, optimizer "
        f"{m.optimizer / gib:.1f} GiB, {stashed}activations {b.activations / gib:.1f} GiB, buffers "
        f"{m.buffers / gib:.1f} GiB > capacity {b.capacity / gib:.1f} GiB"
    )
    tips = []
    if b.activations > m.total and recompute != "full":
        tips.append("training.recompute: full (or selective)")
    if m.optimizer + m.grads > b.activations and zero < 3:
        tips.append(f"parallel.zero: {zero + 1}")
    tips += [f"more pipeline stages (parallel.pp > {pp})", f"more tensor parallelism (parallel.tp > {tp})"]
    return f"out of memory: {parts}; try {', or '.join(tips)}"


#: ``res.devices`` column of each static kind, in the table's order
STATIC_COLUMNS = {
    "weights": "params_bytes",
    "grads": "grads_bytes",
    "optimizer": "optimizer_bytes",
    "buffers": "buffers_bytes",
}


def memory_columns(job, devices, program: Program) -> tuple[dict[str, np.ndarray], str]:
    """Per-device memory columns by kind for ``res.devices`` and an OOM hint ("" if all fit).

    The static kinds are the run's ``Program.static_memory``; ``stashed_weights_bytes``
    (only for a schedule that keeps weight versions: PipeDream, PipeDream-2BW) its second
    weight copy plus the stashed versions held at the device's peak
    (:meth:`~clustersim.program.Program.memory_peaks`); activations the simulated peak
    minus all of those. A device without ops of its own (a folded-away twin) shows its
    stage's first device, as its peak does. ``job``: the run's :class:`~clustersim.resolve.Job`.
    Each kind is worked out once per device with ops, then taken for every device.
    """
    stash = job.schedule.weights != "single"
    n = len(devices)
    stages = devices["stage"].to_numpy()
    with_ops = np.zeros(n, dtype=bool)
    with_ops[[d for d, _ in program.lanes() if d < n]] = True
    _, first, of_stage = np.unique(stages, return_index=True, return_inverse=True)
    held, at = np.unique(np.where(with_ops, np.arange(n), first[of_stage]), return_inverse=True)
    # the stashed weights held at the peak: a second copy, or the versions in flight (a
    # schedule with one weight version stashes none: its static memory is all there is)
    if stash:
        peaks = program.memory_peaks()
        statics = [replace(program.static_memory[d], stashed=peaks[d][1]) for d in held.tolist()]
    else:
        statics = [program.static_memory[d] for d in held.tolist()]

    def per_device(kind: str) -> np.ndarray:
        return np.array([float(getattr(m, kind)) for m in statics])[at]

    cols = {col: per_device(kind) for kind, col in STATIC_COLUMNS.items()}
    peak, cap = devices["peak_memory_bytes"].to_numpy(), devices["memory_capacity_bytes"].to_numpy()
    act = peak.astype(float) - per_device("total")
    cols["activations_bytes"] = act = np.where(act > 0.0, act, 0.0)  # (as max(0.0, ·) would)
    if stash:
        cols["stashed_weights_bytes"] = per_device("stashed")
    over = np.flatnonzero(peak > cap)
    if not len(over):
        return cols, ""
    dev, par = int(over[0]), job.parallel
    b = MemoryBreakdown(statics[at[dev]], float(act[dev]), cap[dev])
    return cols, f"stage {stages[dev]}: " + oom_hint(b, job.training.recompute, par.zero, par.tp, par.pp)
