"""The result tables built column by column equal their one-row-at-a-time definitions:
the layouts' array coordinates, fold representatives and the spans frame (values, order
and dtypes)."""

import numpy as np
import pandas as pd
import pytest

import clustersim as cs
from clustersim.compilers import compile_job
from clustersim.engine.collector import collector_paused
from clustersim.parallel.plan import Plan
from clustersim.parallel.replica_layout import ReplicaLayout
from clustersim.record import SPAN_FIELDS
from clustersim.resolve import resolve
from clustersim.simulate import build_engine
from clustersim.trace.result import spans_frame


@pytest.mark.parametrize("tp, pp, dp, cp", [(1, 1, 1, 1), (2, 4, 3, 1), (8, 2, 2, 2), (4, 3, 1, 4)])
def test_plan_coords_of_is_coords_of_each_device(tp, pp, dp, cp):
    plan = Plan(tp=tp, pp=pp, dp=dp, cp=cp, gpus_per_node=4)
    devices = np.arange(plan.num_devices)
    arrays = np.stack(plan.coords_of(devices), axis=1)
    assert arrays.tolist() == [list(plan.coords(d)) for d in devices.tolist()]
    assert plan.node(devices).tolist() == [plan.node(d) for d in devices.tolist()]
    # the representative is the stage's first GPU: stage × tp × cp × dp
    assert plan.representatives(arrays[:, 0]).tolist() == [
        (d // (tp * cp * dp)) * tp * cp * dp for d in devices.tolist()
    ]


def test_replica_layout_coords_of_is_coords_of_each_device():
    layout = ReplicaLayout([3, 1, 2, 5], gpus_per_node=2)
    devices = np.arange(layout.num_devices)
    arrays = np.stack(layout.coords_of(devices), axis=1)
    assert arrays.tolist() == [list(layout.coords(d)) for d in devices.tolist()]
    assert arrays[:, 0].tolist() == [0, 0, 0, 1, 2, 2, 3, 3, 3, 3, 3]


def _row_by_row(program, recorder) -> pd.DataFrame:
    """The spans frame as defined: one tuple per op and link span, sorted (stable)."""
    rows = [
        (
            program.device_names[o.device],
            o.lane,
            o.kind,
            o.name,
            o.stage,
            o.microbatch,
            start,
            end,
            o.nbytes,
            o.flops,
            o.phase,
            o.iteration,
        )
        for i, start, end in recorder.ops
        for o in [program.ops[i]]
    ]
    df = pd.DataFrame.from_records(rows + recorder.spans, columns=list(SPAN_FIELDS))
    return df.sort_values(["start_s", "device", "lane"], kind="stable").reset_index(drop=True)


@pytest.mark.parametrize("network", ["packet", "analytical"])
def test_spans_frame_is_the_sorted_rows(network):
    sc = cs.load_scenario("scenarios/quickstart.yaml").with_overrides(
        {"simulation.network": network, "training.global_batch": 32}
    )
    job = resolve(sc)
    with collector_paused():
        prog = compile_job(job)
        engine, _ = build_engine(job, prog)
        engine.run()
    rec = engine.recorder
    assert network != "packet" or rec.spans  # link spans join the op spans
    got, want = spans_frame(prog, rec), _row_by_row(prog, rec)
    assert got.dtypes.to_dict() == want.dtypes.to_dict()
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    # only some ops recorded (a job's share of a merged run): the same per op
    rec.ops = rec.ops[::3]
    pd.testing.assert_frame_equal(spans_frame(prog, rec), _row_by_row(prog, rec), check_exact=True)
