"""Parameter-server training → Program (Li et al., OSDI 2014; SSP: Ho et al., NIPS 2013).

Every GPU is a data-parallel *worker*; the parameters live on *servers*, topology nodes
that become extra devices of the Program (named after their node, e.g. the star's
``server``). The model is cut into *tensors*: one per layer with ``per_layer``, else one
for the whole model, or ``buckets`` of consecutive layers (DynaComm's transmission
segments: fewer, larger messages pay the link latency fewer times but overlap less); a tensor sits on one server (round robin) or, with ``partition``,
is sharded evenly over every server. A (tensor, server) pair is a *key*.

Per worker and iteration, in this order:

* ``pull`` lane: a recv per key, tensors in forward order; the first forward that uses a
  tensor waits for its keys' pulls, so later pulls overlap earlier layers' compute;
* ``compute`` lane: for each micro-batch, the forward of every layer, then the backward
  in reverse (gradients accumulate over the micro-batches);
* ``push`` lane: after the last micro-batch's backward of a tensor's first layer, a send
  per key of its gradient — while the backward of the layers below goes on.

On each server, per worker: a ``push.w{k}`` lane receiving that worker's pushes and a
``pull.w{k}`` lane sending its pulls (a server streams to all workers at once); updates
on ``apply.w{k}`` (async: one per push, applied on arrival, workers' updates concurrent as
in lock-free asynchronous SGD) or on one ``update`` lane (sync: one update per key and
iteration once every worker's push arrived). Modes are only dependencies:

* a sync iteration i: update(key, i) waits for every worker's push of (key, i); every
  pull of (key, i + 1) waits for that update;
* an async iteration i: worker w's pull of (key, i + 1) waits for its own update of
  (key, i) (a worker reads its own writes) and, with staleness bound s, for every other
  worker's update of (key, i − s) — so no worker starts iteration j before every worker's
  gradients of iteration j − s − 1 were applied: it is never more than s updates ahead;
* hybrid: iterations below ``sync_after`` are async, the rest sync.

Server ops carry ``stage`` = the tensor index (the staleness metric in
:mod:`clustersim.trace.ps_metrics` reads them from the spans). An update takes the model's
optimizer time (the whole model on one GPU, :func:`clustersim.workload.stage_cost.chunk_costs`)
times the key's share of the parameter bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import accumulate, chain

from ...collectives.schedule import split
from ...hardware.node_groups import device_gpus, gpu_types
from ...memory_kinds import StaticMemory
from ...program import APPLY, COMPUTE, PULL, PUSH, RECV, SEND, UPDATE, Op, Program, server_lane
from ...workload.stage_cost import StageCost
from .check import HYBRID, SYNC


@dataclass(frozen=True)
class Key:
    """One server's part of one tensor: bytes pushed and pulled, its update time, and the
    optimizer state the server keeps for it."""

    tensor: int
    server: int  # device index of the server in the Program
    push_bytes: int
    pull_bytes: int
    update_s: float
    state_bytes: int

    @property
    def server_memory(self) -> StaticMemory:
        """What the server holds for this key for the whole run: the weights it serves, its
        optimizer state, and one buffer the pushed gradients are received into (and, in
        sync and hybrid iterations, summed into)."""
        return StaticMemory(weights=self.pull_bytes, optimizer=self.state_bytes, buffers=self.push_bytes)


@dataclass(frozen=True)
class PSConfig:
    """What the generator needs of ``parallel.parameter_server`` (see the schema)."""

    mode: str = SYNC
    staleness: int | None = None
    sync_after: int | None = None
    partition: bool = False
    per_layer: bool = True
    buckets: tuple[int, ...] | None = None

    def is_sync(self, iteration: int) -> bool:
        """Whether ``iteration`` is aggregated synchronously."""
        return self.mode == SYNC or (self.mode == HYBRID and iteration >= (self.sync_after or 0))


def tensors_of(layers: int, per_layer: bool, buckets: tuple[int, ...] | None = None) -> list[list[int]]:
    """The layers of each tensor, in forward order: ``buckets`` layers each when given."""
    if buckets is None:
        buckets = (1,) * layers if per_layer else (layers,)
    bounds = [0, *accumulate(buckets)]
    return [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]


def worker_static_memory(cost: StageCost) -> StaticMemory:
    """What a worker keeps of a layer for the whole run: everything but the optimizer
    state, which lives on the servers."""
    return replace(cost.static, optimizer=0)


def make_keys(
    costs: list[StageCost], tensors: list[list[int]], servers: list[int], partition: bool, optimizer_s: float
) -> list[list[Key]]:
    """The keys of every tensor: sharded over all ``servers`` or on server ``t mod k``;
    a key pushes its share of the gradient bytes, pulls its share of the weights and keeps
    its share of the optimizer state on its server."""
    total = sum(c.weight_bytes for c in costs)
    out = []
    for t, layers in enumerate(tensors):
        grad = sum(costs[layer].gradient_bytes for layer in layers)
        params = sum(costs[layer].weight_bytes for layer in layers)
        state = sum(costs[layer].static.optimizer for layer in layers)
        share = params / total if total else len(layers) / len(costs)
        homes = servers if partition else [servers[t % len(servers)]]
        k = len(homes)
        out.append(
            [
                Key(t, s, g, p, optimizer_s * share / k, o)
                for s, g, p, o in zip(homes, split(grad, k), split(params, k), split(state, k), strict=True)
            ]
        )
    return out


def compile_parameter_server(
    cfg: PSConfig,
    costs: list[StageCost],
    m: int,
    iterations: int,
    workers: int,
    server_names: list[str],
    optimizer_s: float,
    worker_costs: list[list[StageCost]] | None = None,
) -> Program:
    """The Program of ``iterations`` PS iterations: ``workers`` GPUs (devices 0..w−1, one
    cost per layer in ``costs``, ``m`` micro-batches each) and the servers (devices w..,
    named ``server_names``); ``optimizer_s`` is the whole model's update time, split over
    the keys by parameter bytes. ``worker_costs`` (mixed GPU types): worker w's per-layer
    costs on its own GPU, instead of ``costs``. See the module docstring."""
    servers = list(range(workers, workers + len(server_names)))
    prog = Program(workers + len(servers), [f"gpu{d}" for d in range(workers)] + list(server_names))
    tensors = tensors_of(len(costs), cfg.per_layer, cfg.buckets)
    keys = make_keys(costs, tensors, servers, cfg.partition, optimizer_s)
    first = {layers[0]: t for t, layers in enumerate(tensors)}  # a tensor's first layer in forward order
    for w in range(workers):
        prog.static_memory[w] = StaticMemory.sum(worker_static_memory(c) for c in costs)
    for key in chain.from_iterable(keys):
        prog.static_memory[key.server] += key.server_memory
    # Workers first, servers after: a worker's op ids do not depend on the mode, so
    # compute noise (drawn per op id) is the same in sync and async runs of a scenario.
    pulls, pushes = {}, {}
    for w in range(workers):
        for i in range(iterations):
            _emit_worker(
                prog, w, i, worker_costs[w] if worker_costs else costs, keys, first, m, pulls, pushes
            )
    _emit_servers(prog, cfg, workers, iterations, keys, pulls, pushes)
    return prog


def parameter_server_program(job) -> Program:
    """The Program of a :class:`~clustersim.resolve.Job` with ``parallel.parameter_server``:
    its per-layer costs (each worker's on its own GPU type), the whole model's optimizer time."""
    ps = job.parallel.parameter_server
    cfg = PSConfig(
        ps.mode,
        ps.staleness,
        ps.sync_after,
        ps.partition,
        ps.per_layer,
        tuple(ps.buckets) if ps.buckets else None,
    )
    per_worker = None
    if len(gpu_types(job.cluster)) > 1:  # each worker prices the model on its own GPU type
        per_worker = [job.layer_costs[g] for g in device_gpus(job.cluster)[: job.num_gpus]]
    return compile_parameter_server(
        cfg,
        job.layer_costs[job.cluster.gpu],
        job.num_microbatches,
        job.simulation.iterations,
        job.num_gpus,
        ps.servers,
        job.chunk_costs[0].optimizer,
        per_worker,
    )


def _emit_worker(
    prog: Program,
    w: int,
    i: int,
    costs: list[StageCost],
    keys: list[list[Key]],
    first: dict,
    m: int,
    pulls: dict,
    pushes: dict,
) -> None:
    names = prog.device_names
    for t, tensor_keys in enumerate(keys):
        for key in tensor_keys:
            pulls[w, key, i] = prog.add(
                w, PULL, RECV, f"pull T{t} {names[key.server]}", stage=t, iteration=i, nbytes=key.pull_bytes
            )
    last = len(costs) - 1
    for j in range(m):
        for layer, c in enumerate(costs):
            t = first.get(layer)
            deps = tuple(pulls[w, key, i].id for key in keys[t]) if j == 0 and t is not None else ()
            prog.add(
                w,
                "compute",
                COMPUTE,
                f"F{j} L{layer}",
                stage=0,
                microbatch=j,
                phase="F",
                iteration=i,
                duration=c.forward,
                flops=c.forward_flops,
                deps=deps,
                mem_alloc=c.activation_memory,
            )
        for layer in range(last, -1, -1):
            c = costs[layer]
            b = prog.add(
                w,
                "compute",
                COMPUTE,
                f"B{j} L{layer}",
                stage=0,
                microbatch=j,
                phase="B",
                iteration=i,
                duration=c.backward,
                flops=c.backward_flops,
                mem_free=c.activation_memory,
            )
            t = first.get(layer)
            if j == m - 1 and t is not None:
                for key in keys[t]:
                    pushes[w, key, i] = prog.add(
                        w,
                        PUSH,
                        SEND,
                        f"push T{t} {names[key.server]}",
                        stage=t,
                        iteration=i,
                        nbytes=key.push_bytes,
                        deps=(b.id,),
                    )


def _emit_servers(
    prog: Program,
    cfg: PSConfig,
    workers: int,
    iterations: int,
    keys: list[list[Key]],
    pulls: dict,
    pushes: dict,
) -> None:
    updates: dict[tuple, Op] = {}  # (worker, key, i) → the op that applied that worker's gradient
    flat = [key for tensor_keys in keys for key in tensor_keys]
    pushed = [key for tensor_keys in reversed(keys) for key in tensor_keys]  # backward order
    for i in range(iterations):
        for key in flat:
            for w in range(workers):
                deps = _pull_deps(cfg, w, key, i, workers, updates)
                send = prog.add(
                    key.server,
                    server_lane(PULL, w),
                    SEND,
                    f"pull T{key.tensor} w{w}",
                    stage=key.tensor,
                    iteration=i,
                    nbytes=key.pull_bytes,
                    deps=deps,
                )
                _pair(prog, send, pulls[w, key, i])
        for key in pushed:
            recvs = []
            for w in range(workers):
                r = prog.add(
                    key.server,
                    server_lane(PUSH, w),
                    RECV,
                    f"push T{key.tensor} w{w}",
                    stage=key.tensor,
                    iteration=i,
                    nbytes=key.push_bytes,
                )
                _pair(prog, pushes[w, key, i], r)
                recvs.append(r.id)
                if not cfg.is_sync(i):
                    updates[w, key, i] = prog.add(
                        key.server,
                        server_lane(APPLY, w),
                        COMPUTE,
                        f"apply T{key.tensor} w{w}",
                        stage=key.tensor,
                        phase="O",
                        iteration=i,
                        duration=key.update_s,
                        deps=(r.id,),
                    )
            if cfg.is_sync(i):
                u = prog.add(
                    key.server,
                    UPDATE,
                    COMPUTE,
                    f"update T{key.tensor}",
                    stage=key.tensor,
                    phase="O",
                    iteration=i,
                    duration=key.update_s,
                    deps=tuple(recvs),
                )
                for w in range(workers):
                    updates[w, key, i] = u


def _pull_deps(cfg: PSConfig, w: int, key: Key, i: int, workers: int, updates: dict) -> tuple[int, ...]:
    """What the server's send of ``key`` to worker ``w`` for iteration ``i`` waits for."""
    if i == 0:
        return ()
    if cfg.is_sync(i - 1):
        return (updates[w, key, i - 1].id,)
    deps = [updates[w, key, i - 1].id]  # its own last gradient
    lag = i - (cfg.staleness or 0) - 1
    if cfg.staleness is not None and lag >= 0:
        deps += [updates[v, key, lag].id for v in range(workers) if v != w]
    return tuple(deps)


def _pair(prog: Program, send: Op, recv: Op) -> None:
    send.peer, recv.peer = recv.id, send.id
