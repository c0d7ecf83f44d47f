"""DeepSpeed ZeRO-3 on one GPU: gathers per submodule, gradient buckets, and the waits it inserts.

With ``parallel.data_parallel.deepspeed_zero3`` (the ``deepspeed`` profile's ZeRO-3) a
:class:`Zero3Sync` emits a stage's passes and data-parallel traffic as DeepSpeed v0.6–v0.9
runs them (deepspeed/runtime/zero/partitioned_param_coordinator.py, stage3.py):

* **visits**: every pass runs submodule by submodule (:mod:`clustersim.workload.zero3_modules`);
  a micro-batch visits each layer's submodules in its forward, and in its backward the
  output layer's, then — with full recompute — the layer's forward again (activation
  checkpointing re-runs it, its hooks fetching), then the layer's submodules last first.
  A layer's compute is cut among its visits in proportion to their seconds.
* **gathers**: :func:`clustersim.parallel.zero3.replay` says, per visit, which parameters are
  all-gathered for it (one coalesced collective) and which are prefetched after it (one
  more); both run on the ``gather`` lane in the order issued, each of a parameter's
  ``ceil(numel/n)·n`` elements. The host issues them without waiting for compute, so the
  lane runs ahead of the compute as far as the trace lets it.
* **waits**: a visit's compute waits for every all-gather issued before it
  (``current_stream().wait_stream(allgather_stream)``), not for the prefetch it issues.
  The gathered bytes are allocated when a gather starts and freed when the visit that
  releases them ends.
* **gradients**: after a backward visit its parameters' gradients join the bucket (``ipg``) in
  order (a parameter used twice — the tied embedding — once, after its last use: autograd
  sums into one leaf before the hook fires); a bucket holding something is reduce-scattered before a gradient that would take
  it past ``bucket_size`` joins. With ``overlap_grad_reduce`` (DeepSpeed's ``overlap_comm``)
  the reduce-scatter runs on the ``comm`` lane after the visit whose gradient last joined
  it (the reduction stream waits for the compute stream at each join); without, on the
  ``compute`` lane in line. Before the fourth outstanding bucket the host waits for the
  oldest (``__max_param_reduce_events`` = 2), and at the end of each micro-batch's backward
  it flushes the bucket and waits for all reductions (``reduce_and_partition_stream
  .synchronize()`` in the epilogue): what the host issues next — gathers and compute —
  waits for those reduce-scatters.

* **memory**: the host allocates each gather's buffer when it issues it, and PyTorch's
  caching allocator reuses a freed buffer only once the compute stream has passed the
  visit that freed it; when the GPU's memory (less the static bytes and one micro-batch's
  activations) runs out the allocator blocks the host. So a gather waits for the first
  visit whose end frees enough: the gathers run ahead of the compute as far as memory lets.

The first step's recording of the trace (no prefetch) and the memory-bound copies of
gradients into the bucket's buffer are not emitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...errors import ProgramError, ScenarioError
from ...parallel.zero3 import padded, replay, replay_2021
from ...program import COMPUTE
from ...workload.stage_cost import Segment
from .passes import PassWork

#: reduce-scatters a host lets run before it waits for the oldest (DeepSpeed's
#: ``__max_param_reduce_events`` = 2: it waits when a third is outstanding)
MAX_REDUCE_EVENTS = 2


def visits(modules) -> tuple[list[tuple[str, int, int]], list[tuple[str, int, int]]]:
    """The (forward, backward) visits ``(phase, layer, submodule)`` of a micro-batch over
    ``modules`` (per layer, its submodules), ``phase`` F, R (recomputed forward) or B."""
    fwd = [("F", layer, i) for layer, subs in enumerate(modules) for i in range(len(subs))]
    bwd = []
    for layer in reversed(range(len(modules))):
        bwd += [(ph, layer, i) for ph, i in layer_backward(modules[layer])]
    return fwd, bwd


def layer_backward(subs) -> list[tuple[str, int]]:
    """A layer's backward visits ``(phase, submodule)``: the submodules after its recomputed
    ones (the output layer's) backward, the recomputed ones forward again, then their and
    the leading ones' backward, last first."""
    rec = [i for i, sub in enumerate(subs) if sub.recompute]
    hi = max(rec, default=-1)
    lo = min(rec, default=0)
    return (
        [("B", i) for i in reversed(range(hi + 1, len(subs)))]
        + [("R", i) for i in range(lo, hi + 1) if rec]
        + [("B", i) for i in reversed(range(hi + 1))]
    )


def split_segments(segs, weights) -> list[tuple[Segment, ...]]:
    """``segs`` cut into ``len(weights)`` consecutive parts whose seconds are in proportion
    to ``weights`` (a compute segment is cut where a part ends, time and FLOPs in
    proportion; other segments stay whole in the part they start in)."""
    total, whole = sum(s.duration for s in segs), sum(weights)
    targets = [total * w / whole if whole > 0 else total / len(weights) for w in weights]
    out: list[list[Segment]] = [[]]
    need = targets[0]
    for seg in segs:
        rest = seg
        while len(out) < len(targets) and rest.kind == "compute" and not rest.ranks and rest.duration > need:
            share = need / rest.duration if rest.duration else 0.0
            out[-1].append(replace(rest, duration=need, flops=rest.flops * share))
            rest = replace(rest, duration=rest.duration - need, flops=rest.flops * (1 - share))
            out.append([])
            need = targets[len(out) - 1]
        out[-1].append(rest)
        need -= rest.duration
        while need <= 0 and len(out) < len(targets):
            out.append([])
            need += targets[len(out) - 1]
    out += [[] for _ in range(len(targets) - len(out))]
    return [tuple(part) or (Segment("compute"),) for part in out]


@dataclass
class Zero3Sync:
    """The ZeRO-3 ops of one GPU (module doc), through ``sync`` (its
    :class:`~.data_parallel.StageSync`: lanes, groups, the optimizer op)."""

    sync: object
    modules: tuple
    ids: dict = field(default_factory=dict)  # parameter key → id
    numel: list = field(default_factory=list)
    fwd: list = field(default_factory=list)
    bwd: list = field(default_factory=list)
    fetches: list = field(default_factory=list)
    pos: int = 0  # the next visit of the micro-batch
    gate: tuple = ()  # what the host last waited for: everything it issues later waits too
    last_gather: object = None
    live: dict = field(default_factory=dict)  # parameter id → bytes gathered and not freed
    numel_bytes: dict = field(default_factory=dict)  # the same, for the allocator's budget
    bucket: list = field(default_factory=list)  # parameter ids whose gradients wait in the bucket
    held: int = 0  # their elements
    reduces: list = field(default_factory=list)  # the micro-batch's reduce-scatters
    reduced: object = None
    source: object = None  # the visit whose gradient joined the bucket last
    old: bool = False  # DeepSpeed v0.3–v0.5's coordinator (2021)
    ready: dict = field(default_factory=dict)  # parameter id → the visit after which its gradient is whole
    copy: tuple = (0.0, float("inf"))  # (launch s, HBM bytes/s) of a copy kernel
    budget: float = float("inf")  # bytes the gathered parameters may hold (the GPU's free memory)
    allocated: int = 0  # bytes every gather so far allocated
    frees: list = field(default_factory=list)  # per visit run, (bytes freed up to its end, its last op)
    room_at: int = 0  # the first of them that may free enough for the next gather

    @classmethod
    def of(cls, sync, cost, reserve: int = 0) -> Zero3Sync:
        """The emitter of a GPU running chunk ``cost`` (its ``layer_modules``); ``reserve``:
        the bytes the CUDA context and NCCL hold on it (not the gathers' to take)."""
        if not cost.layer_modules:
            raise ScenarioError(
                "parallel.data_parallel.deepspeed_zero3",
                "set",
                "DeepSpeed ZeRO-3's coordinator needs a transformer's submodules; accepted: null (FSDP units)",
            )
        z = cls(sync, cost.layer_modules)
        z.fwd, z.bwd = visits(cost.layer_modules)
        trace = [z._params(layer, i) for _, layer, i in z.fwd + z.bwd]
        for v, (ph, layer, i) in enumerate(z.bwd):  # a gradient is ready after its last use
            if ph == "B":
                z.ready.update(dict.fromkeys(z._params(layer, i), len(z.fwd) + v))
        z.old = sync.dp.zero3.coordinator == "v0.3"
        z.copy = cost.zero3_copy
        z.budget = sync.dp.zero3.memory - cost.static.total - cost.activation_memory - reserve
        z.fetches = (replay_2021 if z.old else replay)(trace, z.numel, sync.dp.zero3)
        return z

    def _params(self, layer: int, i: int) -> tuple[int, ...]:
        """Ids of submodule i of ``layer``'s parameters (shared keys name one parameter)."""
        out = []
        for key, n in self.modules[layer][i].params:
            name = key if key.startswith("shared:") else (layer, key)
            if name not in self.ids:
                self.ids[name] = len(self.numel)
                self.numel.append(n)
            out.append(self.ids[name])
        return tuple(out)

    # -- a pass ----------------------------------------------------------------------------

    def emit(self, run, work: PassWork, j: int, it: int, *, name: str, after):
        """Emit pass (``work.phase``, micro-batch j) of iteration ``it`` visit by visit
        through ``run`` (:meth:`.data_parallel.StageSync.emit`); return its (first, last) op."""
        ph, cost = work.phase, work.cost
        if ph == "F":
            self.pos = 0
        mine = self.fwd if ph == "F" else self.bwd
        if self.pos != (0 if ph == "F" else len(self.fwd)):
            raise ProgramError("DeepSpeed ZeRO-3 runs each micro-batch's forward then its backward")
        pieces = cost.layer_segments(ph, work.split)
        layers = range(len(pieces)) if ph == "F" else reversed(range(len(pieces)))
        parts = []
        for layer in layers:
            here = [v for v in mine if v[1] == layer]
            weights = [self._seconds(v) for v in here]
            parts += list(zip(here, split_segments(pieces[layer], weights)))
        first, last = None, after
        for n, (visit, segs) in enumerate(parts):
            op0, last = self._visit(
                run,
                work.part(segs, n, len(parts)),
                visit,
                f"{name} l{visit[1]} m{visit[2]}{visit[0]}",
                last,
                j,
                it,
            )
            first = first or op0
        if ph != "F":
            last = self._flush(last, j, it)
            self.gate = (self.reduced.id,) if self.reduced is not None else self.gate  # the epilogue's sync
            self.reduces = []
        return first, last

    def _seconds(self, visit) -> float:
        ph, layer, i = visit
        sub = self.modules[layer][i]
        return sub.backward if ph == "B" else sub.forward

    def _visit(self, run, part, visit, name, after, j, it):
        """One visit: its gather, its compute (waiting for the gather lane), its prefetch,
        the release of what it frees, its gradients into the bucket."""
        fetch = self.fetches[self.pos]
        self.pos += 1
        self._gather(fetch.now, name, j, it, after)
        op0, last = run(part, name=name, after=after)
        if self.old:  # a synchronising fetch waited for everything this GPU had issued
            wait = self._outstanding(after) if fetch.synchronize else ()
        else:
            wait = (self.last_gather.id,) if self.last_gather is not None else ()
        op0.deps = op0.deps + tuple(d for d in dict.fromkeys(wait + self.gate) if d not in op0.deps)
        self._gather(fetch.prefetch, f"{name} prefetch", j, it, after)
        last.mem_free += sum(self.live.pop(p) for p in fetch.freed)
        freed = self.frees[-1][0] if self.frees else 0
        self.frees.append((freed + sum(self.numel_bytes.pop(p) for p in fetch.freed), last))
        if visit[0] == "B":
            _, layer, i = visit
            for p in self._params(layer, i):
                if self.ready[p] == self.pos - 1:
                    last = self._add_grad(p, last, j, it)
        return op0, last

    def _outstanding(self, after) -> tuple[int, ...]:
        """What a device synchronisation waits for: the last compute, gather and reduction."""
        ops = (after, self.last_gather, self.reduced)
        return tuple(op.id for op in ops if op is not None)

    def _room(self, nbytes: int) -> tuple[int, ...]:
        """What a gather of ``nbytes`` waits for so that the gathered parameters fit the
        budget: the first visit whose end frees enough (PyTorch's caching allocator reuses a
        freed buffer once the compute stream has passed it, and blocks the host when memory
        runs out); nothing when they fit, or when no visit run so far frees enough."""
        self.allocated += nbytes
        need = self.allocated - self.budget
        if need <= 0:
            return ()
        # the need only grows: the first visit that frees enough never moves back
        while self.room_at < len(self.frees) and self.frees[self.room_at][0] < need:
            self.room_at += 1
        return (self.frees[self.room_at][1].id,) if self.room_at < len(self.frees) else ()

    def _gather(self, params, name, j, it, after) -> None:
        """The all-gathers of ``params`` on the gather lane: one coalesced collective, or
        (2021) one per parameter, each after a device synchronisation."""
        s = self.sync
        group, _ = s._groups()
        width = s.dp.zero3.param_bytes
        sets = [(p,) for p in params] if self.old else [params] if params else []
        for q, ps in enumerate(sets):
            sizes = {p: padded(self.numel[p], len(group)) * width for p in ps}
            deps = self.gate + ((s.opt.id,) if s.opt is not None else ()) + self._room(sum(sizes.values()))
            pre = " pre" if name.endswith("prefetch") else ""
            op = s._collective(
                "gather",
                "all_gather",
                group,
                sum(sizes.values()),
                f"z3 ag it{it} mb{j} v{self.pos - 1}{pre} q{q} s{s.s} t{s.t}",
                f"zero3 all-gather {name}",
                deps + (self._outstanding(after) if self.old else ()),
                it,
            )
            op.mem_alloc += sum(sizes.values())
            self.live.update(sizes)
            self.numel_bytes.update(sizes)
            self.last_gather = op
            if self.old:  # all_gather into a list: the rank's pieces copied out of the flat buffer
                self.last_gather = self._copies("gather", group, sum(sizes.values()), name, (op.id,), it)

    def _copies(self, lane, group, nbytes, name, deps, it):
        """PyTorch ≤ 1.9's list-form all_gather / reduce_scatter (2021's DeepSpeed): one copy
        kernel per rank between the list and the flat buffer NCCL runs on (ProcessGroupNCCL's
        flatten), reading and writing ``nbytes``."""
        launch, bandwidth = self.copy
        s = self.sync
        seconds = len(group) * launch + 2 * nbytes / bandwidth
        return s.prog.add(
            s.dev,
            lane,
            COMPUTE,
            f"zero3 list copies {name}",
            duration=seconds,
            deps=deps,
            stage=s.s,
            iteration=it,
        )

    # -- gradients ---------------------------------------------------------------------------

    def _add_grad(self, p: int, last, j: int, it: int):
        """Parameter p's gradient joins the bucket, the bucket reduced first if it would
        overflow; return the op the next compute follows."""
        s = self.sync
        cap = None if s.dp.bucket_size is None else s.dp.bucket_size // s.dp.zero3.grad_bytes
        if self.bucket and cap is not None and self.held + self.numel[p] > cap:
            last = self._reduce(last, j, it)
        self.bucket.append(p)
        self.held += self.numel[p]
        self.source = last
        return last

    def _flush(self, last, j, it):
        """The epilogue: the bucket's remaining gradients reduced."""
        return self._reduce(last, j, it) if self.bucket else last

    def _reduce(self, last, j, it):
        """Reduce-scatter the bucket (module doc); return the op the next compute follows."""
        s = self.sync
        group, _ = s._groups()
        b = len(self.reduces)
        if self.old and self.reduced is not None and b:  # reduction_stream.synchronize() first
            self.gate = (self.reduced.id,)
        elif b > MAX_REDUCE_EVENTS:  # the host waits for the oldest outstanding reduction
            self.gate = (self.reduces[b - MAX_REDUCE_EVENTS - 1].id,)
        overlap = s.dp.overlap_grad_reduce
        sets = [(p,) for p in self.bucket] if self.old else [self.bucket]
        lane = "comm" if overlap else "compute"
        for q, ps in enumerate(sets):
            nbytes = sum(padded(self.numel[p], len(group)) for p in ps) * s.dp.zero3.grad_bytes
            deps = (self.source.id,)
            if self.old:  # the gradient's pieces flattened for NCCL
                deps = (self._copies(lane, group, nbytes, f"mb{j} b{b}", deps, it).id,)
            self.reduced = s._collective(
                lane,
                "reduce_scatter",
                group,
                nbytes,
                f"z3 rs it{it} mb{j} b{b} q{q} s{s.s} t{s.t} g{group[0]}",
                f"zero3 reduce-scatter mb{j} b{b}",
                deps,
                it,
            )
        self.reduces.append(self.reduced)
        s.reduced = self.reduced
        self.bucket, self.held = [], 0
        return last if overlap else self.reduced
