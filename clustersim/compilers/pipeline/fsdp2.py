"""PyTorch FSDP2 (``fully_shard``) on one GPU: its unit all-gathers, copy kernels, streams and waits.

With ``parallel.data_parallel.fsdp2`` (the ``fsdp2`` profile's ZeRO-3) an :class:`Fsdp2Sync`
emits a stage's passes unit by unit (``fsdp_unit`` layers, torchtitan wraps each
TransformerBlock) as FSDP2 runs them (torch/distributed/fsdp/_fully_shard/
_fsdp_param_group.py, _fsdp_collectives.py; the host, which only enqueues, runs ahead):

* **unshard** (``foreach_all_gather``): on the copy-in stream (lane ``gather copy``) the
  copy-in — a foreach copy casting the fp32 shard to the parameter dtype, then
  ``all_gather_copy_in`` into the output's slot: 2 kernels reading 4 + e and writing 2e
  bytes per shard element (e: ``param_gather_dtype``'s bytes) — then on the all-gather
  stream (lane ``gather``) the all-gather of the unit's padded elements
  ``ceil(numel/n)·n`` (each rank's shard padded, ``_get_dim0_padded_size``), e bytes each.
* **wait_for_unshard**: the copy-out (``split_with_sizes_copy``, one kernel reading and
  writing the e bytes of every padded element) on the compute stream after the all-gather;
  the unit's compute follows. Both unshard streams then wait for an event: in forward the
  previous unit's copy-out (its all-gather output is freed only after this copy-out — the
  note "Overlapping all-gather copy-in and all-gather"), in backward this unit's copy-out.
  Later all-gathers wait for that event, which is what bounds how far they run ahead.
* **prefetch**: in forward the next unit's all-gather is issued when its pre-forward runs,
  which the host reaches right after this unit's wait (implicit prefetch: one unit);
  ``prefetch`` p > 1 issues the next p (``set_modules_to_forward_prefetch``). In backward
  ``_backward_prefetch`` issues the next unit's (reverse post-forward order) after this
  unit's wait; p > 1: the next p (``set_modules_to_backward_prefetch``); p = 0 issues each
  at its own pre-backward, with the same waits, so the same timing.
* **reshard**: with ``reshard_after_forward`` a unit's unsharded parameters are freed after
  its forward and all-gathered again before its backward — except the chunk's last unit
  (torchtitan: ``reshard_after_forward = layer_id < len(layers) − 1``; the root's are never
  resharded after forward), whose backward runs first and uses them where they are.
* **reshard to g** (``reshard_after_forward`` an integer g: FSDP2's post-forward mesh):
  after a block's forward a copy kernel keeps this GPU's 1/g of its parameters
  (``_to_sharded_post_forward``) and frees the rest; its backward all-gather reads that
  shard (already in the parameter dtype: 4e bytes per shard element copied in) over the g
  consecutive GPUs of the shard group holding it, after that copy.
* **reduce** (``foreach_reduce``): after a unit's backward the compute stream waits for the
  previous reduce-scatter (``reduce_scatter_state``: its input buffer is then reused), runs
  the copy-in (``chunk_cat``: reads the e-byte gradients, writes them in the reduce dtype r
  — ``grad_reduce_dtype``, fp32 in torchtitan — padded), then the reduce-scatter stream
  (lane ``comm``) reduce-scatters ``ceil(numel/n)·n·r`` bytes over the shard group
  (ReduceOp.AVG: no division kernel). With HSDP (``shard_group_size``) the all-reduce
  stream (lane ``replicate``) all-reduces the shard, ``ceil(numel/n)·r`` bytes, across the
  replicas after it. The optimizer waits for the last of them; the next step's
  all-gathers wait for the optimizer.
* **end of backward** (the root's final callback, ``finalize_backward``): the compute stream
  waits for every reduction of the backward before what follows — the next micro-batch's
  forward included.
* **memory**: a unit's all-gather output (padded, e bytes per element) is allocated at its
  copy-in and freed after its copy-out (forward: after the next unit's copy-out, or at the
  end of the forward, where the root flushes it); its unsharded parameters from its
  copy-out until its reshard; the reduce-scatter input from its copy-in until the
  reduce-scatter ends. Every copy kernel is priced at the GPU's launch plus its bytes on the
  calibrated curve of contiguous memory-bound kernels (``tuned``,
  :mod:`clustersim.workload.memory_bandwidth`).

Not emitted: the small post-reduce view/cast on the reduce-scatter stream, the lazy
initialisation of the first step, and gradient accumulation without reduction
(``set_requires_gradient_sync(False)``: FSDP2 reduces every micro-batch by default). The
gathers run ahead by the streams' waits, not by dependencies on the ops that free memory;
the memory replay without simulating (``Program.memory_peaks``) counts each gather's
buffers from the earliest point its copy-in can start, so it holds them as the run does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import ScenarioError
from ...parallel.zero3 import padded  # each rank's shard padded to ceil(numel / n), as ZeRO-3's
from ...program import COMPUTE, Op
from .passes import PassWork

#: bytes per element of the sharded parameters the copy-in reads (fp32 master weights under
#: torchtitan's MixedPrecisionPolicy)
SHARD_BYTES = 4
#: the root unit: the parameters outside the blocks (embedding, final norm, output layer)
ROOT = "root"


def label(unit) -> str:
    """A unit's name within its pass: ``root`` or ``l<first layer>``."""
    return ROOT if unit == ROOT else f"l{min(unit)}"


@dataclass(frozen=True)
class UnitBytes:
    """The bytes one FSDP2 unit moves over a shard group of ``n``: ``numel`` parameter
    elements gathered, ``e`` bytes each, and ``grads`` gradient elements reduced, ``r`` bytes
    each (the same count for a real model), each padded to a multiple of n."""

    numel: int
    grads: int
    n: int
    e: int
    r: int

    @property
    def gathered(self) -> int:
        """The all-gather's bytes (its output buffer; the unsharded parameters)."""
        return padded(self.numel, self.n) * self.e

    @property
    def reduced(self) -> int:
        """The reduce-scatter's bytes (its input buffer)."""
        return padded(self.grads, self.n) * self.r

    @property
    def shard(self) -> int:
        """The HSDP all-reduce's bytes: one rank's reduced shard."""
        return self.reduced // self.n

    def copy_in(self) -> tuple[int, int]:
        """HBM bytes of the all-gather copy-in's two kernels: the fp32 shard read and cast
        (the foreach copy), then copied into the output's slot (``all_gather_copy_in``)."""
        shard = padded(self.numel, self.n) // self.n
        return shard * (SHARD_BYTES + self.e), shard * 2 * self.e

    def copy_in_post(self, g: int) -> tuple[int, int]:
        """The same from a post-forward shard over g GPUs (``reshard_after_forward`` g),
        already in the parameter dtype."""
        shard = padded(self.numel, self.n) // g
        return shard * 2 * self.e, shard * 2 * self.e

    def copy_out(self) -> tuple[int]:
        """HBM bytes of the copy-out: every gathered byte read and written."""
        return (2 * self.gathered,)

    def reduce_copy_in(self) -> tuple[int]:
        """HBM bytes of the reduce-scatter copy-in: e-byte gradients read, r-byte written."""
        return (padded(self.grads, self.n) * (self.e + self.r),)


@dataclass
class Fsdp2Sync:
    """The FSDP2 ops of one GPU (module doc), through ``sync`` (its
    :class:`~.data_parallel.StageSync`: lanes, groups, the optimizer op)."""

    sync: object
    copy: tuple = (0.0, float("inf"), 0.0)  # a copy kernel's (launch s, plateau bytes/s, ramp bytes)
    g: int | None = None  # the post-forward shard's GPUs (``reshard_after_forward`` an integer)
    gate: Op | None = None  # the event the unshard streams wait for
    state: tuple | None = None  # forward: (copy-out, all-gather bytes) whose output is kept
    issued: dict = field(default_factory=dict)  # (j, k, first) → (all-gather op, UnitBytes)
    held: dict = field(default_factory=dict)  # (j, k, first) → unsharded bytes kept to backward
    post: dict = field(default_factory=dict)  # (j, k, first) → (its post-forward copy, bytes kept)
    rs_state: Op | None = None  # the last reduce-scatter (the compute stream waits for it)
    flush: Op | None = None  # the backward's last reduction, which the next compute waits for

    @classmethod
    def of(cls, sync, cost) -> Fsdp2Sync:
        """The emitter of a GPU running chunk ``cost``; refuses what FSDP2 is not modelled for."""
        if sync.dp.parameters != 1:
            raise ScenarioError(
                "parallel.data_parallel.parameters_per_layer",
                sync.dp.parameters,
                "FSDP2 all-gathers a unit's parameters in one collective; accepted: 1",
            )
        if sync.split:
            raise ScenarioError(
                "parallel.schedule", "a split backward", "FSDP2 reduces after each unit's whole backward"
            )
        g, shard = sync.dp.reshard_group, len(sync._groups()[0])
        if g is not None and (g == 1 or shard % g):
            raise ScenarioError(
                "parallel.data_parallel.reshard_after_forward",
                g,
                f"true, false or a divisor of the shard group of {shard} above 1",
            )
        # resharding to the whole shard group is resharding (FSDP2: no post-forward mesh)
        return cls(sync, cost.copy_kernel, None if g == shard else g)

    # -- a pass ----------------------------------------------------------------------------

    def emit(self, run, work: PassWork, j: int, k: int, it: int, *, name: str, after):
        """Emit pass (``work.phase``, micro-batch j, chunk k) of iteration ``it`` unit by unit
        through ``run`` (:meth:`.data_parallel.StageSync.emit`); return its (first, last) op."""
        s, ph = self.sync, work.phase
        pieces = work.cost.layer_segments(ph, work.split)
        units = s.units(len(pieces), ph)
        ahead = max(s.dp.prefetch, 1 if ph == "F" else 0)
        root = sum(s.costs[k].root_weights) > 0
        first, last = None, after
        if root and ph == "F":  # the root's parameters (embedding, output layer) first
            _, last = self._unit(run, ph, (j, k), ROOT, None, units[:ahead], it, name, last)
        for i, unit in enumerate(units):
            part = work.part(tuple(seg for layer in unit for seg in pieces[layer]), i, len(units))
            later = units[i + 1 : i + 1 + ahead]
            op0, last = self._unit(run, ph, (j, k), unit, part, later, it, name, last)
            first = first or op0
        if root and ph != "F":  # the root's gradients: reduced by the final callback, last
            _, last = self._unit(run, ph, (j, k), ROOT, None, [], it, name, last)
        if ph != "F":  # the final callback: the compute stream waits for every reduction
            self.flush = s.reduced
        if ph == "F" and self.state is not None:  # the root flushes the kept all-gather output
            last.mem_free += self.state[1]
            self.state = None
        return first, last

    def _unit(self, run, ph, mb, unit, part, later, it, name, last):
        """One unit of pass ``ph`` of micro-batch and chunk ``mb``: its wait (copy-out), the
        prefetch of the units ``later``, its compute ``part`` (None: the root's, which runs
        inside its first and last layers), its reshard and reduction; return (first op, last op)."""
        key = (*mb, label(unit))
        flush, self.flush = self.flush, None
        out = self._copy_out(ph, key, unit, it, name, last, flush)
        for u in later:  # the prefetch, after this unit's wait
            self._unshard(ph, (*mb, label(u)), u, it, name)
        op0, last = None, out or last
        if part is not None:
            op0, last = run(part, name=f"{name} {label(unit)}", after=last)
            waits = tuple(op.id for op in (out, flush) if op is not None and op.id not in op0.deps)
            op0.deps = op0.deps + waits
        return op0, self._post(ph, key, unit, it, name, last)

    def _gathers(self, ph: str, k: int, unit) -> bool:
        """Whether a unit all-gathers before its ``ph`` pass (module doc: reshard)."""
        if ph == "F":
            return True
        return (
            unit != ROOT and self.sync.dp.reshard_after_forward and max(unit) < self.sync.costs[k].layers - 1
        )

    def _bytes(self, k: int, unit) -> UnitBytes:
        """What ``unit`` of chunk k moves: its layers' parameters and gradients (the root's
        outside them)."""
        s = self.sync
        cost = s.costs[k]
        e, r = s.dp.gather_bytes, s.dp.reduce_bytes
        root = sum(cost.root_weights) // e
        if unit == ROOT:
            numel = grads = root
        else:
            ends = cost.root_weights[0] * (0 in unit) + cost.root_weights[1] * (cost.layers - 1 in unit)
            numel = (sum(int(cost.layer_bytes("weights")[layer]) for layer in unit) - ends) // e
            grads = sum(int(cost.layer_bytes("grads")[layer]) for layer in unit) // r - ends // e
        group, _ = s._groups()
        return UnitBytes(numel, grads, len(group), e, r)

    def _kernel(self, lane: str, what: str, kernels: tuple[int, ...], deps, it: int) -> Op:
        """Memory-bound copy kernels on ``lane``, one per entry of ``kernels`` (its HBM bytes),
        each a launch plus its bytes on the GPU's calibrated curve."""
        s = self.sync
        launch, plateau, ramp = self.copy
        return s.prog.add(
            s.dev,
            lane,
            COMPUTE,
            what,
            duration=sum(launch + (nbytes + ramp) / plateau for nbytes in kernels),
            deps=tuple(d.id for d in deps if d is not None),
            stage=s.s,
            iteration=it,
        )

    def _comm(self, lane, kind, group, nbytes, what, tag, deps, it) -> Op:
        """One collective of this GPU's, ``tag`` naming its rendezvous within the iteration."""
        s = self.sync
        return s._collective(lane, kind, group, nbytes, f"fsdp2 {tag} it{it} s{s.s} t{s.t}", what, deps, it)

    def _unshard(self, ph, key, unit, it, name) -> None:
        """Issue a unit's copy-in and all-gather (once per pass), waiting for the gate."""
        k = key[1]
        if key in self.issued or not self._gathers(ph, k, unit):
            return
        s = self.sync
        ub = self._bytes(k, unit)
        lab = f"{name} {label(unit)}"
        group, _ = s._groups()
        post, nbytes = self.post.get(key, (None, 0)) if ph != "F" else (None, 0)
        if post is not None:  # from the post-forward shard, over its g GPUs
            g = self.g
            start = group.index(s.dev) // g * g
            group = group[start : start + g]
        moved = ub.copy_in() if post is None else ub.copy_in_post(len(group))
        wait = (self.gate, s.opt, post)
        copy = self._kernel("gather copy", f"fsdp2 all-gather copy-in {lab}", moved, wait, it)
        copy.mem_alloc += ub.gathered
        deps = tuple(d.id for d in (copy, self.gate, s.opt) if d is not None)
        what = f"fsdp2 all-gather {lab}"
        ag = self._comm("gather", "all_gather", group, ub.gathered, what, f"ag {lab} g{group[0]}", deps, it)
        self.issued[key] = (ag, ub)

    def _copy_out(self, ph, key, unit, it, name, last, flush=None) -> Op | None:
        """The unit's wait_for_unshard: its copy-out on the compute stream (None when its
        parameters are still unsharded), and the gate it sets."""
        self._unshard(ph, key, unit, it, name)
        got = self.issued.pop(key, None)
        if got is None:
            return None
        ag, ub = got
        out = self._kernel(
            "compute",
            f"fsdp2 all-gather copy-out {name} {label(unit)}",
            ub.copy_out(),
            (last, ag, flush),
            it,
        )
        out.mem_alloc += ub.gathered  # the unsharded parameters
        if ph == "F":
            if self.state is not None:
                self.gate, kept = self.state
                out.mem_free += kept
            self.state = (out, ub.gathered)
        else:
            self.gate = out
            out.mem_free += ub.gathered  # the all-gather output, freed after the copy-out
            out.mem_free += self.post.pop(key, (None, 0))[1]  # the post-forward shard
        return out

    def _post(self, ph, key, unit, it, name, last) -> Op:
        """After a unit's pass: its reshard, and after its backward the gradient reduction;
        return the op the next compute follows."""
        s, k = self.sync, key[1]
        ub = self._bytes(k, unit)
        if ph == "F":
            if not self._gathers("B", k, unit):
                self.held[key] = ub.gathered
            elif self.g is None:
                last.mem_free += ub.gathered
            else:  # _to_sharded_post_forward: this GPU's 1/g of the unsharded parameters kept
                kept = ub.gathered // self.g
                what = f"fsdp2 post-forward shard {name} {label(unit)}"
                last = self._kernel("compute", what, (2 * kept,), (last,), it)
                last.mem_alloc += kept
                last.mem_free += ub.gathered
                self.post[key] = (last, kept)
            return last
        last.mem_free += ub.gathered if self._gathers("B", k, unit) else self.held.pop(key, 0)
        lab = f"{name} {label(unit)}"
        copy = self._kernel(
            "compute",
            f"fsdp2 reduce-scatter copy-in {lab}",
            ub.reduce_copy_in(),
            (last, self.rs_state),
            it,
        )
        copy.mem_alloc += ub.reduced
        shard, across = s._groups()
        what = f"fsdp2 reduce-scatter {lab}"
        rs = self._comm(
            "comm", "reduce_scatter", shard, ub.reduced, what, f"rs {lab} g{shard[0]}", (copy.id,), it
        )
        rs.mem_free += ub.reduced
        self.rs_state = s.reduced = rs
        if len(across) > 1:
            tag = f"ar {lab} x{shard.index(s.dev)}"
            s.reduced = self._comm(
                "replicate", "all_reduce", across, ub.shard, f"hsdp all-reduce {lab}", tag, (rs.id,), it
            )
        return copy
