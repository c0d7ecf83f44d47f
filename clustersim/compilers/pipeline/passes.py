"""One pass of the pipeline compiler: a pass's segments as ops on one GPU.

:func:`emit_pass` emits the segments of one pass (F, B or W of a micro-batch on a model
chunk, :func:`clustersim.workload.pass_costs.pass_segments`) on the device of (stage,
replica, TP rank); :class:`SegmentEmitter` turns each segment into its ops — a compute
kernel, a TP or CP collective, an expert group's collective, ring attention or a TP
collective pipelined with its GEMM — and :func:`attach_memory` puts the pass's memory on
its first and last op. The stage emitter (:mod:`.stages`) calls these for every pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property, partial

from ...parallel.plan import Plan
from ...program import COLLECTIVE, COMPUTE, EP_LANE, RECV, SEND, Op, Program
from ...workload.pass_costs import pass_segments
from ...workload.stage_cost import StageCost
from .context_parallel import emit_ring
from .tp_overlap import TP_RECV, TP_SEND, emit_overlap


@dataclass(frozen=True)
class Gpu:
    """The GPU a pass runs on: (``stage``, replica ``r``, TP rank ``t``) of ``plan`` (a
    :class:`~clustersim.parallel.plan.Plan` or a
    :class:`~clustersim.parallel.replica_layout.ReplicaLayout`); ``fold``: its collectives
    stand for its folded twins' too (one arrival)."""

    plan: Plan
    stage: int
    r: int
    t: int
    fold: bool = False


@dataclass(frozen=True)
class PassWork:
    """What a pass emits, the same for every micro-batch that runs it (:mod:`.pass_template`):
    its ``cost`` and ``phase``; ``split``: the backward is the input-gradient part only (a W
    pass follows); ``alloc`` bytes allocated when its first segment starts and ``free``
    released when its last ends (None: a forward allocates and a backward frees the
    activation memory), ``stash`` of them a stashed weight version (a pass allocates or
    frees, not both); ``received``: it consumes another stage's tensor, all-gathered first
    over the TP group when ``cost.recv_gather`` says so (training.fixed_costs)."""

    cost: StageCost
    phase: str
    split: bool = False
    alloc: int | None = None
    free: int | None = None
    stash: int = 0
    received: bool = False

    def part(self, segs: tuple, i: int, count: int) -> PassWork:
        """Piece i of ``count`` this pass is cut into (units, submodules), running ``segs``:
        the framework's per-pass work and the received tensor's gather run with the first,
        which allocates; the last frees."""
        cost, ph = self.cost, self.phase
        head = {"pass_overhead": cost.pass_overhead, "recv_gather": cost.recv_gather} if i == 0 else {}
        piece = replace(
            cost, passes={ph: segs, "Bi": segs}, **({"pass_overhead": 0.0, "recv_gather": 0} | head)
        )
        a, f = (self.alloc if i == 0 else 0), (self.free if i == count - 1 else 0)
        stash = self.stash if a or (f and not self.alloc) else 0
        return replace(self, cost=piece, alloc=a, free=f, stash=stash)


def emit_pass(
    prog: Program,
    gpu: Gpu,
    work: PassWork,
    *,
    name: str,
    mb: int,
    it: int,
    version: int = -1,
    after: Op | None = None,
) -> tuple[Op, Op]:
    """Emit one pass (``work``'s segments) on ``gpu`` as pass ``name`` of micro-batch ``mb``
    in iteration ``it`` at weight ``version``; return its (first, last) op. ``after``: the
    previous pass's last op on this GPU, which the first segment waits for (kernels and TP
    collectives share one stream in Megatron-LM)."""
    phase = work.phase
    emit = SegmentEmitter(prog, gpu.plan, gpu.stage, gpu.r, gpu.t, it, name, version, gpu.fold)
    first, last = None, after  # a pass starts after the previous pass on this GPU, its collectives included
    deps = (last.id,) if last is not None else ()
    segs = pass_segments(work.cost, phase, work.split, work.received)
    k = 0
    while k < len(segs):
        # a compute segment marked ``overlap`` runs beside its neighbouring collective (the
        # shared expert beside the token all-to-alls): both wait for what came before, and
        # what follows waits for both (never at a pass's end)
        n = 2 if k + 2 < len(segs) and _overlapping(segs[k], segs[k + 1]) else 1
        ends: tuple[int, ...] = ()
        for i in range(k, k + n):
            # ``more``: further ops the next segment waits for (a bulk overlap's collective, a ring's last recv)
            head, op, more = emit.segment(segs[i], i, deps, phase, mb)
            first = first or head
            ends += (op.id,) + more
            if n == 1 or op.kind == COMPUTE:
                last = op
        deps = ends
        k += n
    if len(deps) > 1:  # the pass ends once the overlapped collective (or a ring's last recv) has too
        last = emit.join(last, deps[1:], phase, mb)
    attach_memory(first, last, work)
    return first, last


@dataclass(frozen=True)
class SegmentEmitter:
    """Emits the ops of a pass's segments on the device of (stage, r, t), labelled ``name``."""

    prog: Program
    plan: Plan
    stage: int
    r: int
    t: int
    it: int
    name: str
    version: int
    fold: bool
    #: (expert group kind) → (this GPU's group, the stage's other groups when folded), shared
    #: by the passes of a GPU that pass it in
    experts: dict = field(default_factory=dict)

    @cached_property
    def dev(self) -> int:
        return self.plan.device(self.stage, self.r, self.t)

    @cached_property
    def group(self) -> tuple[int, ...]:
        """The GPU's TP group."""
        return tuple(self.plan.device(self.stage, self.r, q) for q in range(self.plan.tp))

    @cached_property
    def folded_ring(self) -> dict:
        """A folded representative's TP ring sends (it is TP rank 0 of replica 0): their
        bytes leave from the previous TP rank (``source``), so its own recv ends when, by
        symmetry, the unfolded one does; every other ring hop of the stage — its own to TP
        rank 1 first, then each replica's in (dp rank, tp rank) order — loads the fabric as
        a shadow."""
        plan, s, tp = self.plan, self.stage, self.plan.tp
        hops = tuple(
            (plan.device(s, r, t), plan.device(s, r, (t + 1) % tp))
            for r in range(plan.replicas)
            for t in range(tp)
            if (r, t) != (0, tp - 1)
        )
        return {"source": plan.device(s, 0, tp - 1), "shadows": hops}

    @cached_property
    def cp_rings(self) -> tuple[tuple[int, ...], ...]:
        """Every CP group of the stage, in ring order, the representative's first, then in
        the unfolded Program's order (replica, then TP rank)."""
        plan, s = self.plan, self.stage
        return tuple(
            plan.cp_ring(s, base, t) for base in range(0, plan.replicas, plan.cp) for t in range(plan.tp)
        )

    @cached_property
    def folded_cp_ring(self) -> dict:
        """A folded representative's ring-attention sends (it is CP rank 0 of its ring): as
        :attr:`folded_ring` on the CP ring — each stands for the last CP rank's send, which
        feeds the representative's own recv (``source``); every other CP ring hop of the
        stage loads the fabric as a shadow, in the unfolded Program's order (replica —
        CP rank within its data-parallel rank — then TP rank)."""
        plan, s, cp = self.plan, self.stage, self.plan.cp
        hops = tuple(
            (plan.device(s, r, t), plan.device(s, r - r % cp + (r + 1) % cp, t))
            for r in range(plan.replicas)
            for t in range(plan.tp)
            if (r, t) != (cp - 1, 0)
        )
        return {"source": plan.device(s, cp - 1, 0), "shadows": hops}

    def expert(self, kind: str) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        """This GPU's expert group of ``kind`` and, folded, the stage's other groups of that
        kind (which run the same collective alongside)."""
        if kind not in self.experts:
            group = self.plan.expert_group(self.dev, kind)
            others = self.plan.expert_groups(self.stage, kind) if self.fold else ()
            self.experts[kind] = (group, tuple(g for g in others if g != group))
        return self.experts[kind]

    def _labels(self, phase: str, mb: int) -> dict:
        return {
            "stage": self.stage,
            "microbatch": mb,
            "phase": phase,
            "iteration": self.it,
            "version": self.version,
        }

    def segment(
        self, seg, k: int, deps: tuple[int, ...], phase: str, mb: int
    ) -> tuple[Op, Op, tuple[int, ...]]:
        """(first op, last op, ops the next segment must also wait for) of segment ``k``: a
        compute kernel (an expert-parallel rank's own experts' work where the ranks differ),
        a TP or CP collective, an expert group's collective on the ``ep`` lane (the MoE
        dispatch/combine), ring attention, or a TP collective pipelined with its GEMM in
        chunks on both lanes (:mod:`.tp_overlap`)."""
        dev, group = self.dev, self.group
        labels = self._labels(phase, mb)
        if seg.layer >= 0:  # a layer-labelled compile's (Op.layer)
            labels["layer"] = seg.layer

        def compute(
            duration: float, flops: float, deps: tuple[int, ...], label: str = self.name, beside: tuple = ()
        ) -> Op:
            return self.prog.add(
                dev,
                "compute",
                COMPUTE,
                label,
                duration=duration,
                flops=flops,
                deps=deps,
                beside=beside,
                **labels,
            )

        def collective(
            label: str,
            kind: str,
            nbytes: int,
            deps,
            tag: str,
            algorithm: str = "auto",
            lane: str = "tp",
            members=group,
            shadows: tuple = (),
        ) -> Op:
            return self.prog.add(
                dev,
                lane,
                COLLECTIVE,
                label,
                nbytes=nbytes,
                deps=deps,
                arrivals=1 if self.fold else 0,  # folded: the representative stands for its twins
                group=members,
                shadows=shadows,
                collective=kind,
                algorithm=algorithm,
                tag=tag,
                **labels,
            )

        tag = f"tp it{self.it} s{self.stage} r{self.r} {self.name} #{k}"
        plan, st, r, t = self.plan, self.stage, self.r, self.t
        if seg.kind == "compute":  # an expert-parallel rank runs its own experts' work
            work = seg.ranks[plan.expert_rank(dev)] if seg.ranks else (seg.duration, seg.flops)
            op = compute(*work, deps, f"{seg.name} {self.name}" if seg.name else self.name, seg.beside)
            return op, op, ()
        if seg.kind == "collective" and seg.group == "cp":  # Ulysses: over this rank's CP group
            cp_tag = f"cp it{self.it} s{st} r{r // plan.cp} t{t} {self.name} #{k}"
            members = plan.cp_ring(st, r, t)
            others = self.cp_rings[1:] if self.fold else ()  # (folded: they run it alongside)
            op = collective(
                seg.name, seg.collective, seg.nbytes, deps, cp_tag, lane="cp", members=members, shadows=others
            )
            return op, op, ()
        if seg.kind == "collective" and seg.group == "tp":
            op = collective(seg.name or f"tp {seg.collective}", seg.collective, seg.nbytes, deps, tag)
            return op, op, ()
        if seg.kind == "collective":  # over an expert group (ep, etp, tp_ep)
            op = _expert_collective(
                self.prog, seg, k, dev, self.expert(seg.group), self.name, self.fold, deps, labels
            )
            return op, op, ()
        if seg.kind == "ring":  # ring attention: per-step chunks and K/V transfers around the CP ring
            ring_tag = f"ring it{self.it} s{st} r{r // plan.cp} t{t} {self.name} #{k}"
            ring = plan.cp_ring(st, r, t)
            folded = self.folded_cp_ring if self.fold else {}
            return emit_ring(self.prog, dev, seg, ring, self.name, ring_tag, deps, folded, **labels)
        return emit_overlap(seg, deps, compute, partial(self.transfer, tag=tag, labels=labels), plan.tp)

    def transfer(self, label: str, nbytes: int, deps, step: int, *, tag: str, labels: dict) -> tuple[Op, Op]:
        """A userbuffers transfer of TP overlap (:mod:`.tp_overlap`): this rank's send of
        ``nbytes`` to the next TP rank after ``deps`` and its receive from the previous one,
        tagged by ``tag``, ``step`` and the sending rank (paired once the Program is
        emitted, :func:`.context_parallel.link_ring_transfers`). Folded, the send stands
        for the previous rank's, which feeds this rank's receive (:attr:`folded_ring`)."""
        t, n = self.t, self.plan.tp
        sender, ring = (t - 1) % n, self.folded_ring if self.fold else {}
        send = self.prog.add(
            self.dev,
            TP_SEND,
            SEND,
            f"tp send {label}",
            nbytes=nbytes,
            deps=deps,
            tag=f"{tag}.{step} t{sender if self.fold else t}",  # (folded: its own recv's)
            **ring,
            **labels,
        )
        recv = self.prog.add(
            self.dev,
            TP_RECV,
            RECV,
            f"tp recv {label}",
            nbytes=nbytes,
            tag=f"{tag}.{step} t{sender}",
            **labels,
        )
        return send, recv

    def join(self, last: Op, extra: tuple[int, ...], phase: str, mb: int) -> Op:
        """A zero-time op after ``last`` and ``extra``: where a pass ends when an overlapped
        collective outlasts its last kernel."""
        return self.prog.add(
            self.dev,
            "compute",
            COMPUTE,
            f"{self.name} join",
            duration=0.0,
            flops=0.0,
            deps=(last.id,) + extra,
            **self._labels(phase, mb),
        )


def attach_memory(first: Op, last: Op, work: PassWork) -> None:
    """``work.alloc`` bytes taken when a pass's ``first`` op starts, ``work.free`` released
    when its ``last`` ends (None: a forward allocates, a backward frees the activation
    memory); ``work.stash`` of them a stashed weight version (a pass allocates or frees,
    not both)."""
    alloc, free, phase = work.alloc, work.free, work.phase
    if alloc is None:
        alloc = work.cost.activation_memory if phase == "F" else 0
    if free is None:
        free = work.cost.activation_memory if phase == "B" else 0
    first.mem_alloc += alloc
    last.mem_free += free
    if alloc:
        first.stash_alloc += work.stash
    else:
        last.stash_free += work.stash


def _overlapping(a, b) -> bool:
    """Whether segments ``a`` and ``b`` run side by side (one collective, one overlapped compute)."""
    return (a.overlap and b.kind == "collective") or (a.kind == "collective" and b.overlap)


def _expert_collective(prog, seg, k, dev, groups, name, fold, deps, labels) -> Op:
    """Segment k of a pass on ``dev``, a collective over an expert group (``groups``: the
    group and, folded, the stage's other groups of its kind — :meth:`SegmentEmitter.expert`), on
    the :data:`~clustersim.program.EP_LANE`; its members sit in other replicas, so the tag
    names the group by its first device."""
    group, shadows = groups
    nbytes = sum(seg.matrix[group.index(dev)]) if seg.matrix else seg.nbytes  # an all-to-all-v: its row
    return prog.add(
        dev,
        EP_LANE,
        COLLECTIVE,
        seg.name,
        nbytes=nbytes,
        deps=deps,
        group=group,
        split=seg.matrix,
        shadows=shadows,
        beside=seg.beside,
        collective=seg.collective,
        tag=f"{seg.group} it{labels['iteration']} s{labels['stage']} g{group[0]} {name} #{k}",
        arrivals=1 if fold else 0,
        **labels,
    )
