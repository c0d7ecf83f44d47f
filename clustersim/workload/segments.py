"""Turn op sequences into pass segments: compute kernels merged, TP collectives between.

A pass is built from a list of *items*: ``("c", seconds, flops, launches, issued, host)``
for a kernel (``launches``: the kernels whose launch is priced apart, see
:func:`launch_op`; ``issued``: the kernels the host issues for it,
:meth:`.cost_model.CostModel.issued` and the framework's extra small kernels, whose
launches and bytes ride in ``launches`` and ``seconds``; ``host``: the host seconds of
issuing them, :meth:`.host_kernels.HostModel.issue`, or None: the pass's per-kernel
dispatch; a seventh element, where the cost model prices kernels beside NCCL collectives,
holds their (memory-bound s, HBM B/s, (kind, SM-limited s)…), :func:`_beside`), ``("e", seconds per rank, flops per rank, launches, issued, host)`` for work
that differs between the ranks of an expert-parallel group (:class:`~.ops.ExpertRanks`),
``("p", seconds, flops, launches, issued, host)`` for a kernel that runs beside its
neighbouring collective
(:attr:`~.ops.LayerOp.overlap`), ``("x", kind, nbytes, name, group, matrix[, sync, sms, rate])`` for a
collective over ``group`` (:data:`~.ops.COMM_GROUPS`, or ``cp``: the context-parallel group;
``matrix``: an uneven all-to-all's bytes, or empty; ``sync``: the host waits for the device
before it issues it, :mod:`.host`; ``sms``: the SMs its kernels hold where not NCCL's,
:attr:`.ops.TPComm.sms`; ``rate``: the bytes/s those SMs can copy, or 0,
:func:`.comm_interference.held_rate`), ``("r", seconds, flops, nbytes,
name)`` for ring attention (per step, :mod:`.context_parallel`) and ``("f", seconds,
name)`` for a fixed cost of its own (the pass's kernel launches and its wait for the host,
:mod:`.host`: :func:`launch_op`, which leads the pass apart from its items). Consecutive kernels merge
into one compute :class:`Segment` (they run back to back on one stream; with per-rank
items, the Segment carries each rank's sums); side-by-side kernels merge into their own;
each collective becomes a collective Segment the compiler places on the ``tp`` lane over
the stage's TP group, on the ``cp`` lane over its CP group or on the ``ep`` lane over an
expert group; a ring becomes a ``ring`` Segment the compiler expands into steps; a fixed
cost is a named compute Segment, first in its pass.
With ``granularity="stage"`` a pass is one collective per kind carrying the summed bytes
between the two halves of its compute — far fewer simulated events for huge validation
runs, at the price of the per-collective latency terms (negligible for these sizes).

With ``parallel.tp_comm_overlap`` a collective and the GEMM it pipelines with become one
``("o", kind, nbytes, name, seconds, flops, method, chunks, margin, host, launches)`` item and an ``overlap``
Segment, which the compiler emits in chunks (:mod:`.tp_overlap`; per-layer only).
"""

from __future__ import annotations

import re

from ..accel import load
from ..hardware.interference import NCCL
from ..program import beside_scaled, beside_sum
from .comm_interference import beside, held_rate
from .context_parallel import CPComm, CPRing
from .cost_model import CostModel
from .ops import ExpertRanks, LayerOp, TPComm
from .sp_regather import NAME as REGATHER
from .stage_cost import Segment
from .tp_overlap import AG_GEMMS, RS_GEMMS, TPOverlap, merge_backward, merge_forward

_accel = load("clustersim.workload._chost")  # built by setup.py where a C compiler works


def _cp_item(op: CPComm | CPRing, cm: CostModel, backward: bool) -> tuple:
    """The item of a CP collective (``kind`` of its direction) or of a ring's steps."""
    if isinstance(op, CPComm):
        return ("x", op.bwd if backward else op.fwd, op.nbytes, op.name, "cp", ())
    works, sent = (op.bwd, op.bwd_bytes) if backward else (op.fwd, op.fwd_bytes)
    phase = "B" if backward else "F"
    times = tuple(cm.time(w, op.name, phase) for w in works)
    return ("r", times, tuple(w.flops for w in works), sent, op.name)


def forward_items(
    ops: list, cm: CostModel, *, core_only: bool = False, overlap: TPOverlap | None = None
) -> list[tuple]:
    """Items of running ``ops`` forward (``core_only``: just the attention-core kernels,
    as selective recompute re-runs them; no collectives then). ``overlap``: TP collectives
    merged with the GEMMs they pipeline with (:mod:`.tp_overlap`)."""
    out = []
    for op in ops:
        if isinstance(op, TPComm):
            if op.fwd and not core_only:
                out.append(
                    (
                        (
                            "x",
                            op.fwd,
                            op.forward_nbytes,
                            op.name,
                            op.group,
                            op.matrix,
                            op.host_sync,
                            op.sms,
                            held_rate(cm, op),
                        ),
                        "",
                        None,
                    )
                )
        elif isinstance(op, ExpertRanks):
            if not core_only:
                out.append((_per_rank([forward_items(list(r), cm) for r in op.ranks]), "", None))
        elif isinstance(op, (CPComm, CPRing)):
            if not core_only:
                out.append((_cp_item(op, cm, backward=False), "", None))
        elif not core_only or op.attention_core:
            kind = "p" if op.overlap else "c"
            t, launches, issued, host = _priced(cm, op.fwd, op.name, "F")
            item = (kind, t, op.fwd.flops, launches, issued, host, *_beside(cm, [(op.fwd, t)]))
            out.append((item, op.name, op.fwd))
    if overlap is not None:
        return merge_forward(out, overlap, cm.eff)
    return [item for item, *_ in out]


def _priced(cm: CostModel, work, op: str, phase: str) -> tuple[float, int, int, float | None]:
    """(seconds, launches priced apart, kernels the host issues, host seconds or None) of
    ``op``'s ``phase`` ``work``, with the extra small kernels the host model of ``cm`` adds
    (:mod:`.host_kernels`: their bytes in the seconds, their launches counted apart)."""
    t, launches, kernels = cm.time(work, op, phase), cm.launched(work, op, phase), cm.issued(work)
    if cm.host is None:
        return t, launches, kernels, None
    extra, nbytes, host = cm.host.issue(op, phase, kernels)
    return t + (cm.memory_seconds(nbytes) if nbytes else 0.0), launches + extra, kernels + extra, host


def _beside(cm: CostModel, priced: list[tuple]) -> tuple:
    """``(beside,)``: the (memory-bound s, HBM B/s, (kind, SM-limited s)…) of kernels
    ``priced`` as (work, seconds) beside each collective kind ``cm`` prices them beside —
    NCCL's CTAs (``nccl_ctas``, key :data:`~clustersim.hardware.interference.NCCL`),
    DeepEP's SMs (``deepep_sms``, keyed by them) — the item's seventh element
    (:mod:`.comm_interference`); empty where ``cm`` prices none."""
    kinds = ([(NCCL, cm.nccl_ctas)] if cm.nccl_ctas else []) + (
        [(cm.deepep_sms,) * 2] if cm.deepep_sms else []
    )
    if not kinds:
        return ()
    mem = sum(beside(cm, w, t, kinds[0][1])[1] for w, t in priced)
    held = tuple((key, sum(beside(cm, w, t, n)[0] for w, t in priced)) for key, n in kinds)
    return ((mem, cm.gpu.hbm_bandwidth, *held),)


def _host_sum(items: list[tuple]) -> float | None:
    """The items' host seconds summed (None where one has none: the pass's dispatch prices them)."""
    hosts = [i[5] for i in items]
    return None if None in hosts else sum(hosts)


def _per_rank(items: list[list[tuple]]) -> tuple:
    """One ``("e", …)`` item from each rank's compute items."""
    hosts = [_host_sum(rank) for rank in items]
    return (
        "e",
        tuple(sum(i[1] for i in rank) for rank in items),
        tuple(sum(i[2] for i in rank) for rank in items),
        # every rank launches (and its host issues) its experts' kernels
        max(sum(i[3] for i in rank) for rank in items),
        max(sum(i[4] for i in rank) for rank in items),
        None if None in hosts else max(hosts),
    )


def backward_items(
    ops: list, cm: CostModel, *, weight: bool = True, inputs: bool = True, overlap: TPOverlap | None = None
) -> list[tuple]:
    """Items of the backward of ``ops`` (in reverse): input- and/or weight-gradient work.
    ``overlap``: as :func:`forward_items` (a GEMM's dgrad and wgrad are then separate items).
    A linear after a sequence-parallel re-gather (:mod:`.sp_regather`) runs its input-gradient
    GEMM beside it (``p``) and its weight gradient after (``c``)."""
    out = []
    regathered = False  # the op before (in backward order) was the re-gather
    for op in reversed(ops):
        beside_gather, regathered = regathered, False
        if isinstance(op, TPComm):
            regathered = op.name == REGATHER and inputs
            if op.bwd and inputs:
                out.append(
                    (
                        (
                            "x",
                            op.bwd,
                            op.backward_nbytes,
                            op.name,
                            op.group,
                            tuple(zip(*op.matrix)),
                            False,
                            op.sms,
                            held_rate(cm, op, backward=True),
                        ),
                        "",
                        "",
                        None,
                    )
                )
            continue
        if isinstance(op, ExpertRanks):
            ranks = [backward_items(list(r), cm, weight=weight, inputs=inputs) for r in op.ranks]
            out.append((_per_rank(ranks), "", "", None))
            continue
        if isinstance(op, (CPComm, CPRing)):  # attention: input gradients only
            if inputs:
                out.append((_cp_item(op, cm, backward=True), "", "", None))
            continue
        assert isinstance(op, LayerOp)
        if overlap is not None and op.name in AG_GEMMS + RS_GEMMS:
            parts = [("dgrad", op.bwd_input, "B")] * inputs + [("wgrad", op.bwd_weight, "W")] * weight
            for part, w, ph in parts:
                t, n, k, host = _priced(cm, w, op.name, ph)
                out.append((("c", t, w.flops, n, k, host, *_beside(cm, [(w, t)])), op.name, part, w))
            continue
        works = [(op.bwd_input, "B")] * inputs + [(op.bwd_weight, "W")] * weight
        if beside_gather:  # dgrad beside the re-gather, wgrad after it (Megatron's order)
            out += _work_items(cm, op, works[:1], "p") + _work_items(cm, op, works[1:], "c")
            continue
        out += _work_items(cm, op, works, "p" if op.overlap and inputs else "c")
    if overlap is not None:
        return merge_backward(out, overlap, cm.eff)
    return [item for item, *_ in out]


def _work_items(cm: CostModel, op: LayerOp, works: list[tuple], kind: str) -> list[tuple]:
    """One ``kind`` (``c`` or ``p``) item of ``op``'s ``works`` ((Work, phase) pairs) priced by
    ``cm``, wrapped as :func:`backward_items` collects them; none where they are empty."""
    priced = [(*_priced(cm, w, op.name, ph), w.flops) for w, ph in works]
    # per column (seconds, launches, issued, host, FLOPs), each summed in the works' order
    cols = tuple(zip(*priced)) or ((),) * 5
    t, flops = sum(cols[0]), sum(cols[4])
    if not (t or flops):
        return []
    n, issued, hosts = sum(cols[1]), sum(cols[2]), cols[3]
    host = None if None in hosts else sum(hosts)
    beside_ = _beside(cm, [(w, p[0]) for (w, _), p in zip(works, priced, strict=True)])
    return [((kind, t, flops, n, issued, host, *beside_), op.name, "", None)]


def launch_op(
    items: list[tuple] | tuple[tuple, ...], launch_s: float, wait: float = 0.0, dispatch: float = 0.0
) -> tuple | None:
    """The fixed cost that leads a pass of ``items``: their kernels' launches, ``("f", n ·
    launch_s + wait, "launch")`` for the n kernels whose launch the cost model left out —
    a GEMM overlapped with a TP collective counts as one — and the ``wait`` of the GPU
    stream for the host that issues them (:func:`.host.host_waits`, under the per-kernel
    ``dispatch``). Present when n and ``launch_s`` are not 0, or the host issues a kernel
    at a ``dispatch`` that is not: whether the op exists depends on the configuration,
    never on the wait, so pricing the host adds no op to a pass that launches kernels
    (without it, None)."""
    n, issued = _launch_count(items) if _accel is None else _accel.launch_count(items)
    present = (n and launch_s) or (issued and dispatch)
    return ("f", n * launch_s + wait, "launch") if present else None


def _launch_count(items: list[tuple] | tuple[tuple, ...]) -> tuple[int, bool]:
    """(kernels whose launch is priced apart, whether the host issues any) of a pass's ``items``
    (:func:`launch_op`; in C where the accelerator is built, ``_chost.c``)."""
    n, issued = 0, False
    for i in items:  # one walk: a pass holds thousands of items
        if i[0] == "o":
            n, issued = n + i[10], True
        elif i[0] in ("c", "e", "p"):
            n, issued = n + i[3], issued or bool(i[4])
    return n, issued


def _held(item: tuple) -> tuple:
    """A collective item's ``(SMs,)`` where its kernels are not NCCL's (:attr:`.ops.TPComm.sms`),
    ``(SMs, bytes/s)`` where those SMs also cap its rate (:func:`.comm_interference.held_rate`),
    else ``()``: its Segment's and Op's ``beside``."""
    if len(item) <= 7 or not item[7]:
        return ()
    return (item[7], item[8]) if len(item) > 8 and item[8] else (item[7],)


def to_segments(
    items: list[tuple] | tuple[tuple, ...], granularity: str = "layer", launch: tuple | None = None
) -> tuple[Segment, ...]:
    """Segments of a pass from its items (see module doc), led by its ``launch`` op where it
    has one (:func:`launch_op`: the fixed costs run first, then the pass's kernels and collectives)."""
    kernels = _kernel_segments(items, granularity)
    return kernels if launch is None else (Segment("compute", launch[1], name=launch[2]), *kernels)


#: the runs of a pass, over its kinds (one letter an item): kernels that merge into one compute
#: Segment — back to back (``c``, ``e``), or side by side (``p``) — and the items no kernel
#: merges with (``o``, ``r``, ``x``); an item of another kind leads a run of the kernels after it
_RUNS = re.compile(r"[ce]+|p+|[orx]|[^ceporx][ce]*")


def _kernel_segments(items: list[tuple], granularity: str) -> tuple[Segment, ...]:
    """:func:`to_segments` of ``items``, the launch op aside."""
    if granularity == "stage":
        if any(i[0] in "or" for i in items):  # the scenario rules refuse this; a caller may not
            raise ValueError("overlapped TP items and ring attention need granularity 'layer'")
        run = _run_of([i for i in items if i[0] != "x"])
        sums: dict[tuple[str, str], int] = {}
        for i in items:
            if i[0] == "x":
                key = (i[1], i[4], _held(i))
                sums[key] = sums.get(key, 0) + i[2]
        if not sums:
            return (run.segment(),)
        # compute halves around the collectives: the pass still ends on the compute lane,
        # so the next pass cannot overlap its collectives (one CUDA stream in Megatron)
        half = (run.segment(0.5),)
        colls = tuple(
            Segment("collective", nbytes=n, collective=k, name=f"{g} {k}", group=g, beside=held)
            for (k, g, held), n in sums.items()
        )
        return half + colls + half
    segs, last = (_layer_segments if _accel is None else _accel.layer_segments)(
        items, _run_segment, _lone_segment
    )
    if not segs:  # the pass is its last run, empty or not
        segs.append(_run_of(items[last:]).segment())
    return tuple(segs)


def _layer_segments(items: list[tuple], run_segment, lone_segment) -> tuple[list[Segment], int]:
    """(the Segments of a pass's ``items`` at layer granularity, where its last run starts):
    ``run_segment`` of each run of kernels that merge (None: it makes no Segment),
    ``lone_segment`` of each item no kernel merges with. A pass repeats its layers' item
    tuples: a run of the same ones, or a lone item, is made once (by the items' identities).
    In C where the accelerator is built (``_chost.c``)."""
    kinds = "".join([i[0] for i in items])  # the runs are found over the kinds, not item by item
    if len(kinds) != len(items):
        raise ValueError("a pass item's kind is one letter")
    segs: list[Segment] = []
    runs: dict[tuple[int, ...], Segment | None] = {}
    made: dict[int, Segment] = {}
    last = len(items)
    for match in _RUNS.finditer(kinds):
        start, stop = match.span()
        if kinds[start] in "orx":
            i = items[start]
            if id(i) not in made:
                made[id(i)] = lone_segment(i)
            segs.append(made[id(i)])
            last = len(items)
            continue
        last, key = start, tuple(map(id, items[start:stop]))
        if key not in runs:
            runs[key] = run_segment(items[start:stop])
        if runs[key] is not None:
            segs.append(runs[key])
    return segs, last


def _run_segment(items: list[tuple]) -> Segment | None:
    """The compute Segment of a run of kernels ``items``, None where they hold no time or FLOPs."""
    run = _run_of(items)
    return run.segment() if run.nonzero else None


def _lone_segment(i: tuple) -> Segment:
    """The Segment of an ``o``, ``r`` or ``x`` item: what no kernel merges with."""
    if i[0] == "o":  # a collective pipelined with a GEMM (tp_overlap): the GEMM's time rides along
        _, kind, nbytes, name, seconds, flops, method, chunks, margin = i[:9]
        return Segment("overlap", seconds, flops, nbytes, kind, name, method, chunks, margin=margin)
    if i[0] == "r":
        _, times, flops, sent, name = i
        return Segment("ring", sum(times), sum(flops), name=name, steps=times, step_bytes=sent)
    return Segment(
        "collective", nbytes=i[2], collective=i[1], name=i[3], group=i[4], matrix=i[5], beside=_held(i)
    )


def _run_of(items: list[tuple]) -> _Run:
    """The :class:`_Run` of consecutive kernels ``items``: :meth:`_Run.add` of each, in a
    tight loop where none is per-rank (a pass without collectives is one run of thousands)."""
    run = _Run()
    if "e" in [i[0] for i in items]:
        for i in items:
            run.add(i)
        return run
    sums = _run_sums if _accel is None else _accel.run_sums
    run.t, run.f, run.beside = sums(items, run.t, run.f, run.beside, beside_sum)
    if items:
        run.overlap = items[-1][0] == "p"
    return run


def _run_sums(items: list[tuple], t: float, f: float, beside: tuple | None, beside_sum) -> tuple:
    """:meth:`_Run.add`'s sums of kernels ``items`` (none per-rank) onto a run's ``t``, ``f`` and
    ``beside`` (``beside_sum`` adds two), in its order (in C where the accelerator is built,
    ``_chost.c``)."""
    for i in items:
        t += i[1]
        f += i[2]
        own = i[6] if len(i) > 6 else ()
        if beside is None:
            beside = own
        elif beside:  # an empty one stays empty (beside_sum)
            beside = beside_sum(beside, own)
    return t, f, beside


class _Run:
    """Consecutive kernels being merged into one compute Segment: their summed time and
    FLOPs, per expert-parallel rank once a per-rank item joins; ``overlap``: None while
    empty, then whether they run beside a collective."""

    def __init__(self):
        self.t, self.f, self.ranks, self.overlap = 0.0, 0.0, None, None
        #: the kernels' summed ``beside`` tuple (:func:`_beside`; None while empty, ``()``
        #: once a kernel without one joins)
        self.beside: tuple | None = None

    @property
    def nonzero(self) -> bool:
        """Whether the run holds any time or FLOPs (empty kernels make no Segment)."""
        return bool(self.t or self.f or (self.ranks and any(t or f for t, f in self.ranks)))

    def add(self, item: tuple) -> None:
        self.overlap = item[0] == "p"
        own = item[6] if len(item) > 6 else ()
        self.beside = own if self.beside is None else beside_sum(self.beside, own)
        if item[0] == "e":
            if self.ranks is None:
                self.ranks = [(self.t, self.f)] * len(item[1])
            self.ranks = [(t + dt, f + df) for (t, f), dt, df in zip(self.ranks, item[1], item[2])]
            return
        self.t += item[1]
        self.f += item[2]
        if self.ranks is not None:
            self.ranks = [(t + item[1], f + item[2]) for t, f in self.ranks]

    def segment(self, share: float = 1.0) -> Segment:
        """The compute Segment of ``share`` of the run: duration the slowest rank's, FLOPs
        the ranks' mean, each rank's own pair in ``ranks`` when they differ."""
        if self.ranks is None or len(set(self.ranks)) == 1:
            t, f = self.ranks[0] if self.ranks else (self.t, self.f)
            beside_ = beside_scaled(self.beside, share) if self.beside else ()
            return Segment("compute", t * share, f * share, overlap=bool(self.overlap), beside=beside_)
        ranks = tuple((t * share, f * share) for t, f in self.ranks)
        return Segment(
            "compute",
            max(t for t, _ in ranks),
            sum(f for _, f in ranks) / len(ranks),
            overlap=bool(self.overlap),
            ranks=ranks,
        )


def compute_time(segments: tuple[Segment, ...]) -> tuple[float, float]:
    """(seconds, FLOPs) of the compute segments of a pass (an overlap segment's GEMM and a
    ring's steps included, and the SM margin's cost; in C where the accelerator is built,
    ``_chost.c``, summed by the same ``sum``)."""
    if _accel is not None:
        return _accel.compute_sums(segments)
    return (
        sum(s.duration + s.margin for s in segments if s.kind != "collective"),
        sum(s.flops for s in segments if s.kind != "collective"),
    )
