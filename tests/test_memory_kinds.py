"""Memory by byte kind (weights, gradients, optimizer state, buffers, stashed weights,
activations) from the cost model through the Program to the result's columns."""

from __future__ import annotations

import pytest

import clustersim as cs
from clustersim.errors import ProgramError
from clustersim.memory_kinds import StaticMemory
from clustersim.planner import resolve_partition
from clustersim.program import COMPUTE, Program
from clustersim.resolve import resolve
from clustersim.simulate import compile_scenario
from clustersim.workload.memory_model import BYTES_PER_PARAM
from clustersim.workload.stage_cost import chunk_costs

GIB = 2**30
FAST = {"simulation.network": "analytical", "simulation.granularity": "stage"}
KINDS = ("params_bytes", "grads_bytes", "optimizer_bytes", "buffers_bytes")


@pytest.fixture(scope="module")
def quick():
    return cs.load_scenario("scenarios/quickstart.yaml").with_overrides(FAST)


@pytest.fixture(scope="module")
def runs(quick):
    """The quickstart run under each schedule the tests compare."""
    return {
        s: cs.simulate(quick.with_overrides({"parallel.schedule": s}), progress=False)
        for s in ("1f1b", "gpipe", "pipedream", "pipedream_2bw")
    }


def _by_stage(res, col):
    return res.devices.groupby("stage")[col].first()


def test_2bw_static_bytes_are_one_more_weight_copy_to_the_byte(quick):
    sc = quick.with_overrides({"parallel.schedule": "pipedream_2bw"})
    costs = chunk_costs(sc, sc.parallel.pp)
    prog = compile_scenario(sc)
    reserve = resolve(sc).runtime_reserve  # the CUDA context and NCCL's, once per GPU
    for dev in range(prog.num_devices):
        c = costs[dev // (sc.parallel.tp * sc.dp)].static  # devices are numbered stage-major
        want = 2 * c.weights + c.grads + c.optimizer + c.buffers + reserve
        assert prog.static_memory[dev].total == want
        assert prog.static_memory[dev].stashed == c.weights
    # the figure: 3.87 GiB of the model's static bytes on stage 0 (3.48 GiB of 1F1B +
    # one 0.385 GiB copy)
    assert (prog.static_memory[0].total - reserve) / GIB == pytest.approx(3.867, abs=5e-4)


def test_2bw_peak_is_1f1bs_plus_the_weights_and_its_activations_are_1f1bs(quick, runs):
    costs = chunk_costs(quick, quick.parallel.pp)
    one, two = runs["1f1b"], runs["pipedream_2bw"]
    extra = _by_stage(two, "peak_memory_bytes") - _by_stage(one, "peak_memory_bytes")
    assert extra.tolist() == [c.static.weights for c in costs]
    assert _by_stage(two, "stashed_weights_bytes").tolist() == [float(c.static.weights) for c in costs]
    assert _by_stage(two, "activations_bytes").tolist() == _by_stage(one, "activations_bytes").tolist()
    assert _by_stage(two, "activations_bytes")[0] / GIB == pytest.approx(11.656, abs=5e-4)


def test_pipedream_stashes_one_weight_version_per_microbatch_in_flight(quick, runs):
    costs, p = chunk_costs(quick, quick.parallel.pp), quick.parallel.pp
    pd, one = runs["pipedream"], runs["1f1b"]
    # its flush-free 1F1B keeps p − s micro-batches in flight on stage s, each with its version
    want = [float((p - s) * c.static.weights) for s, c in enumerate(costs)]
    assert _by_stage(pd, "stashed_weights_bytes").tolist() == want
    assert _by_stage(pd, "activations_bytes").tolist() == _by_stage(one, "activations_bytes").tolist()


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_single_version_schedules_peak_at_static_plus_activations_in_flight(quick, runs, schedule):
    costs, p, m = chunk_costs(quick, quick.parallel.pp), quick.parallel.pp, quick.num_microbatches
    res = runs[schedule]
    assert "stashed_weights_bytes" not in res.devices
    in_flight = [p - s if schedule == "1f1b" else m for s in range(p)]
    reserve = resolve(quick).runtime_reserve  # the CUDA context and NCCL's, once per GPU
    want = [c.static.total + reserve + n * c.activation_memory for c, n in zip(costs, in_flight)]
    assert _by_stage(res, "peak_memory_bytes").tolist() == want


@pytest.mark.parametrize("schedule", ["1f1b", "pipedream", "pipedream_2bw"])
def test_the_columns_add_up_to_the_peak(runs, schedule):
    d = runs[schedule].devices
    cols = [*KINDS, "activations_bytes"] + (["stashed_weights_bytes"] if schedule != "1f1b" else [])
    assert (d[cols].sum(axis=1) == d["peak_memory_bytes"]).all()


def _cnn():
    return cs.load_scenario(
        {
            "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu": "V100-SXM2-32GB"},
            "model": {"preset": "resnet50"},
            "training": {"global_batch": 16, "micro_batch": 4, "precision": "fp32", "optimizer": "sgd"},
            "parallel": {"pp": 2, "dp": 2},
            "simulation": {"iterations": 1, "network": "analytical"},
        }
    )


@pytest.mark.parametrize("kind", ["synthetic", "transformer", "cnn"])
def test_every_model_kind_starts_from_the_sum_of_its_kinds(kind, quick):
    sc = {
        "synthetic": lambda: cs.load_scenario("scenarios/synthetic-4stage-1f1b.yaml"),
        "transformer": lambda: quick,
        "cnn": _cnn,
    }[kind]()
    costs = chunk_costs(sc, sc.parallel.pp, resolve_partition(sc, sc.parallel.pp))
    res = cs.simulate(sc, progress=False)
    start = res.memory.groupby("device")["allocated_bytes"].first()  # the ledger's first sample
    per_stage, reserve = sc.parallel.tp * sc.dp, resolve(sc).runtime_reserve
    for dev in range(sc.cluster.num_gpus):
        c = costs[dev // per_stage].static
        assert start[f"gpu{dev}"] - reserve == c.weights + c.grads + c.optimizer + c.buffers == c.total
    for c in (x.static for x in costs):
        if kind == "synthetic":  # its params are weights, and it has no other static bytes
            layers = sc.model.layers // sc.parallel.pp
            assert (c.weights, c.grads, c.optimizer, c.buffers) == (int(layers * sc.model.params), 0, 0, 0)
        else:  # bytes per parameter of (weights, gradients, optimizer state): 2, 4, 12 or 4, 4, 4
            w, g, o = BYTES_PER_PARAM[(sc.training.precision, sc.training.optimizer)]
            assert (c.grads * w, c.optimizer * w) == (c.weights * g, c.weights * o)
    if kind != "synthetic":
        d = res.devices
        assert (d[[*KINDS, "activations_bytes"]].sum(axis=1) == d["peak_memory_bytes"]).all()


def test_zero_shards_each_kind_from_its_own_stage(quick):
    plain = chunk_costs(quick, 4)[1].static
    dp = quick.dp
    for zero, sharded in (
        (1, {"optimizer"}),
        (2, {"optimizer", "grads"}),
        (3, {"optimizer", "grads", "weights"}),
    ):
        z = chunk_costs(quick.with_overrides({"parallel.zero": zero}), 4)[1].static
        for k in ("weights", "grads", "optimizer"):
            assert getattr(z, k) == getattr(plain, k) // (dp if k in sharded else 1)
        assert z.buffers == plain.buffers


def test_a_stash_must_be_part_of_the_bytes_an_op_moves():
    prog = Program(1)
    prog.add(0, "compute", COMPUTE, "F0", duration=1.0, mem_alloc=10, stash_alloc=11)
    with pytest.raises(ProgramError, match="stash_alloc=11 of mem_alloc=10"):
        prog.check()


def test_memory_peaks_report_the_stash_held_at_the_peak():
    prog = Program(1)
    prog.static_memory[0] = StaticMemory(weights=5, stashed=5)
    prog.add(0, "compute", COMPUTE, "F0", duration=1.0, mem_alloc=7, stash_alloc=3)
    prog.add(0, "compute", COMPUTE, "B0", duration=1.0, mem_free=7, stash_free=3)
    prog.add(0, "compute", COMPUTE, "F1", duration=1.0, mem_alloc=4)
    assert prog.memory_peaks() == [(17, 8)]


def test_memory_peaks_count_an_allocation_off_the_compute_lane_from_its_earliest_start():
    # a prefetch on the gather lane waits only for F0, so it may run while F0's buffers
    # (freed by B0, added before it) are still held: 10 + 4 (in Program order: 10)
    prog = Program(1)
    f0 = prog.add(0, "compute", COMPUTE, "F0", duration=1.0, mem_alloc=10)
    prog.add(0, "compute", COMPUTE, "B0", duration=5.0, mem_free=10)
    prog.add(0, "gather", COMPUTE, "prefetch", duration=1.0, mem_alloc=4, deps=(f0.id,))
    prog.add(0, "compute", COMPUTE, "F1", duration=1.0, mem_free=4)
    assert prog.memory_peaks() == [(14, 0)]
