"""Coarsening merges per-layer ops exactly: same iteration time, fewer ops."""

import pytest
import simpy

import clustersim as cs
from clustersim.coarsen import coarsen
from clustersim.compilers.pipeline.compile import compile_pipeline
from clustersim.compilers.pipeline.context import CompileContext
from clustersim.engine.interpreter import Engine
from clustersim.memory_kinds import StaticMemory
from clustersim.network import DirectFabric
from clustersim.parallel.plan import Plan
from clustersim.record import Recorder
from clustersim.schedules import SCHEDULES
from clustersim.workload import Segment, StageCost


def _per_layer_costs(p: int, layers: int, f: float, b: float, act: int) -> list[StageCost]:
    passes = {
        "F": tuple(Segment("compute", f, 2.0) for _ in range(layers)),
        "B": tuple(Segment("compute", b, 4.0) for _ in range(layers)),
    }
    return [
        StageCost(layers * f, layers * b, 0.0, act, act, StaticMemory(weights=2**20), 1e-4, passes=passes)
    ] * p


def _run(prog: cs.Program):
    env, rec = simpy.Environment(), Recorder()
    engine = Engine(prog, env, DirectFabric(env, rec, 50e9, 3e-6), rec, [2**40] * prog.num_devices)
    engine.run()
    return rec, engine


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m,layers", [(1, 3, 4), (4, 8, 3), (3, 5, 1)])
def test_coarsened_equals_per_layer(schedule, p, m, layers):
    costs = _per_layer_costs(p, layers, 1e-3, 2e-3, 2**22)
    prog = compile_pipeline(CompileContext(SCHEDULES[schedule], Plan(1, p, 1, 8), costs, m, iterations=2))
    prog.check()
    fine = coarsen(prog)
    fine.check()
    rec_a, eng_a = _run(prog)
    rec_b, eng_b = _run(fine)
    end_a = max(e for _, _, e in rec_a.ops)
    end_b = max(e for _, _, e in rec_b.ops)
    assert end_b == pytest.approx(
        end_a, rel=1e-12
    )  # exact up to float rounding of (t + a) + b vs t + (a + b)
    assert eng_a.memory.peak == eng_b.memory.peak
    # one compute op per pass (+ optimizer) after merging
    compute = [o for o in fine.ops if o.kind == "compute"]
    assert len(compute) == 2 * (2 * m + 1) * p
    assert sum(o.flops for o in fine.ops) == sum(o.flops for o in prog.ops)
    if layers > 1:
        assert len(fine.ops) < len(prog.ops)
        assert eng_b.events < eng_a.events


def test_ops_with_outside_dependents_stay_separate():
    prog = cs.Program(2)
    a = prog.add(0, "compute", "compute", "F0", duration=1.0, phase="F", microbatch=0)
    prog.add(0, "compute", "compute", "F0", duration=1.0, phase="F", microbatch=0, deps=(a.id,))
    prog.add(1, "compute", "compute", "X", duration=1.0, deps=(a.id,))  # someone else needs a's end
    assert len(coarsen(prog).ops) == 3


def test_an_uneven_all_to_all_keeps_its_matrix():
    """Coarsening copies every op it does not merge whole: an all-to-all-v's ``split``
    matrix too (it was dropped before session 7, making the exchange even)."""
    prog = cs.Program(2)
    a = prog.add(0, "compute", "compute", "F0", duration=1.0, phase="F", microbatch=0)
    prog.add(0, "compute", "compute", "F0", duration=1.0, phase="F", microbatch=0, deps=(a.id,))
    matrix = ((0, 30), (10, 0))
    for dev, row in enumerate(matrix):
        prog.add(
            dev,
            "ep",
            "collective",
            "ep dispatch",
            nbytes=sum(row),
            group=(0, 1),
            collective="all_to_all",
            tag="d0",
            split=matrix,
        )
    out = coarsen(prog)
    assert len(out.ops) == 3
    assert [op.split for op in out.ops if op.kind == "collective"] == [matrix, matrix]
