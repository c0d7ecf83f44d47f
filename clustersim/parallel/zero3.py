"""DeepSpeed ZeRO-3's parameter coordinator, replayed on numbers: which all-gathers it issues.

DeepSpeed (v0.6.0–v0.9.x, 2022–23: ``deepspeed/runtime/zero/partitioned_param_coordinator.py``)
hooks every submodule; before a submodule runs (forward, the forward recomputed by activation
checkpointing, or backward) ``fetch_sub_module``

1. all-gathers the submodule's parameters that are not yet available, in one coalesced
   collective (``all_gather_coalesced``; each parameter padded to a multiple of the group);
2. waits for them: the compute stream waits for everything queued on the all-gather stream
   so far (``current_stream().wait_stream(allgather_stream)``);
3. once a trace is complete (recorded on the first step), pops the submodule's parameters off
   the trace's parameter queue, then keeps popping, adding each parameter that is not
   available and not in flight, while the elements added are below
   ``min(max_live_parameters − available, prefetch_bucket_size)``, and all-gathers that set
   in one more coalesced collective (the prefetch).

After the submodule runs, ``release_sub_module`` frees each of its parameters unless it is
persistent (fewer elements than ``param_persistence_threshold``: never partitioned, never
gathered), a prefetch already passed its next use in the queue, or it is used again within
``max_reuse_distance`` elements of parameters in the trace. ``available`` counts the elements
gathered and not yet freed; the queue and the count restart every micro-batch
(``reset_step`` after each backward).

The replay is exact in what it issues: it depends on the trace only, never on timing (the
host-side throttles — at most two outstanding fetch events — order the host, not the
queued collectives). :func:`replay` returns, per visit, the parameters of the two
all-gathers and those freed after it.

DeepSpeed v0.3.13–v0.5.10 (2021; ``PartitionedParameterCoordinator`` in stage3.py) ran the
same hooks differently, :func:`replay_2021`: a fetch that gathers or finds its parameters in
flight waits for every in-flight gather and then ``torch.cuda.synchronize()`` s the device;
only then, and only when nothing is in flight and fewer than ``max_live_parameters``
elements are available, it prefetches the trace's next parameters that are not available
until ``prefetch_bucket_size`` elements are reached (the one that reaches it included);
each parameter is all-gathered on its own, each gather after a device synchronisation
(``_allgather_param``). A submodule's parameters are kept when the same submodule runs again
within ``max_reuse_distance`` elements (``_keep_for_later``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

#: DeepSpeed's defaults (deepspeed/runtime/zero/config.py): stage3_prefetch_bucket_size,
#: stage3_max_live_parameters, stage3_max_reuse_distance, stage3_param_persistence_threshold
PREFETCH_BUCKET, MAX_LIVE, MAX_REUSE, PERSISTENCE = 50_000_000, 1_000_000_000, 1_000_000_000, 100_000


@dataclass(frozen=True)
class Zero3Limits:
    """The coordinator's limits, in parameter elements (DeepSpeed's defaults), and the
    bytes per element its all-gathers and reduce-scatters move."""

    prefetch_bucket: int = PREFETCH_BUCKET
    max_live: int = MAX_LIVE
    max_reuse: int = MAX_REUSE
    persistence: int = PERSISTENCE
    param_bytes: int = 2
    grad_bytes: int = 2
    #: ``v0.6`` (:func:`replay`, 2022–23) or ``v0.3`` (:func:`replay_2021`, 2021)
    coordinator: str = "v0.6"
    #: the GPU's memory (bytes): what the gathers running ahead may fill (inf: unbounded)
    memory: float = float("inf")


@dataclass(frozen=True)
class Fetch:
    """What one visit issues: the parameters (ids) all-gathered ``now`` for it, those it
    ``prefetch`` es for later visits (each set one coalesced all-gather, in id order), and
    those freed once it has run."""

    now: tuple[int, ...]
    prefetch: tuple[int, ...]
    freed: tuple[int, ...]
    #: the fetch synchronised the device before the visit ran (2021's coordinator)
    synchronize: bool = False


def persistent(numel: int, limits: Zero3Limits) -> bool:
    """Whether a parameter of ``numel`` elements stays whole on every GPU
    (``mark_persistent_parameters``: ``ds_numel < param_threshold``)."""
    return numel < limits.persistence


def padded(numel: int, group: int) -> int:
    """Elements a parameter's all-gather or reduce-scatter moves over ``group`` GPUs: each
    rank's partition is ``ceil(numel / group)`` (``all_gather_coalesced``,
    ``reduce_scatter_coalesced``)."""
    return math.ceil(numel / group) * group


def replay(trace: list[tuple[int, ...]], numel: list[int], limits: Zero3Limits) -> list[Fetch]:
    """The coordinator's fetches, prefetches and releases over one micro-batch's ``trace``
    (per visit, the ids of the submodule's parameters; ``numel[i]``: parameter i's
    elements), the trace complete (module doc)."""
    keep = {i for i, n in enumerate(numel) if persistent(n, limits)}
    state = {i: "available" if i in keep else "absent" for i in range(len(numel))}
    queue = deque((p, step) for step, params in enumerate(trace) for p in sorted(set(params)))
    fetched_for: dict[int, int] = {}  # param → latest step a prefetch popped it for
    available, out = 0, []

    def gather(params) -> tuple[int, ...]:
        nonlocal available
        taken = tuple(sorted(p for p in set(params) if state[p] == "absent"))
        for p in taken:
            state[p] = "inflight"
            available += numel[p]
        return taken

    for step, params in enumerate(trace):
        mine = set(params)
        now = gather(mine)
        for p in mine:  # waited for: the stream waits, the parameters are available
            state[p] = "available"
        # pop the visit's own parameters off the queue (those no prefetch passed yet)
        pending = {p for p in mine if fetched_for.get(p, -(10**18)) < step}
        popped: set[int] = set()
        while queue and len(popped) < len(pending):
            p, used = queue.popleft()
            fetched_for[p] = used
            popped.add(p)
        if popped != pending:
            raise ValueError(f"trace out of order at visit {step}")
        room = min(limits.max_live - available, limits.prefetch_bucket) if limits.prefetch_bucket > 0 else 0
        ahead: list[int] = []
        taking = 0
        while queue and taking < room:
            p, used = queue.popleft()
            fetched_for[p] = max(fetched_for.get(p, -(10**18)), used)
            if state[p] == "absent" and p not in ahead:
                ahead.append(p)
                taking += numel[p]
        prefetch = gather(ahead)
        freed = []
        for p in sorted(mine):
            if p in keep:
                continue
            if fetched_for.get(p, -(10**18)) > step or _reused(
                trace, numel, step + 1, lambda visit, p=p: p in visit, limits.max_reuse
            ):
                continue
            state[p] = "absent"
            available -= numel[p]
            freed.append(p)
        out.append(Fetch(now, prefetch, tuple(freed)))
    return out


def replay_2021(trace: list[tuple[int, ...]], numel: list[int], limits: Zero3Limits) -> list[Fetch]:
    """As :func:`replay`, by DeepSpeed v0.3–v0.5's coordinator (module doc): ``now`` and
    ``prefetch`` are gathered one parameter at a time, ``synchronize`` marks the fetches
    that synchronised the device."""
    keep = {i for i, n in enumerate(numel) if persistent(n, limits)}
    state = {i: "available" if i in keep else "absent" for i in range(len(numel))}
    inflight: list[int] = []
    available, out = 0, []
    for step, params in enumerate(trace):
        mine = sorted(set(params))
        now = tuple(p for p in mine if state[p] == "absent")
        available += sum(numel[p] for p in now)
        synchronize = bool(now) or any(state[p] == "inflight" for p in mine)
        if synchronize:  # every handle in flight is waited for
            for p in inflight:
                state[p] = "available"
            inflight = []
        for p in mine:
            state[p] = "available"
        ahead: list[int] = []
        if not inflight and available < limits.max_live and limits.prefetch_bucket > 0:
            taking = 0
            for later in trace[step:]:
                for p in later:
                    if state[p] == "absent" and p not in ahead and taking < limits.prefetch_bucket:
                        ahead.append(p)
                        taking += numel[p]
        for p in ahead:
            state[p] = "inflight"
        inflight += ahead
        available += sum(numel[p] for p in ahead)
        freed = []
        if not _reused(trace, numel, step + 1, lambda visit, mine=params: visit == mine, limits.max_reuse):
            for p in mine:
                if p not in keep:
                    state[p] = "absent"
                    available -= numel[p]
                    freed.append(p)
        out.append(Fetch(now, tuple(ahead), tuple(freed), synchronize))
    return out


def _reused(trace, numel, start: int, used, limit: int) -> bool:
    """Whether a visit from ``start`` on ``used`` s the parameter again within ``limit``
    elements of the visits before it (``__params_to_release`` walks the visits while fewer
    elements have been passed; 2021's ``_keep_for_later`` keeps when the distance is below)."""
    passed = 0
    for params in trace[start:]:
        if passed >= limit:
            return False
        if used(params):
            return True
        passed += sum(numel[q] for q in set(params))
    return False
