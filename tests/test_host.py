"""The host's issue rate (clustersim/workload/host.py): closed forms of the race between the
CPU that issues kernels and the GPU stream, CUDA graphs, the measured dispatch's source row,
and the invariants — pricing the host never speeds a step up and adds no op or event."""

from __future__ import annotations

import copy
import csv

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.workload.grad_accumulation import with_grad_accumulation
from clustersim.workload.host import HOST_CSV, STACKS, dispatch_s, host_waits
from tests.test_fixed_costs import DGX, ONE_GPU, L, _config, _kernels, _ops

D = 7e-6  # a dispatch, s


def _kernel(t: float, launches: int = 0, kernels: int = 1) -> tuple:
    return ("c", t, 0.0, launches, kernels, None)


def _collective() -> tuple:
    return ("x", "all_reduce", 1024, "tp all-reduce", "tp", ())


def _span(waits: list[float], items: list[tuple], launch_s: float = 0.0) -> float:
    """The pass's GPU time in the race: its kernels' time, launches and waits."""
    return sum(waits) + sum(i[1] + i[3] * launch_s for i in items if i[0] == "c")


@pytest.mark.parametrize("n", [1, 2, 17])
def test_a_chain_of_kernels_shorter_than_a_dispatch_runs_at_the_host_rate(n):
    """Each kernel waits for its issue: the last is issued n dispatches in and runs its τ."""
    tau = 2e-6
    items = [_kernel(tau)] * n
    assert _span(host_waits([items], 0.0, D), items) == pytest.approx(n * D + tau, rel=1e-12)


def test_the_launch_latency_counts_as_gpu_time_in_the_race():
    tau = 1e-6
    items = [_kernel(tau, launches=1)] * 5
    # τ + L = 4 µs < D: host-bound all the same
    assert _span(host_waits([items], 3e-6, D), items, 3e-6) == pytest.approx(5 * D + tau + 3e-6, rel=1e-12)


def test_long_kernels_hide_the_dispatch_but_the_first():
    """Kernels at least a dispatch long: the host runs ahead after the first issue."""
    items = [_kernel(t) for t in (D, 3 * D, 50e-6, D)]
    assert host_waits([items], 0.0, D) == [pytest.approx(D, rel=1e-12)]


def test_an_item_of_k_kernels_is_k_equal_kernels():
    """One merged item of k kernels races as k items of t/k each (the closed form)."""
    for t, k in ((3e-6, 4), (80e-6, 4), (20e-6, 3)):
        one = host_waits([[_kernel(10e-6), _kernel(t, kernels=k)]], 0.0, D)
        many = host_waits([[_kernel(10e-6)] + [_kernel(t / k)] * k], 0.0, D)
        assert one == pytest.approx(many, rel=1e-12)


def test_a_collective_is_one_host_call_and_no_gpu_time_in_the_race():
    tau = 1e-6
    items = [_kernel(tau), _collective(), _kernel(tau)]
    # issued at D, the collective at 2D, the second kernel at 3D
    assert _span(host_waits([items], 0.0, D), items) == pytest.approx(3 * D + tau, rel=1e-12)
    trailing = [_kernel(tau), _collective()]  # the pass ends when the host issued its collective
    assert _span(host_waits([trailing], 0.0, D), trailing) == pytest.approx(2 * D, rel=1e-12)


def test_the_race_carries_from_one_layer_piece_to_the_next():
    """Per-layer pieces of one pass share one race: the waits split, their sum is the pass's."""
    items = [_kernel(t) for t in (1e-6, 30e-6, 2e-6, 2e-6, 2e-6, 9e-6)]
    whole = host_waits([items], 0.0, D)
    pieces = host_waits([items[:2], items[2:4], items[4:]], 0.0, D)
    assert sum(pieces) == pytest.approx(whole[0], rel=1e-12) and len(pieces) == 3


_items = st.lists(
    st.one_of(
        st.tuples(st.floats(0.0, 1e-4), st.integers(0, 2), st.integers(1, 6)).map(lambda x: _kernel(*x)),
        st.just(_collective()),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_items, min_size=1, max_size=4), st.floats(0.0, 5e-6), st.floats(0.0, 2e-5), st.floats(0.0, 2e-5)
)
def test_waits_are_never_negative_zero_without_dispatch_and_grow_with_it(pieces, launch, d1, d2):
    lo, hi = sorted((d1, d2))
    assert host_waits(pieces, launch, 0.0) == [0.0] * len(pieces)  # exactly: no float residue
    w_lo, w_hi = host_waits(pieces, launch, lo), host_waits(pieces, launch, hi)
    assert all(w >= 0.0 for w in w_lo)
    assert sum(w_lo) <= sum(w_hi) + 1e-15


def _run(raw: dict, **training):
    raw = copy.deepcopy(raw)
    raw["training"] = {**raw["training"], **training}
    return cs.simulate(cs.load_scenario(raw))


@settings(max_examples=6, deadline=None)
@given(
    hidden=st.sampled_from([64, 256, 1024]),
    micro=st.sampled_from([1, 4]),
    framework=st.sampled_from(sorted(STACKS)),
    dgx=st.booleans(),
)
def test_pricing_the_host_never_speeds_a_step_up_nor_adds_ops_or_events(hidden, micro, framework, dgx):
    raw = copy.deepcopy(DGX if dgx else ONE_GPU)
    raw["model"] = {**raw["model"], "hidden": hidden}
    raw["training"] = {**raw["training"], "micro_batch": micro, "framework": framework}
    if dgx:
        raw["parallel"] = {**raw["parallel"], "sequence_parallel": True}
        # overlap interference re-rates compute whenever communication starts or ends beside
        # it: its events follow the timing; without it each op costs its fixed events
        raw["cluster"] = {**raw["cluster"], "comm_compute_slowdown": 1}
    with_host = _run(raw)
    without = _run(raw, fixed_costs={"host_dispatch": 0})
    assert with_host.summary["iteration_time_s"] >= without.summary["iteration_time_s"]
    assert len(with_host.spans) == len(without.spans)
    assert with_host.summary["sim_events"] == without.summary["sim_events"]


def test_a_small_model_is_host_bound_and_cuda_graphs_remove_the_dispatch():
    """On one GPU the step is one chain: the waits are the whole difference, and with CUDA
    graphs each pass's launch op is its kernels' GPU launch latency again."""
    eager, graphs = _run(ONE_GPU), _run(ONE_GPU, cuda_graphs=True)
    no_host = _run(ONE_GPU, fixed_costs={"host_dispatch": 0})
    assert graphs.summary["iteration_time_s"] == no_host.summary["iteration_time_s"]
    assert eager.summary["iteration_time_s"] > graphs.summary["iteration_time_s"]
    launches = graphs.spans[graphs.spans.name.str.startswith("launch ")]
    eager_launches = eager.spans[eager.spans.name.str.startswith("launch ")]
    waits = float((eager_launches.end_s - eager_launches.start_s).sum())
    waits -= float((launches.end_s - launches.start_s).sum())
    gap = eager.summary["iteration_time_s"] - graphs.summary["iteration_time_s"]
    assert gap == pytest.approx(waits, rel=1e-9)
    ops = with_grad_accumulation(_ops(_config()), 2)
    assert launches.end_s.iloc[0] - launches.start_s.iloc[0] == pytest.approx(_kernels(ops)[0] * L, rel=1e-9)


def test_every_profile_issues_at_its_stacks_measured_dispatch():
    with HOST_CSV.open() as fh:
        rows = list(csv.DictReader(fh))
    assert all(r["source"].strip() and r["role"] in ("calibrate", "context") for r in rows)
    for framework, stack in STACKS.items():
        (row,) = [
            r for r in rows if (r["stack"], r["quantity"], r["role"]) == (stack, "dispatch", "calibrate")
        ]
        assert dispatch_s(framework) == float(row["value_us"]) * 1e-6
        raw = copy.deepcopy(ONE_GPU)
        raw["training"]["framework"] = framework
        assert cs.load_scenario(raw).training.cuda_graphs is False  # opt-in in every stack


@pytest.mark.parametrize(
    "training", [{"cuda_graphs": "sometimes"}, {"fixed_costs": {"host_dispatch": -1e-6}}]
)
def test_bad_host_settings_are_refused(training):
    raw = copy.deepcopy(ONE_GPU)
    raw["training"] = {**raw["training"], **training}
    with pytest.raises(ScenarioError):
        cs.load_scenario(raw)


def _sync_collective() -> tuple:
    return ("x", "all_to_all", 1024, "ep dispatch", "ep", (), True)


@pytest.mark.parametrize("layers, k", [(1, 1), (3, 4), (6, 16)])
def test_after_each_host_sync_the_gpu_idles_for_the_hosts_lag(layers, k):
    """Each layer: a long kernel (the host runs ahead during it), the dispatcher's
    device→host sync before its all-to-all, then k kernels shorter than a dispatch. The sync
    drops the host's lead: from the long kernel's end to the next one's start the GPU waits
    for the host to issue the collective, the k kernels and the next long kernel, (k + 2)
    dispatches — each layer after the first takes T + (k + 2)·D exactly. Without the sync
    the host issues all of it during the long kernel: the GPU waits only for the first issue."""
    long, tau = 1e-3, 2e-6
    layer = [_kernel(long), _sync_collective()] + [_kernel(tau)] * k
    waits = host_waits([layer] * layers, 0.0, D)
    period = long + (k + 2) * D
    end = D + (layers - 1) * period + long + (k + 1) * D + tau  # the last short kernel's end
    assert sum(waits) == pytest.approx(end - layers * (long + k * tau), rel=1e-12)
    unsynced = [_kernel(long), _collective()] + [_kernel(tau)] * k
    assert sum(host_waits([unsynced] * layers, 0.0, D)) == pytest.approx(D, rel=1e-12)


@pytest.mark.parametrize("dispatcher", ["alltoall", "allgather", "flex"])
def test_the_host_sync_rides_in_the_launch_op_never_speeds_a_step_nor_adds_ops(dispatcher):
    """A small fine-grained MoE (16 experts, top-4, EP 8, tiny hidden: host-bound kernels)
    with and without the dispatcher's per-layer sync: the same ops and events (the wait is
    in each pass's launch op; alltoall's sync comes with its split-size all-gather, one a
    layer's forward, which splits the compute around it), never faster, and slower here —
    the host loses its lead."""
    raw = {
        "cluster": {"preset": "dgx_h100", "nodes": 1, "comm_compute_slowdown": 1},
        "model": {"hf_config": "qwen3-30b-a3b", "seq_len": 256, "layers": 2, "hidden": 256, "experts": 16,
                  "experts_per_token": 4, "moe_ffn_hidden": 64, "heads": 4, "kv_heads": 1, "vocab": 1024},
        "training": {"global_batch": 16, "micro_batch": 1, "precision": "bf16", "framework": "megatron_core"},
        "parallel": {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "moe_token_dispatcher": dispatcher},
        "simulation": {"network": "analytical", "collective_model": "analytical"},
    }  # fmt: skip
    synced = cs.simulate(cs.load_scenario(raw))
    raw["parallel"]["moe_host_sync"] = False
    free = cs.simulate(cs.load_scenario(raw))
    gather = (synced.spans.name == "ep split-size all-gather").sum()
    assert gather == (2 * 2 * 8 if dispatcher == "alltoall" else 0)  # layers × micro-batches × GPUs
    if not gather:
        assert len(synced.spans) == len(free.spans)
        assert synced.summary["sim_events"] == free.summary["sim_events"]
    assert synced.summary["iteration_time_s"] > free.summary["iteration_time_s"]
