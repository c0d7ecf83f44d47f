"""A pass's ops emitted once and stamped for every micro-batch that runs the same pass.

A stage runs the same pass — one model chunk's forward, backward or W, with the same split,
memory and received tensor — once per micro-batch, and its ops differ only in their ids,
the op the pass starts after, the micro-batch, iteration and weight version every op is
labelled with (``_Segments._labels`` in :mod:`.compiler`), and the pass's name and
iteration inside op names and tags. So the compiler emits each distinct pass of a GPU once
into a scratch Program, with markers in place of the pass's name and iteration and a
marker op as the op it starts after (:meth:`PassTemplate.record`), and stamps the result
for every micro-batch (:meth:`PassTemplate.stamp`): the ops, ids, fields and order
:func:`~.compiler.emit_pass` produces, without running the segment emitters again. (GPT-3
175B on 1,024 GPUs folded: 6,144 passes stamped from 32 templates, issue #19.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...coarsen import merge_runs
from ...program import COMPUTE, Op, Program

#: what the scratch emission writes for the pass's name and iteration, replaced when stamping
_NAME, _ITERATION = "\x00pass\x00", "\x00iteration\x00"
#: the lane of the scratch emission's op 0, the op the pass starts after (alone on its lane)
_BEFORE = "\x00before\x00"


def _marked(text: str) -> bool:
    return _NAME in text or _ITERATION in text


@dataclass(frozen=True)
class PassTemplate:
    """One pass's ops (:meth:`Op.row` each, ids counted from the pass's first op), their
    dependencies in the same local ids (-1: the op before the pass), whether each op's name
    and tag hold the markers, and which ops are the pass's first and last."""

    rows: tuple[tuple, ...]
    deps: tuple[tuple[int, ...], ...]
    marked: tuple[tuple[bool, bool], ...]
    first: int
    last: int

    @classmethod
    def record(cls, emit: Callable[..., tuple[Op, Op]], coarse: bool = False) -> PassTemplate:
        """The template of the pass ``emit(prog, name=…, it=…, after=…)`` emits (returning its
        (first, last) op, as :func:`~.compiler.emit_pass`), given every other argument;
        ``coarse``: with its runs of compute ops merged (:func:`~clustersim.coarsen.merge_runs`),
        as :func:`~clustersim.coarsen.coarsen` would merge them in every stamped copy: ops
        emitted outside a pass only wait on its last op or are waited on by its first
        (sends, the next pass; recvs), and nothing in the pass runs before the first or
        after the last on their lanes (tests/test_pass_template.py)."""
        scratch = Program(0)  # never checked or run: it only collects the pass's ops
        before = scratch.add(0, _BEFORE, COMPUTE, "the op before the pass")
        first, last = emit(scratch, name=_NAME, it=_ITERATION, after=before)
        if coarse:
            scratch, ids = merge_runs(scratch)
            if ids is not None:
                first, last = scratch.ops[ids[first.id]], scratch.ops[ids[last.id]]
        ops = scratch.ops[1:]  # ids one above the template's: op 0 (the op before) is -1
        return cls(
            tuple(op.row() for op in ops),
            tuple(tuple(d - 1 for d in op.deps) for op in ops),
            tuple((_marked(op.name), _marked(op.tag)) for op in ops),
            first.id - 1,
            last.id - 1,
        )

    def stamp(
        self, prog: Program, name: str, mb: int, it: int, version: int, after: Op | None
    ) -> tuple[Op, Op]:
        """Append the pass's ops to ``prog`` as pass ``name`` of micro-batch ``mb`` in
        iteration ``it`` at weight ``version``, after op ``after`` (None: the GPU's first
        pass); return its (first, last) op."""
        base = len(prog.ops)
        before = () if after is None else (after.id,)
        iteration = str(it)
        for i, (row, deps, (in_name, in_tag)) in enumerate(zip(self.rows, self.deps, self.marked)):
            op = Op.from_row(row)
            op.id = base + i
            op.microbatch, op.iteration, op.version = mb, it, version
            op.deps = _shifted(deps, base, before)
            if in_name:
                op.name = op.name.replace(_NAME, name).replace(_ITERATION, iteration)
            if in_tag:
                op.tag = op.tag.replace(_NAME, name).replace(_ITERATION, iteration)
            prog.append(op)
        return prog.ops[base + self.first], prog.ops[base + self.last]


def _shifted(deps: tuple[int, ...], base: int, before: tuple[int, ...]) -> tuple[int, ...]:
    """``deps`` (local ids) as ids of a stamp starting at ``base``; -1 becomes ``before``."""
    out: tuple[int, ...] = ()
    for d in deps:
        out += before if d < 0 else (base + d,)
    return out
