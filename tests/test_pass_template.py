"""A pass stamped from its template (clustersim/schedules/pass_template.py) is, op for op and
field for field, the pass emit_pass emits — for every segment kind, micro-batch, iteration,
weight version and preceding op (and coarsened once at its template, the coarsened pass) —
and Op.from_row copies every field Op.row lists."""

from __future__ import annotations

from functools import partial

from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.coarsen import coarsen
from clustersim.compilers.pipeline.pass_template import PassTemplate
from clustersim.compilers.pipeline.passes import Gpu, PassWork, emit_pass
from clustersim.memory_kinds import StaticMemory
from clustersim.parallel.plan import Plan
from clustersim.program import COMPUTE, Op, Program
from clustersim.workload.stage_cost import Segment, StageCost
from clustersim.workload.tp_overlap import BULK, PIPELINE, RING

# tp 2, cp 2, dp 2, ep 2 on 2 stages: TP, CP and expert groups all have two members
PLAN = Plan(tp=2, pp=2, dp=2, gpus_per_node=8, cp=2, ep=2)

SEGMENTS = st.sampled_from(
    [
        Segment("compute", 1e-3, 5.0),
        Segment("compute", 2e-3, 1.0, name="attention"),
        Segment("compute", 1e-3, 1.0, name="shared expert", overlap=True),
        Segment("compute", 3e-3, 2.0, ranks=((3e-3, 2.0), (1e-3, 1.0))),
        Segment("collective", nbytes=1 << 20, collective="all_reduce"),
        Segment("collective", nbytes=1 << 16, collective="all_to_all", group="cp", name="ulysses"),
        Segment("collective", nbytes=1 << 18, collective="all_to_all", group="ep", name="ep dispatch"),
        Segment("collective", nbytes=3, collective="all_to_all", group="ep", matrix=((1, 2), (3, 4))),
        Segment("overlap", 4e-3, 8.0, nbytes=1 << 20, collective="all_gather", method=RING, chunks=2),
        Segment("overlap", 4e-3, 8.0, nbytes=1 << 20, collective="reduce_scatter", method=PIPELINE, chunks=3),
        Segment("overlap", 4e-3, 8.0, nbytes=1 << 20, collective="reduce_scatter", method=BULK, chunks=1),
        Segment("ring", 3e-3, 3.0, name="ring", steps=(1e-3, 2e-3), step_bytes=(1 << 16, 0)),
        Segment("ring", 2e-3, 3.0, name="ring", steps=(1e-3, 1e-3), step_bytes=(1 << 16, 1 << 16)),
    ]
)


def _cost(segments, overhead: float, gather: int) -> StageCost:
    return StageCost(
        1e-3,
        2e-3,
        0.0,
        1 << 20,
        7 << 20,
        StaticMemory(),
        0.0,
        passes={"F": tuple(segments), "B": tuple(reversed(segments))},
        pass_overhead=overhead,
        recv_gather=gather,
    )


@settings(max_examples=60, deadline=None)
@given(
    segments=st.lists(SEGMENTS, min_size=1, max_size=6),
    phase=st.sampled_from("FB"),
    where=st.tuples(st.integers(0, 1), st.integers(0, 3), st.integers(0, 1)),
    overhead=st.sampled_from([0.0, 1e-4]),
    gather=st.sampled_from([0, 1 << 12]),
    received=st.booleans(),
    fold=st.booleans(),
    name=st.sampled_from(["F", "Bc1", "W"]),
    labels=st.lists(
        st.tuples(st.integers(0, 40), st.integers(0, 3), st.integers(-1, 5)), min_size=1, max_size=3
    ),
    memory=st.sampled_from([{}, {"alloc": 5, "free": 0, "stash": 2}, {"alloc": 0, "free": 9, "stash": 0}]),
    first=st.booleans(),
    coarse=st.booleans(),
    outside=st.booleans(),
)
def test_stamped_pass_is_the_emitted_pass(
    segments, phase, where, overhead, gather, received, fold, name, labels, memory, first, coarse, outside
):
    """Stamped from a coarse template (``coarse``), the Program coarsened is the emitted
    Program coarsened — also when ops emitted later (``outside``) wait on each pass's last
    op and each pass's first op on them, as sends and recvs do."""
    cost = _cost(segments, overhead, gather)
    stage, r, t = where
    work = PassWork(cost, phase, received=received, **memory)
    emit = partial(emit_pass, gpu=Gpu(PLAN, stage, r, t, fold), work=work)
    template = PassTemplate.record(partial(emit, mb=0, version=0), coarse)
    direct, stamped = Program(PLAN.num_devices), Program(PLAN.num_devices)
    after = {}  # each program's op the next pass starts after
    for prog in (direct, stamped):
        after[prog] = None if first else prog.add(1, "compute", COMPUTE, "before", duration=1.0)
    ends = {direct: [], stamped: []}
    for mb, it, version in labels:  # successive passes with their own labels and names
        label = f"{name}{mb}"
        a = emit(direct, mb=mb, it=it, version=version, name=label, after=after[direct])
        b = template.stamp(stamped, label, mb, it, version, after[stamped])
        if not coarse:
            assert (a[0].id, a[1].id) == (b[0].id, b[1].id)
        after[direct], after[stamped] = a[1], b[1]
        ends[direct].append(a)
        ends[stamped].append(b)
    for prog in (direct, stamped) if outside else ():
        for head, last in ends[prog]:
            sent = prog.add(0, "send", COMPUTE, "after the pass", deps=(last.id,))
            head.deps += (prog.add(0, "recv", COMPUTE, "before the pass", deps=(sent.id,)).id,)
    if coarse:
        direct, stamped = coarsen(direct), coarsen(stamped)
    assert [op.row() for op in stamped.ops] == [op.row() for op in direct.ops]
    assert stamped.lanes().keys() == direct.lanes().keys()


def test_from_row_copies_every_field():
    op = Op(0, 0, "compute", COMPUTE, "x")
    for k, field in enumerate(Op.__slots__):  # a distinct value per field: a swap shows
        setattr(op, field, (k, field))
    assert op.row() == tuple((k, field) for k, field in enumerate(Op.__slots__))
    copy = Op.from_row(op.row())
    assert copy is not op
    assert copy.row() == op.row()
