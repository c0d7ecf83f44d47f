"""``Program.check`` tests each rule as a whole over columns of the ops and runs a rule's
op-by-op pass only on a Program that breaks it: on random, often malformed, Programs it
raises exactly what the op-by-op passes raise, in their order (or nothing when they pass)."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from clustersim.engine.dag import DagEngine
from clustersim.errors import ProgramError, SimulationStall
from clustersim.network.base import DirectFabric
from clustersim.program import COLLECTIVE, Program
from clustersim.record import Recorder


def _op_by_op(prog: Program) -> str | None:
    """The message of the first rule's op-by-op pass that fails, or None."""
    try:
        prog._check_fields()
        prog._check_matching()
        prog._check_collectives([op for op in prog.ops if op.kind == COLLECTIVE])
        prog.check_acyclic()
    except ProgramError as exc:
        return str(exc)
    return None


@st.composite
def programs(draw):
    """Up to 30 ops on 3 devices (a device id may fall outside), with deps drawn anywhere
    (forward, onto itself, past the end: cycles and missing ops), sends and recvs whose
    peers and sizes may not match, collectives whose members may disagree, and memory
    fields that may be negative or stash more than they move."""
    n_dev = 3
    prog = Program(n_dev)
    size = draw(st.integers(0, 30))
    small = st.sampled_from([0, 0, 0, 10, 20, -5])
    for i in range(size):
        kind = draw(st.sampled_from(["compute", "compute", "send", "recv", "collective"]))
        dev = draw(st.sampled_from([0, 1, 2, 0, 1, 2, 3, -1])) if draw(st.booleans()) else i % n_dev
        lane = kind if kind != "compute" else draw(st.sampled_from(["compute", "tp"]))
        fields = {
            "deps": tuple(draw(st.lists(st.integers(-1, size), max_size=2))),
            "mem_alloc": draw(small),
            "mem_free": draw(small),
            "stash_alloc": draw(small),
            "stash_free": draw(small),
            "nbytes": draw(st.sampled_from([10, 10, 20])),
        }
        if kind in ("send", "recv"):
            fields["peer"] = draw(st.integers(-1, size))
        if kind == "collective":
            fields["group"] = draw(st.sampled_from([(0, 1), (0, 1), (1, 2), (0, 0), (0, 3), (0, 1, 2)]))
            fields["tag"] = draw(st.sampled_from(["a", "b", "c"]))
            fields["collective"] = draw(st.sampled_from(["all_reduce", "all_reduce", "all_gather"]))
            fields["arrivals"] = draw(st.sampled_from([0, 0, 1]))
            # an all-to-all-v: members agree on the matrix, each op's nbytes its own row
            fields["split"] = draw(st.sampled_from([(), (), ((0, 5), (15, 0))]))
        prog.add(dev, lane, kind, f"op{i}", **fields)
    return prog


def _repaired(prog: Program, rules: int) -> Program:
    """``prog`` with its first ``rules`` rules made to hold, so the later ones are reached:
    1 devices and deps, 2 memory fields, 3 send/recv pairs (sizes as drawn), 4 a collective's
    members agree with its first, 5 its group is its members' devices, 6 one member per device."""
    ops = prog.ops
    for op in ops if rules >= 1 else ():
        op.device = op.device % prog.num_devices
        op.deps = tuple(d for d in op.deps if 0 <= d < len(ops))
        if rules >= 2:
            op.mem_alloc = op.mem_free = op.stash_alloc = op.stash_free = 0
    if rules >= 3:  # pair sends with recvs in order; the unpaired become compute ops
        sends = [op for op in ops if op.kind == "send"]
        recvs = [op for op in ops if op.kind == "recv"]
        for s, r in zip(sends, recvs):
            s.peer, r.peer = r.id, s.id  # sizes as drawn: they may disagree
        for op in sends[len(recvs) :] + recvs[len(sends) :]:
            op.kind = "compute"
    if rules >= 4:  # the first member's fields (its group as drawn, then its members' devices)
        for members in prog.collective_members().values():
            first, on = members[0], {}
            for op in members:
                if on.setdefault(op.device, op) is not op and rules >= 6:
                    op.kind = "compute"
            group = tuple(sorted(on)) if rules >= 5 else first.group
            for op in members:
                op.group, op.collective, op.split, op.arrivals = group, first.collective, first.split, 0
                op.nbytes = op.nbytes if first.split else first.nbytes  # (a matrix: sizes may differ)
    return prog


@settings(max_examples=300, deadline=None, derandomize=True)
@given(prog=programs(), rules=st.integers(0, 6))
def test_check_raises_what_the_op_by_op_passes_raise(prog, rules):
    _repaired(prog, rules)
    want = _op_by_op(prog)
    if want is None:
        prog.check()
    else:
        with pytest.raises(ProgramError) as got:
            prog.check()
        assert str(got.value) == want


RULES = (
    "outside 0..",  # _check_fields
    "which does not exist",
    "must be ≥ 0 bytes",
    "stashed weights",
    "has no matching",  # _check_matching
    "disagree on size",
    "appears twice",  # _check_collectives
    "is not a device",
    "members disagree",
    "is not in its group",
    "holds two ops",
    "never reach it",
    "dependency cycle",  # check_acyclic
)


def test_the_strategy_reaches_every_rule():
    # every rule fails on some drawn Programs and all pass on others, so the test above
    # compares each rule's whole-Program test with its op-by-op pass
    seen = set()

    @settings(max_examples=600, deadline=None, database=None, derandomize=True)
    @given(prog=programs(), rules=st.integers(0, 6))
    def collect(prog, rules):
        said = _op_by_op(_repaired(prog, rules))
        seen.update(rule for rule in RULES if said and rule in said)
        if said is None:
            seen.add("passes")

    collect()
    assert seen == {*RULES, "passes"}, set(RULES) - seen


@settings(max_examples=300, deadline=None, derandomize=True)
@given(prog=programs())
def test_the_dag_pass_ends_every_op_exactly_when_there_is_no_cycle(prog):
    # what lets `check(acyclic=False)` leave cycles to the DAG pass (simulate does so for
    # jobs the pass runs): on Programs that pass every other rule, check(acyclic=False)
    # raises the cycle, or the pass ends every op — exactly when there is no cycle
    _repaired(prog, 6)
    want = _op_by_op(prog)
    assume(want is None or want.startswith("dependency cycle"))
    try:
        prog.check(acyclic=False)
    except ProgramError as exc:
        assert str(exc) == want
        event("a cycle on one lane: refused by check")
        return
    env, rec = simpy.Environment(), Recorder()
    engine = DagEngine(
        prog,
        env,
        DirectFabric(env, rec, 1e9, 0.0),
        rec,
        [10**12] * prog.num_devices,
        collective_model="analytical",
    )
    try:
        engine.run()
    except SimulationStall:
        assert want is not None
        event("a cycle through lanes: the pass stalls")
    else:
        event("no cycle: every op ends")
        assert want is None and engine.finished_count() == len(prog.ops)
