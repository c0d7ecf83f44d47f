"""Megatron-FSDP (parallel.data_parallel.megatron_fsdp, the ``megatron_core`` profile's ZeRO-3):
its prefetch budget and reduce queue by Megatron-FSDP's rules, and on synthetic models the
iteration's closed forms on an idle fabric (analytical ring, float precision)."""

import pytest

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.parallel.megatron_fsdp import UNIT_FLOOR, MegatronFsdp, queue_waits
from clustersim.simulate import compile_scenario
from tests.conftest import synthetic
from tests.test_dp_overlap import ALPHA, BW, OPT, STEPS, B, F, end, ring
from tests.test_fsdp2 import assert_evaluators_agree

S = 1e7  # a synthetic layer's gathered bytes
U = int(S) // 2  # its elements (bf16)


def test_the_communication_unit_defaults_to_twice_the_mean_unit_floored_at_1e9():
    assert MegatronFsdp().communication_unit([3 * 10**8, 5 * 10**8]) == UNIT_FLOOR
    assert MegatronFsdp().communication_unit([6 * 10**8, 8 * 10**8]) == 14 * 10**8
    assert MegatronFsdp(unit_size=123).communication_unit([6 * 10**8]) == 123


@pytest.mark.parametrize(
    "budget, double, reach",
    [
        (100, False, 0),  # a unit of 100 already fills the budget: nothing more
        (101, False, 1),  # 100 < 101: the next joins
        (250, False, 2),  # 100, 200 < 250: two more
        (10**6, False, 3),  # no further than the pass's last unit
        (10**6, True, 1),  # double buffering: the next unit only
    ],
)
def test_a_gather_takes_the_next_units_while_below_the_budget(budget, double, reach):
    assert MegatronFsdp(double_buffer=double).reach([100, 100, 100, 100], 0, budget) == reach


def test_the_compute_waits_for_the_oldest_reductions_while_the_queue_is_over_capacity():
    assert queue_waits([5, 5], 10) == 0  # 10 is not over 10
    assert queue_waits([5, 5, 5], 10) == 1
    assert queue_waits([5, 5, 5, 5], 9) == 3  # 20, 15, 10 are over 9; 5 is not


def raw(unit_size, double=False, layers=4):
    r = synthetic(1, 1, F, B, layers_per_stage=layers, dp=4, params=S, optimizer=OPT, bandwidth=BW)
    r["cluster"]["collective_alpha"] = {"intra_node": ALPHA, "inter_node": ALPHA}
    r["cluster"]["comm_compute_slowdown"] = 1.0
    r["simulation"].update(collective_model="analytical", collectives={k: "ring" for k in STEPS})
    r["parallel"]["zero"] = 3
    options = {"communication_unit_size": unit_size, "double_buffer": double}
    # bf16 gradients: a synthetic layer reduces its S bytes, U elements, as it gathers them
    r["parallel"]["data_parallel"] = {"megatron_fsdp": options, "grad_reduce_dtype": "bf16"}
    return r


def mfsdp(unit_size, double=False):
    return cs.simulate(raw(unit_size, double), progress=False)


@pytest.mark.parametrize("unit_size, double", [(4 * U, False), (10**12, True), (10**12, False)])
def test_a_budget_beyond_one_unit_hides_every_gather_but_each_passs_first(unit_size, double):
    # the hooks prefetch within their pass (forward, or backward order) only, and the
    # forward's last unit is released after it: each pass's first gather waits for the
    # compute before it; the rest run during the units before theirs (ag < F/4)
    ag, rs = ring("all_gather", 4, S), ring("reduce_scatter", 4, S)
    assert ag < F / 4
    assert end(mfsdp(unit_size, double)) == pytest.approx(2 * ag + F + B + rs + OPT, rel=1e-12)


def test_a_unit_that_fills_the_budget_prefetches_nothing():
    # C // 2 = U: each gather holds its own unit only, issued when the unit before has run
    ag, rs = ring("all_gather", 4, S), ring("reduce_scatter", 4, S)
    assert end(mfsdp(2 * U)) == pytest.approx(8 * ag + F + B + rs + OPT, rel=1e-12)


def test_the_compute_waits_for_the_oldest_reduce_scatter_beyond_the_queue_capacity():
    # C = 2U over 8 layers: before layer 4's reduce-scatter three are queued (layers 7, 6,
    # 5: 3U > 2U), so the compute after it — layer 3's backward — waits for layer 7's
    ops = compile_scenario(cs.load_scenario(raw(2 * U, layers=8)), fold=False).ops
    rs = {op.name: op.id for op in ops if op.device == 0 and op.name.startswith("fsdp reduce-scatter")}
    waits = {
        op.name: set(op.deps) & set(rs.values())
        for op in ops
        if op.device == 0 and op.name in (f"B0 l{x}" for x in range(8))
    }
    assert waits == {
        "B0 l3": {rs["fsdp reduce-scatter B0 l7"]},
        "B0 l2": {rs["fsdp reduce-scatter B0 l6"]},
        "B0 l1": {rs["fsdp reduce-scatter B0 l5"]},
        "B0 l0": {rs["fsdp reduce-scatter B0 l4"]},
    } | {f"B0 l{x}": set() for x in range(4, 8)}


def test_the_megatron_core_profile_runs_megatron_fsdp_for_zero_3():
    r = {
        "name": "m",
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu": "A100-SXM4-80GB"},
        "model": {"preset": "gpt-1.3b", "seq_len": 512},
        "training": {"global_batch": 4, "micro_batch": 1, "framework": "megatron_core"},
        "parallel": {"dp": 4, "zero": 3},
    }
    dp = cs.load_scenario(r).parallel.data_parallel
    assert dp.megatron_fsdp is not None and dp.megatron_fsdp.double_buffer is False
    r["parallel"]["zero"] = 1
    assert cs.load_scenario(r).parallel.data_parallel.megatron_fsdp is None


@pytest.mark.parametrize("change", [{"zero": 1}, {"data_parallel": {"megatron_fsdp": {}, "fsdp2": True}}])
def test_what_megatron_fsdp_cannot_run_is_refused_naming_the_field(change):
    r = raw(None)
    r["parallel"].update(change)
    if "data_parallel" not in change:
        r["parallel"]["data_parallel"] = {"megatron_fsdp": {}}
    with pytest.raises(ScenarioError, match=r"parallel\.data_parallel\.megatron_fsdp"):
        cs.simulate(r, progress=False)


def test_dag_evaluator_and_engine_agree():
    r = raw(3 * U, layers=8)
    r["simulation"]["iterations"] = 2
    assert_evaluators_agree(r)
