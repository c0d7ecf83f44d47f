"""Peak memory per GPU of a scenario, estimated WITHOUT simulating — to prune a search.

:func:`estimate_peak_memory` is the one interface the search uses. For the models the
engine knows today it replays what the engine's memory ledger does: each GPU holds its
stage's static bytes (parameters, and whatever the model folds into them) and, per
micro-batch in flight, the stage's activation memory — allocated when a forward starts,
freed when its backward ends. How many micro-batches are in flight follows from the
schedule's per-stage order alone (1F1B: ``min(p − s, m)`` on stage s, so ``p`` on stage
0; GPipe: all ``m``), so the estimate is exact for the ledger and costs microseconds.

When the workload package provides its own estimator (a real memory model with
optimizer state, ZeRO sharding, workspace), :func:`estimate_peak_memory` uses it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ..hardware.gpus import get_gpu
from ..scenario import Scenario
from ..schedules import SCHEDULES
from ..workload.stage_cost import chunk_costs

#: where a workload-provided estimator may live: (module, function name)
_PROVIDERS = (
    ("clustersim.workload.memory_model", "estimate_peak_memory"),
    ("clustersim.workload.memory", "estimate_peak_memory"),
    ("clustersim.workload", "estimate_peak_memory"),
)


def max_in_flight(order: list[tuple]) -> int:
    """The most micro-batches whose forward has started and backward not ended, over a
    stage's order of ``("F", j)`` / ``("B", j)`` passes."""
    live = peak = 0
    for item in order:
        live += 1 if item[0] == "F" else -1 if item[0] == "B" else 0
        peak = max(peak, live)
    return peak


def _order(schedule, stage: int, p: int, m: int, v: int) -> list[tuple]:
    # the arguments the pipeline compiler passes (clustersim.schedules.orders)
    kwargs: dict[str, int] = {}
    if schedule.chunks != 1:
        kwargs["v"] = v
    if not schedule.flush:
        kwargs["iterations"] = 1
    return list(schedule.order(stage, p, m, **kwargs))


def ledger_peak_memory(sc: Scenario) -> int:
    """Peak bytes on the fullest GPU as the engine's ledger counts them: exact for
    schedules that keep one weight version and free a micro-batch's activations at its
    backward (GPipe, 1F1B, interleaved); a lower bound for the others (weight stashing,
    split backward), so pruning with it never drops a plan that fits."""
    p, v = sc.parallel.pp, sc.parallel.virtual_stages
    m = sc.num_microbatches
    costs = chunk_costs(sc, p * v)
    schedule = SCHEDULES[sc.parallel.schedule]
    peak = 0
    for s in range(p):
        mine = [k for k in range(len(costs)) if schedule.stage_of(k, p) == s]
        static = sum(int(costs[k].param_bytes) for k in mine)
        live = top = 0
        for item in _order(schedule, s, p, m, v):
            k = item[2] if len(item) > 2 else mine[0]
            if item[0] in ("F", "B"):
                live += int(costs[k].activation_memory) * (1 if item[0] == "F" else -1)
                top = max(top, live)
        peak = max(peak, static + top)
    return peak


def _provided() -> Callable[[Scenario], int] | None:
    for module, name in _PROVIDERS:
        try:
            fn = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if callable(fn):
            return fn
    return None


def estimate_peak_memory(sc: Scenario) -> int:
    """Peak bytes per GPU of scenario ``sc`` without simulating it.

    Synthetic models: the ledger replay (exact). Other models: the workload package's
    own estimator when it exists, else the ledger replay of their stage costs.
    """
    if sc.model.kind != "synthetic":
        provided = _provided()
        if provided is not None:
            return int(provided(sc))
    return ledger_peak_memory(sc)


def memory_capacity(sc: Scenario) -> int:
    """Bytes of memory on one of the scenario's GPUs (the catalog's marketed capacity)."""
    return get_gpu(sc.cluster.gpu).memory_bytes
