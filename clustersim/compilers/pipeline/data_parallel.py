"""Data-parallel communication as frameworks run it: buckets, overlap, sharding, FSDP.

With ``parallel.data_parallel`` set, the compiler (:mod:`.compiler`) hands each stage's
data-parallel traffic to a :class:`StageSync` instead of the one all-reduce of
:mod:`.gradient_sync`. Gradients of a model chunk fill buckets in reverse layer order
(Megatron-Core's param-and-grad buffer; PyTorch DDP's ``bucket_cap_mb``), a bucket closing
once it holds ``bucket_size`` bytes. Per optimizer step, on the stage's GPU:

* **replicated** (``zero: 0``): one all-reduce per bucket on the ``comm`` lane, over the
  stage's DP group. With ``overlap_grad_reduce`` the last gradient pass of each chunk
  (its last micro-batch's backward, or W when the backward is split) runs layer by layer
  and a bucket starts when the piece of its last layer to run (its first in model order)
  ends; without, all start after the stage's last pass. The optimizer waits for all.
* **sharded** (``zero: 1|2`` or ``distributed_optimizer``): the buckets are reduce-scatters,
  the optimizer steps the shard, then one all-gather of each bucket's parameters runs on
  the ``gather`` lane, in forward order. Without ``overlap_param_gather`` the next pass
  waits for all of them (Megatron's synchronous param sync in ``optimizer.step``); with
  it, the first forward of each chunk in the next step runs layer by layer, each layer
  waiting for its bucket's all-gather only, and the last step's all-gathers (which the
  next step's forward would issue) are not emitted.
* **FSDP** (``zero: 3``): every pass runs unit by unit (``fsdp_unit`` layers). Before a
  unit's forward — and before its backward with ``reshard_after_forward`` — its
  parameters are all-gathered on the ``gather`` lane; the all-gather is issued once the
  unit ``prefetch + 1`` places earlier in the stage's sequence of gathered units has run
  (prefetch 0: exposed; 1: during the previous unit, FSDP's default). The gathered bytes
  are allocated when the all-gather starts and freed when the unit's pass ends (or, not
  resharding, when its backward ends). After each unit's gradient pass a reduce-scatter of
  its gradients runs on the ``comm`` lane; with HSDP (``shard_group_size`` g) the shard
  group is g consecutive replicas and an all-reduce of the g-th shard across groups
  follows. The optimizer waits for the last of them; the next all-gathers wait for it.
* **DeepSpeed ZeRO-3** (``zero: 3`` with ``deepspeed_zero3``): the passes and their traffic
  are :class:`.zero3.Zero3Sync`'s — DeepSpeed's coordinator per submodule, not FSDP units.
* **Megatron-FSDP** (``zero: 3`` with ``megatron_fsdp``): the FSDP units above, each
  gather issued as far ahead as Megatron-FSDP's budget goes within its pass and the compute
  waiting for queued reduce-scatters beyond its capacity (:mod:`.megatron_fsdp`).
* **FSDP2** (``zero: 3`` with ``fsdp2``): :class:`.fsdp2.Fsdp2Sync`'s — FSDP2's copy-in and
  copy-out kernels and the waits its streams set, in place of the idealised units above.
* **experts** (``parallel.ep``): the expert-parallel experts' gradients and parameters
  fill their own buckets (Megatron-Core's separate expert-parallel param-and-grad buffers)
  reduced, and all-gathered, over the expert-data-parallel group, after the chunk's
  dense buckets; a layer's forward then waits for the later of its two all-gathers.

Every collective runs on the network model over its group (count and per-collective
latency grow with the group); compute slows while they run under
``cluster.comm_compute_slowdown`` as any collective's. Folding keeps the representative's
collectives with one arrival and its TP twins' groups as shadows; HSDP does not fold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import ProgramError
from ...parallel.data_parallel import DataParallel, buckets, fill_buckets, hsdp_groups, parameter_pieces
from ...program import COLLECTIVE, Op, Program
from ...schedules.orders import stage_chunks
from .context import CompileContext
from .fsdp2 import Fsdp2Sync
from .megatron_fsdp import MegatronFsdpSync
from .passes import PassWork
from .zero3 import Zero3Sync


@dataclass
class StageSync:
    """The data-parallel ops of one GPU (stage s, replica r, TP rank t) along its order."""

    dp: DataParallel
    prog: Program
    plan: object
    costs: list
    chunks: list[int]
    s: int
    t: int
    dev: int
    fold: bool
    split: set = field(default_factory=set)  # (j, k) whose backward is split (a W follows)
    final: set = field(default_factory=set)  # (phase, j, k): a chunk's last gradient pass of a step
    steps: int = 0  # optimizer steps in the order
    ends: dict = field(default_factory=dict)  # (k, layer) → end op of its final gradient piece
    gathers: dict = field(default_factory=dict)  # chunk → {layer: all-gather op} for its next forward
    # FSDP: per optimizer step, the units that all-gather, (phase, j, chunk, first layer) in
    # stage order; where each sits; the all-gathers issued and the units run, per step
    plan_units: list = field(default_factory=list)
    where: dict = field(default_factory=dict)
    issued: list = field(default_factory=list)
    ran: list = field(default_factory=list)
    name_of: object = None  # (phase, j, chunk) → the pass's name, as the compiler names it
    m: int = 1  # micro-batches per iteration (j // m is a pass's iteration)
    held: dict = field(default_factory=dict)  # (j, k, unit) → bytes kept from forward to backward
    unit_bytes: dict = field(default_factory=dict)  # a unit's last all-gather's id → the unit's bytes
    opt: Op | None = None
    reduced: Op | None = None  # the last FSDP gradient collective
    zero3: Zero3Sync | None = None  # DeepSpeed's coordinator in place of FSDP units (.zero3)
    fsdp2: Fsdp2Sync | None = None  # FSDP2's runtime in place of idealised units (.fsdp2)
    mfsdp: MegatronFsdpSync | None = None  # Megatron-FSDP's prefetch and reduce queue (.megatron_fsdp)
    hold: Op | None = None  # a reduce-scatter the next compute waits for (Megatron-FSDP's queue)

    @classmethod
    def of(cls, ctx: CompileContext, order, s: int, r: int, t: int, name_of) -> StageSync:
        """The sync of the GPU (stage ``s``, replica ``r``, TP rank ``t``) along ``order``
        under ``ctx`` (its ``data_parallel``, chunk costs, plan and Program);
        ``name_of(phase, j, k)`` names a pass as the compiler does."""
        dp, prog, plan, costs, m, fold = ctx.data_parallel, ctx.prog, ctx.plan, ctx.costs, ctx.m, ctx.fold
        if fold and dp.shard_group:
            raise ProgramError("HSDP (parallel.data_parallel.shard_group_size) cannot be folded")
        chunks = stage_chunks(ctx.schedule, s, plan.pp, ctx.v)
        sync = cls(dp, prog, plan, costs, chunks, s, t, plan.device(s, r, t), fold, name_of=name_of, m=m)
        sync.split = {(j, k) for ph, j, k in order if ph == "W"}
        if dp.zero3 is not None:
            sync.zero3 = Zero3Sync.of(sync, costs[chunks[0]], ctx.reserve)
        if dp.fsdp2:
            sync.fsdp2 = Fsdp2Sync.of(sync, costs[chunks[0]])
        seen: dict[int, tuple] = {}
        sync.plan_units = [[]]
        for ph, j, k in order:
            if ph == "O":
                sync.final.update(seen.values())
                seen, sync.steps = {}, sync.steps + 1
                sync.plan_units.append([])
                continue
            if ph == sync.grad_phase(j, k):
                seen[k] = (ph, j, k)
            if dp.fsdp and dp.zero3 is None and not dp.fsdp2 and sync._gathers(ph):
                for unit in sync.units(costs[k].layers, ph):
                    key = (ph, j, k, min(unit))
                    sync.where[key] = (len(sync.plan_units) - 1, len(sync.plan_units[-1]))
                    sync.plan_units[-1].append(key)
        sync.issued = [[] for _ in sync.plan_units]
        sync.ran = [[] for _ in sync.plan_units]
        if dp.megatron_fsdp is not None:
            layers = [n for k in chunks for n in sync._layers(k)]
            sync.mfsdp = MegatronFsdpSync.of(dp.megatron_fsdp, sync.plan_units, sync._elements, layers)
        return sync

    def _layers(self, k: int) -> list[int]:
        """Elements of each layer of chunk k without the embedding's and output layer's."""
        cost = self.costs[k]
        weights = list(cost.layer_bytes("weights"))
        weights[0] -= cost.root_weights[0]
        weights[-1] -= cost.root_weights[1]
        return [int(w) // self.dp.gather_bytes for w in weights]

    def _elements(self, key) -> int:
        """Elements a unit (phase, j, chunk, first layer) gathers."""
        _, _, k, first = key
        weights = self.costs[k].layer_bytes("weights")[first : first + self.dp.unit]
        return sum(int(w) for w in weights) // self.dp.gather_bytes

    def units(self, layers: int, ph: str) -> list[list[int]]:
        """The layers of each unit of a pass over ``layers`` layers, in the order it runs
        them (a forward first layer first; a unit is ``fsdp_unit`` layers, else one)."""
        size = self.dp.unit if self.dp.fsdp else 1
        units = [list(range(i, min(i + size, layers))) for i in range(0, layers, size)]
        return units if ph == "F" else [u[::-1] for u in units[::-1]]

    def _gathers(self, ph: str) -> bool:
        """Whether an FSDP unit all-gathers its parameters before a ``ph`` pass."""
        return ph == "F" or (ph == "B" and self.dp.reshard_after_forward)

    def grad_phase(self, j: int, k: int) -> str:
        """The phase producing the weight gradients of micro-batch j on chunk k."""
        return "W" if (j, k) in self.split else "B"

    def layered(self, ph: str, j: int, k: int) -> bool:
        """Whether pass (ph, j, k) runs layer by layer (unit by unit)."""
        if self.dp.fsdp or (self.dp.every_micro_batch and ph == self.grad_phase(j, k)):
            return True
        if self.dp.overlap_grad_reduce and (ph, j, k) in self.final:
            return True
        return ph == "F" and k in self.gathers

    # -- passes ----------------------------------------------------------------------------

    def emit(self, run, work: PassWork, j: int, k: int, it: int, *, name: str, after: Op | None):
        """Emit pass (``work.phase``, j, k) of iteration ``it`` unit by unit through
        ``run(work, name=…, after=…)`` (:func:`.passes.emit_pass`, its GPU and labels
        bound), after op ``after``; return its (first, last) op."""
        if self.zero3 is not None:
            return self.zero3.emit(run, work, j, it, name=name, after=after)
        if self.fsdp2 is not None:
            return self.fsdp2.emit(run, work, j, k, it, name=name, after=after)
        ph, cost = work.phase, work.cost
        pieces = cost.layer_segments(ph, work.split)
        units = self.units(len(pieces), ph)
        gathered = self.gathers.pop(k, {}) if ph == "F" else {}
        first, last = None, after
        for i, unit in enumerate(units):
            part = work.part(tuple(seg for layer in unit for seg in pieces[layer]), i, len(units))
            gather = self._gather(ph, j, k, unit) if self.dp.fsdp else None
            op0, last = run(part, name=f"{name} l{min(unit)}", after=last)
            waits = [gathered[layer].id for layer in unit if layer in gathered]
            if gather is not None:
                waits.append(gather.id)
            if self.hold is not None:  # the compute stream waits for a queued reduce-scatter
                waits.append(self.hold.id)
                self.hold = None
            op0.deps = op0.deps + tuple(dict.fromkeys(waits))
            first = first or op0
            if self.dp.fsdp:
                self._unit_done(cost, ph, j, k, it, unit, name, gather, last)
            elif (ph, j, k) in self.final or self.dp.every_micro_batch:
                for layer in unit:
                    self.ends[(k, layer)] = last
        if self.dp.every_micro_batch and ph == self.grad_phase(j, k):
            last = self._reduce_buckets(k, it, f"mb{j}", f" {name}", (last.id,), last)
        return first, last

    def _gather(self, ph, j, k, unit) -> Op | None:
        """The all-gather of an FSDP unit's parameters before its pass (None if it has none),
        issuing those up to ``prefetch`` units ahead in the step first."""
        if not self._gathers(ph):
            return None
        step, i = self.where[(ph, j, k, min(unit))]
        self._issue(step, self._reach(step, i))
        return self.issued[step][i]

    def _reach(self, step: int, i: int) -> int:
        """The last unit of the step whose all-gather unit i's hook issues: ``prefetch``
        ahead, or as far as Megatron-FSDP's budget goes within the pass."""
        return i + self.dp.prefetch if self.mfsdp is None else self.mfsdp.reach(step, i)

    def _issue(self, step: int, upto: int) -> None:
        """Emit the step's all-gathers up to unit ``upto``: unit x's once the unit before
        the one whose hook issues it (x − prefetch) has run (at the step's start: once the
        last optimizer step is done). They are emitted in the order they start, so the
        Program's order is the memory's."""
        units, issued, ran = self.plan_units[step], self.issued[step], self.ran[step]
        for x in range(len(issued), min(upto, len(units) - 1) + 1):
            ph, j, k, first = units[x]
            by = x - self.dp.prefetch if self.mfsdp is None else self.mfsdp.issuer(step, x)
            deps = (ran[by - 1],) if by > 0 else ((self.opt.id,) if self.opt is not None else ())
            layers = range(first, min(first + self.dp.unit, self.costs[k].layers))
            pieces = parameter_pieces(self.costs[k].layer_bytes("weights"), layers, self.dp.parameters)
            group, _ = self._groups()
            name = f"{self.name_of(ph, j, k)} l{first}"
            ops = []
            for q, nbytes in enumerate(pieces):  # back to back on the gather lane
                ops.append(
                    self._collective(
                        "gather",
                        "all_gather",
                        group,
                        nbytes,
                        f"fsdp ag it{(j // self.m)} {name} p{q} s{self.s} t{self.t} g{group[0]}",
                        f"fsdp all-gather {name}" + (f" p{q}" if len(pieces) > 1 else ""),
                        deps if q == 0 else (),
                        (j // self.m),
                    )
                )
            # the unit's bytes are taken when its first gather starts, freed as one
            ops[0].mem_alloc += sum(pieces)
            self.unit_bytes[ops[-1].id] = sum(pieces)
            issued.append(ops[-1])

    def _unit_done(self, cost, ph, j, k, it, unit, name, gather, last) -> None:
        """Free a unit's gathered parameters, reduce its gradients (FSDP)."""
        key = (j, k, min(unit))
        if gather is not None:
            step, i = self.where[(ph, j, k, min(unit))]
            self.ran[step].append(last.id)
            if i + 1 < len(self.plan_units[step]):
                self._issue(step, self._reach(step, i + 1))
            if ph == "F" and not self.dp.reshard_after_forward:
                self.held[key] = self.unit_bytes[gather.id]
            else:
                last.mem_free += self.unit_bytes[gather.id]
        if ph == "B" and not self.dp.reshard_after_forward:
            last.mem_free += self.held.pop(key, 0)
        if ph != self.grad_phase(j, k):
            return
        pieces = parameter_pieces(cost.layer_bytes("grads"), unit, self.dp.parameters)
        shard, across = self._groups()
        bucketed = fill_buckets(pieces, self.dp.bucket_size if self.dp.parameters > 1 else None)
        for b, nbytes in enumerate(bucketed):
            if self.mfsdp is not None:
                self.hold = self.mfsdp.wait(nbytes // self.dp.reduce_bytes) or self.hold
            part = f" b{b}" if len(bucketed) > 1 else ""
            tag = f"fsdp rs it{it} {name} l{min(unit)}{part} s{self.s} t{self.t}"
            what = f"fsdp reduce-scatter {name} l{min(unit)}{part}"
            self.reduced = self._collective(
                "comm", "reduce_scatter", shard, nbytes, f"{tag} g{shard[0]}", what, (last.id,), it
            )
            if self.mfsdp is not None:
                self.mfsdp.queued(self.reduced, nbytes // self.dp.reduce_bytes)
            if len(across) > 1:
                self.reduced = self._collective(
                    "comm",
                    "all_reduce",
                    across,
                    nbytes // len(shard),
                    f"{tag} x{shard.index(self.dev)}",
                    f"hsdp all-reduce {name} l{min(unit)}{part}",
                    (self.reduced.id,),
                    it,
                )

    # -- the optimizer step ------------------------------------------------------------------

    def before_optimizer(self, j: int, it: int, last: Op | None, label: str) -> tuple[int, ...]:
        """Emit the step's gradient reduction; return what the optimizer waits for."""
        deps = (last.id,) if last is not None else ()
        if self.dp.fsdp or self.dp.every_micro_batch:
            return deps + ((self.reduced.id,) if self.reduced is not None else ())
        for k in reversed(self.chunks):  # the last chunk's backward runs first
            self._reduce_buckets(k, it, f"u{j}", label, deps, None)
        self.ends = {}
        return deps + (self.reduced.id,)

    def _reduce_buckets(self, k: int, it: int, tag: str, label: str, deps, last) -> Op | None:
        """Emit chunk k's bucket reductions (its dense buffer's, then its experts', see
        :meth:`_buffers`): each after the piece of the last gradient pass that produced its
        last layer with overlap, else after ``deps``. Reducing every
        micro-batch without overlap (DeepSpeed ZeRO-2 reduces on the compute stream unless
        ``overlap_comm``) they run on the ``compute`` lane after ``last``, and the last of
        them is returned as the pass's end; otherwise ``last``."""
        kind, what = ("reduce_scatter", "reduce-scatter") if self.dp.sharded else ("all_reduce", "all-reduce")
        blocking = last is not None and not self.dp.overlap_grad_reduce
        for experts, (group, shadows, key) in self._buffers(k):
            grads = self.costs[k].layer_bytes("grads", experts)
            for b, bucket in enumerate(self._buckets(k, experts)):
                end = self.ends.get((k, bucket[-1])) if self.dp.overlap_grad_reduce else None
                self.reduced = self._collective(
                    "compute" if blocking else "comm",
                    kind,
                    group,
                    sum(grads[layer] for layer in bucket),
                    f"dp {what} it{it} {tag} s{self.s} {key} c{k} b{b}",
                    f"dp {what} s{self.s}{label}{' experts' if experts else ''} c{k} b{b}",
                    (end.id,) if end is not None else deps,
                    it,
                    shadows,
                )
        return self.reduced if blocking else last

    def after_optimizer(self, opt: Op, j: int, it: int, label: str) -> Op:
        """Emit the parameter all-gathers after the optimizer step ``opt``; return the op
        the next pass starts after."""
        self.opt, self.steps = opt, self.steps - 1
        if self.mfsdp is not None:
            self.mfsdp.reset()
        if not self.dp.sharded or self.dp.fsdp or (self.dp.overlap_param_gather and self.steps == 0):
            return opt
        last = opt
        for k in self.chunks:
            ops = {}  # layer → its last all-gather (the gather lane runs them in order)
            for experts, (group, shadows, key) in self._buffers(k):
                weights = self.costs[k].layer_bytes("weights", experts)
                for b, bucket in reversed(list(enumerate(self._buckets(k, experts)))):
                    last = self._collective(
                        "gather",
                        "all_gather",
                        group,
                        sum(weights[layer] for layer in bucket),
                        f"dp all-gather it{it} u{j} s{self.s} {key} c{k} b{b}",
                        f"dp all-gather s{self.s}{label}{' experts' if experts else ''} c{k} b{b}",
                        (opt.id,),
                        it,
                        shadows,
                    )
                    ops.update(dict.fromkeys(bucket, last))
            if self.dp.overlap_param_gather:
                self.gathers[k] = ops
        return opt if self.dp.overlap_param_gather else last

    # -- helpers -----------------------------------------------------------------------------

    def _buckets(self, k: int, experts: bool = False) -> list[list[int]]:
        """Chunk k's buckets, cut by its gradient bytes (the parameters gather in the same);
        ``experts``: those of its expert-parallel experts."""
        grads = self.costs[k].layer_bytes("grads", experts)
        return buckets(grads, self.dp.bucket_size, self.dp.first_bucket_size)

    def _buffers(self, k: int) -> list[tuple[bool, tuple]]:
        """Chunk k's gradient buffers: (experts?, (group, folded shadows or None, tag key)) —
        the dense one over DP, then the experts' over expert-DP where there is one."""
        out = [(False, (self._groups()[0], None, f"t{self.t}"))]
        edp = self.plan.expert_group(self.dev, "edp") if self.costs[k].layer_bytes("grads", True) else ()
        if len(edp) > 1:
            others = self.plan.expert_groups(self.s, "edp") if self.fold else ()
            out.append((True, (edp, tuple(g for g in others if g != edp), f"g{edp[0]}")))
        return out

    def _groups(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(shard group, replicate group) of this GPU (see :func:`hsdp_groups`)."""
        return hsdp_groups(self.plan.dp_group(self.s, self.t), self.dev, self.dp.shard_group)

    def _collective(self, lane, kind, group, nbytes, tag, name, deps, it, shadows=None) -> Op:
        """One collective of this GPU's (folded: with its TP twins' groups as shadows, or
        the given ``shadows``)."""
        twins = (
            tuple(tuple(d - self.t + q for d in group) for q in range(1, self.plan.tp)) if self.fold else ()
        )
        twins = twins if shadows is None else shadows
        return self.prog.add(
            self.dev,
            lane,
            COLLECTIVE,
            name,
            stage=self.s,
            iteration=it,
            nbytes=int(nbytes),
            deps=deps,
            group=group,
            collective=kind,
            tag=tag,
            arrivals=1 if self.fold else 0,
            shadows=twins,
        )
