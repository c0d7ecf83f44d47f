"""Stage sizing on heterogeneous clusters: each pipeline stage priced on its own GPUs.

With ``cluster.node_groups`` the stages of a pipeline may sit on different GPU types and
speeds (devices are numbered stage-major, so with ``pp = 2`` on 2 A100 nodes + 2 V100
nodes stage 0 holds the A100s). A stage runs at the pace of its slowest device, so the
time of layer ``i`` on stage ``s`` is ``max`` over the stage's devices of the layer's
cost-model time on that device's GPU type × its straggler slowdown ÷ its speed factor.

* ``partition: balanced`` — :func:`balanced_by_stage` splits the layers into contiguous
  chunks minimising the slowest chunk's time, each chunk priced on its stage, and keeps
  chunk ``k`` within the memory of its stage's smallest GPU: resident bytes (weights,
  gradients, optimizer state, buffers) plus the activations of the ``pp − s`` micro-batches
  1F1B keeps in flight on stage ``s``. If no split fits, memory is ignored (the simulation
  then reports the OOM).
* ``partition: pipedream`` — PipeDream's uniform recursion with a per-stage time factor
  and per-stage memory (:func:`stage_limits`).
"""

from __future__ import annotations

from ..hardware.node_groups import device_factors, device_gpus, device_specs
from ..parallel.plan import Plan
from ..schedules import SCHEDULES
from ..workload.rules import model_layers
from ..workload.stage_builder import contiguous_min_max
from ..workload.stage_cost import chunk_costs


def _stage_hardware(sc) -> list[tuple[set[tuple[str, float]], int]]:
    """Per stage: its distinct (GPU type, time factor) pairs and its smallest GPU memory."""
    plan = Plan.of(sc)
    gpus, specs = device_gpus(sc.cluster), device_specs(sc.cluster)
    factors = device_factors(sc.cluster, plan.num_devices)
    out = []
    for s in range(plan.pp):
        devs = [plan.device(s, r, t) for r in range(plan.dp) for t in range(plan.tp)]
        out.append(({(gpus[d], float(factors[d])) for d in devs}, min(specs[d].memory_bytes for d in devs)))
    return out


def _layer_costs(sc, gpu: str) -> list:
    n = model_layers(sc.model)
    return chunk_costs(sc, n, [1] * n, gpu=gpu)


def _priced(sc) -> tuple[list[tuple[set[tuple[str, float]], int]], dict[str, list]]:
    """The stage hardware (:func:`_stage_hardware`) and the per-layer costs on every GPU
    type the stages use and on ``cluster.gpu`` (the planner's reference), each priced once:
    the layer costs of a GPU type are the slow part, and most types serve several stages."""
    hw = _stage_hardware(sc)
    types = {g for pairs, _ in hw for g, _ in pairs} | {sc.cluster.gpu}
    return hw, {g: _layer_costs(sc, g) for g in types}


def _layer_times(hw, costs: dict[str, list]) -> list[list[float]]:
    """``[s][i]``: forward + backward time of layer i on stage s's slowest device."""
    per_gpu = {g: [c.forward + c.backward for c in layer_costs] for g, layer_costs in costs.items()}
    n = len(next(iter(per_gpu.values())))
    return [[max(per_gpu[g][i] * f for g, f in pairs) for i in range(n)] for pairs, _ in hw]


def balanced_by_stage(sc, chunks: int) -> list[int]:
    """Layers per model chunk, balanced on each chunk's stage hardware (module docstring)."""
    schedule, pp = SCHEDULES[sc.parallel.schedule], sc.parallel.pp
    hw, costs = _priced(sc)
    times = _layer_times(hw, costs)
    resident, act = [0.0], [0.0]  # prefix sums
    for c in costs[sc.cluster.gpu]:
        resident.append(resident[-1] + c.static.total)
        act.append(act[-1] + c.activation_memory)
    stage = [schedule.stage_of(k, pp) for k in range(chunks)]
    rows = [times[s] for s in stage]

    def memory(k: int, i: int, j: int) -> float:
        return resident[j] - resident[i] + (pp - stage[k]) * (act[j] - act[i])

    caps = [hw[s][1] for s in stage]
    fitting = contiguous_min_max(rows, lambda k, i, j: memory(k, i, j) <= caps[k])
    return fitting or contiguous_min_max(rows)


def stage_limits(sc) -> tuple[list[float], list[float]]:
    """PipeDream's per-stage inputs: per stage, its time for the whole model over the time
    on ``cluster.gpu`` (the GPU the planner's profiles are priced on) — its slowdown — and
    the memory of its smallest GPU (bytes)."""
    hw, costs = _priced(sc)
    ref = sum(c.forward + c.backward for c in costs[sc.cluster.gpu])
    factors = [sum(row) / ref if ref > 0 else 1.0 for row in _layer_times(hw, costs)]
    return factors, [float(cap) for _, cap in hw]
