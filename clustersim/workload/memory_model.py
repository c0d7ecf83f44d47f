"""Memory model: what one GPU holds — weights, gradients, optimizer states, activations.

Static bytes per parameter by precision and optimizer (Megatron-LM mixed precision keeps
16-bit weights, fp32 gradients (``main_grad``) and fp32 master weights + Adam m, v:
2 + 4 + 12 = 18 bytes/param — Korthikanti et al. 2022 §2, Rajbhandari et al. 2020 §3.1
count the same 16 + 2). ZeRO (Rajbhandari et al. 2020) shards over the data-parallel
group: stage 1 the optimizer states, 2 also gradients, 3 also weights.

Activations: a stage keeps its per-micro-batch activation bytes (Korthikanti's formulas,
built op by op in :mod:`.transformer_ops`) once per micro-batch in flight; the number in
flight is read off the schedule's own order (the largest count of forwards not yet
matched by their backward), so GPipe keeps m and 1F1B keeps p − s on stage s.
"""

from __future__ import annotations

from dataclasses import dataclass

from .stage_cost import StageCost, chunk_costs

#: (precision, optimizer) → bytes per parameter of (weights, gradients, optimizer states)
BYTES_PER_PARAM: dict[tuple[str, str], tuple[int, int, int]] = {
    ("bf16", "adam"): (2, 4, 12),  # Megatron: 16-bit weights, fp32 main_grad, fp32 master + m + v
    ("fp16", "adam"): (2, 4, 12),
    ("fp32", "adam"): (4, 4, 8),  # weights, grads, m + v
    ("bf16", "sgd"): (2, 4, 8),  # fp32 master + momentum
    ("fp16", "sgd"): (2, 4, 8),
    ("fp32", "sgd"): (4, 4, 4),  # momentum
}

#: activation element size by precision (bytes)
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes one GPU holds at its peak, by kind; ``total`` and ``fits`` derived."""

    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float
    capacity: float

    @property
    def static(self) -> float:
        return self.params + self.grads + self.optimizer + self.buffers

    @property
    def total(self) -> float:
        return self.static + self.activations

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity


#: kind of static bytes → the ZeRO stage from which they are sharded over the data-parallel
#: group (Rajbhandari et al. 2020: stage 1 the optimizer states, 2 also gradients, 3 also weights)
ZERO_STAGE = {"optimizer": 1, "grads": 2, "params": 3}


def zero_shards(kind: str, zero: int, dp: int) -> int:
    """Over how many GPUs ZeRO stage ``zero`` divides the ``kind`` bytes (``"params"``,
    ``"grads"`` or ``"optimizer"``) of a data-parallel group of ``dp``: all ``dp`` from the
    kind's :data:`ZERO_STAGE` on, else 1 (every GPU holds a whole copy)."""
    return max(1, dp) if zero >= ZERO_STAGE[kind] else 1


def static_bytes(
    params: float, precision: str, optimizer: str, zero: int, dp: int
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer states) bytes for ``params`` held on one GPU."""
    w, g, o = BYTES_PER_PARAM[(precision, optimizer)]
    return (
        params * w / zero_shards("params", zero, dp),
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
    gib = 2**30
    parts = (
        f"params {b.params / gib:.1f} GiB, grads {b.grads / gib:.1f} GiB, optimizer "
        f"{b.optimizer / gib:.1f} GiB, activations {b.activations / gib:.1f} GiB, buffers "
        f"{b.buffers / gib:.1f} GiB > capacity {b.capacity / gib:.1f} GiB"
    )
    tips = []
    if b.activations > b.static and recompute != "full":
        tips.append("training.recompute: full (or selective)")
    if b.optimizer + b.grads > b.activations and zero < 3:
        tips.append(f"parallel.zero: {zero + 1}")
    tips += [f"more pipeline stages (parallel.pp > {pp})", f"more tensor parallelism (parallel.tp > {tp})"]
    return f"out of memory: {parts}; try {', or '.join(tips)}"


def run_chunk_costs(sc) -> list[StageCost]:
    """The StageCost of every model chunk (``pp × virtual_stages`` of them), cut by the
    partition the run uses (``parallel.partition`` resolved): what a GPU of each stage holds."""
    from ..planner import resolve_partition

    chunks = sc.parallel.pp * sc.parallel.virtual_stages
    return chunk_costs(sc, chunks, resolve_partition(sc, chunks))


def memory_columns(sc, devices) -> tuple[dict[str, list[float]], str]:
    """Per-device memory breakdown columns for ``res.devices`` and an OOM hint ("" if all fit).

    Static parts come from the stages' :class:`StageCost` ``memory_parts``; activations are
    the simulated peak minus the static bytes (what the schedule really kept in flight).
    """
    from ..schedules import SCHEDULES

    costs = run_chunk_costs(sc)
    p, schedule = sc.parallel.pp, SCHEDULES[sc.parallel.schedule]
    chunks_of = [[k for k in range(len(costs)) if schedule.stage_of(k, p) == s] for s in range(p)]
    cols: dict[str, list[float]] = {
        k: []
        for k in ("params_bytes", "grads_bytes", "optimizer_bytes", "buffers_bytes", "activations_bytes")
    }
    hint = ""
    for stage, peak, cap in zip(
        devices["stage"], devices["peak_memory_bytes"], devices["memory_capacity_bytes"]
    ):
        parts = {k: 0.0 for k in ("params", "grads", "optimizer", "buffers")}
        for k in chunks_of[stage]:  # every model chunk placed on this stage
            for key, v in costs[k].memory_parts.items():
                parts[key] += v
        if sc.parallel.parameter_server is not None:
            parts["optimizer"] = 0.0  # the optimizer state lives on the parameter servers
        static = sum(parts.values())
        act = max(0.0, float(peak) - static)
        for key in parts:
            cols[f"{key}_bytes"].append(parts[key])
        cols["activations_bytes"].append(act)
        if peak > cap and not hint:
            b = MemoryBreakdown(
                parts["params"], parts["grads"], parts["optimizer"], act, parts["buffers"], cap
            )
            hint = f"stage {stage}: " + oom_hint(
                b, sc.training.recompute, sc.parallel.zero, sc.parallel.tp, p
            )
    return cols, hint
