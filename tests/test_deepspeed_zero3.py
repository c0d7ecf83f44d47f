"""DeepSpeed ZeRO-3 (parallel.data_parallel.deepspeed_zero3, the ``deepspeed`` profile's ZeRO-3):
the coordinator's gathers, prefetches and releases by DeepSpeed's rules, and on a 2-layer GPT
on one node the exact all-gathers and reduce-scatter buckets and the iteration's closed forms
on an idle fabric (analytical ring, float precision)."""

import math

import pytest

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.parallel.zero3 import Fetch, Zero3Limits, replay, replay_2021
from clustersim.workload.cost_model import CostModel
from tests.conftest import synthetic

ALPHA = 1e-6
H, V, S = 2048, 50257, 128  # gpt-1.3b's hidden size and vocabulary; the sequence (= learned positions)


# -- the coordinator, by DeepSpeed's rules ------------------------------------------------------


def test_persistence_threshold_keeps_parameters_below_it_whole():
    # mark_persistent_parameters: ds_numel < param_threshold stays whole, never gathered
    lim = Zero3Limits(prefetch_bucket=0)
    out = replay([(0, 1)], [99_999, 100_000], lim)
    assert out == [Fetch(now=(1,), prefetch=(), freed=(1,))]


def test_prefetch_pops_the_trace_until_the_bucket_is_reached():
    # four visits of 3e7 elements each, bucket 5e7: visit 0 gathers its own, then prefetches
    # 1 (3e7 < 5e7, go on) and 2 (6e7: stop); visit 1 finds its parameter in flight and
    # prefetches 3; nothing is used again, so each visit frees its own
    out = replay([(0,), (1,), (2,), (3,)], [30_000_000] * 4, Zero3Limits())
    assert [(f.now, f.prefetch, f.freed) for f in out] == [
        ((0,), (1, 2), (0,)),
        ((), (3,), (1,)),
        ((), (), (2,)),
        ((), (), (3,)),
    ]


def test_max_live_parameters_stops_the_prefetch():
    # min(max_live − available, bucket) ≤ 0 once 3e7 are available under a 3e7 limit
    out = replay([(0,), (1,)], [30_000_000] * 2, Zero3Limits(max_live=30_000_000))
    assert [(f.now, f.prefetch) for f in out] == [((0,), ()), ((1,), ())]


@pytest.mark.parametrize("limit, kept", [(300_000, False), (300_001, True)])
def test_reuse_distance_keeps_a_parameter_used_again_soon(limit, kept):
    # A (2e5), B (3e5), A: A is kept when fewer than max_reuse elements pass before its reuse
    out = replay([(0,), (1,), (0,)], [200_000, 300_000], Zero3Limits(prefetch_bucket=0, max_reuse=limit))
    assert out[0].freed == (() if kept else (0,))
    assert out[2].now == (() if kept else (0,))


def test_2021_coordinator_synchronises_and_prefetches_only_when_nothing_is_in_flight():
    # v0.3: visit 0 gathers 0 (a sync), prefetches 1 (≥ 5e7 reached); visit 1 finds 1 in
    # flight (a sync), prefetches 2; a visit of persistent parameters neither syncs nor
    # prefetches while 3 is in flight
    numel = [60_000_000, 60_000_000, 60_000_000, 60_000_000, 10]
    out = replay_2021([(0,), (1,), (4,), (2,), (3,)], numel, Zero3Limits())
    assert [(f.now, f.prefetch, f.synchronize) for f in out] == [
        ((0,), (1,), True),
        ((), (2,), True),
        ((), (), False),
        ((), (3,), True),
        ((), (), True),
    ]


# -- a 2-layer GPT on one node --------------------------------------------------------------------


#: the analytical network and ring collectives the closed forms below assume
RING = {
    "network": "analytical",
    "collective_model": "analytical",
    "collectives": {"all_gather": "ring", "reduce_scatter": "ring", "all_reduce": "ring"},
}


def node(n: int, bw: float) -> dict:
    """One node of n A100s, links of ``bw`` bytes/s and α = ALPHA, no interference."""
    cluster = synthetic(1, 1, dp=n, bandwidth=bw)["cluster"]
    cluster.update(collective_alpha={"intra_node": ALPHA, "inter_node": ALPHA}, comm_compute_slowdown=1.0)
    return cluster


def gpt(n=4, bw=1e9, seq=S, dp_options=None, memory=None, **z3):
    cluster = node(n, bw)
    if memory is not None:  # an A100 of less memory
        a100 = {"peak_flops": 312e12, "hbm_bandwidth": 2.039e12, "like": "A100-SXM4-80GB"}
        cluster["gpu"] = {"name": "A100-small", "memory": memory, **a100}
    raw = {
        "name": "zero3",
        "cluster": cluster,
        "model": {"preset": "gpt-1.3b", "seq_len": seq, "layers": 2},
        "training": {
            "global_batch": n,
            "micro_batch": 1,
            "precision": "bf16",
            "optimizer": "adam",
            "framework": "deepspeed",
            "recompute": "full",
        },
        "parallel": {"dp": n, "zero": 3, "data_parallel": {"deepspeed_zero3": z3, **(dp_options or {})}},
        "simulation": RING,
    }
    return cs.simulate(raw, progress=False)


def ring(n: int, nbytes: float, bw: float) -> float:
    """An all-gather or reduce-scatter on one node: (n − 1)·(α + S/(n·B))."""
    return (n - 1) * (ALPHA + nbytes / (n * bw))


def pad(x: int, n: int) -> int:
    return math.ceil(x / n) * n


def lane(res, name: str):
    sp = res.spans
    out = sp[(sp["device"] == sp["device"].min()) & (sp["lane"] == name)]
    return out.sort_values("start_s")


#: a layer's gathered weights (QKV, projection, FC1, FC2); its biases and norms are under 1e5
LAYER = [3 * H * H, H * H, 4 * H * H, 4 * H * H]


def gathers_without_prefetch_or_reuse() -> list[list[int]]:
    """The parameters each all-gather carries with prefetch and reuse off: every submodule
    gathers its own before each use — forward, the recomputed forward, backward."""
    emb = [V * H, S * H]  # word and position embeddings, one coalesced gather
    fwd = [emb] + [[w] for _ in range(2) for w in LAYER] + [[V * H]]  # the tied output layer
    layer_bwd = [[w] for w in LAYER] + [[w] for w in LAYER[::-1]]
    return fwd + [[V * H]] + layer_bwd * 2 + [emb]


@pytest.mark.parametrize("n", [2, 4])
def test_gathers_are_per_submodule_in_trace_order_with_their_padded_sizes(n):
    res = gpt(n, prefetch_bucket_size=0, max_reuse_distance=0)
    ag = lane(res, "gather")
    want = [2 * sum(pad(x, n) for x in g) for g in gathers_without_prefetch_or_reuse()]
    assert ag["bytes"].tolist() == want
    assert (ag["end_s"] - ag["start_s"]).to_numpy() == pytest.approx(
        [ring(n, b, 1e9) for b in want], rel=1e-12
    )


def test_gathers_overlap_nothing_and_the_iteration_is_their_sum_when_the_fabric_is_slow():
    # the host issues every gather without waiting for compute, so they run back to back;
    # each visit's compute waits for its own: the backward ends one embedding-backward after
    # the last gather, then the one bucket's reduce-scatter (every gradient, norms included)
    n, bw = 4, 1e9
    res = gpt(n, bw, prefetch_bucket_size=0, max_reuse_distance=0)
    ag, rs, comp = lane(res, "gather"), lane(res, "comm"), lane(res, "compute")
    assert ag["start_s"].iloc[1:].to_numpy() == pytest.approx(ag["end_s"].iloc[:-1].to_numpy(), rel=1e-12)
    last = comp[comp["name"].str.contains(" l0 m0B")]
    c_last = float(last["end_s"].max() - last["start_s"].min())
    grads = [2 * H, 3 * H * H, 3 * H, H * H, H, 2 * H, 4 * H * H, 4 * H, 4 * H * H, H] * 2 + [
        2 * H,
        V * H,
        S * H,
    ]
    red = rs[rs["name"].str.startswith("zero3 reduce-scatter")]
    assert red["bytes"].tolist() == [2 * sum(pad(g, n) for g in grads)]
    total = sum(ring(n, b, bw) for b in ag["bytes"])
    assert float(red["end_s"].iloc[0]) == pytest.approx(
        total + c_last + ring(n, red["bytes"].iloc[0], bw), rel=1e-12
    )


def test_only_the_first_gather_is_exposed_when_compute_is_longer():
    n, bw = 4, 1e12
    res = gpt(n, bw, seq=2048, prefetch_bucket_size=0, max_reuse_distance=0)
    ag, rs, comp = lane(res, "gather"), lane(res, "comm"), lane(res, "compute")
    passes = comp[comp["name"].str.contains(" m\\d+[FRB]$")]
    busy = float((passes["end_s"] - passes["start_s"]).sum())
    red = rs[rs["name"].str.startswith("zero3 reduce-scatter")]
    first = ring(n, ag["bytes"].iloc[0], bw)
    want = first + busy + ring(n, red["bytes"].iloc[0], bw)
    assert float(red["end_s"].iloc[0]) == pytest.approx(want, rel=1e-9)


def test_gathers_run_ahead_only_as_far_as_memory_lets():
    # compute-bound: every gather is issued at once and would run far ahead; on a GPU with
    # 0.5 GB less than that peak the allocator holds them back until visits free enough
    free = {"prefetch_bucket_size": 0, "max_reuse_distance": 0}
    ahead = gpt(4, 1e12, seq=2048, **free)
    peak = float(ahead.devices["peak_memory_bytes"].iloc[0])
    small = gpt(4, 1e12, seq=2048, memory=int(peak - 5e8), **free)
    dev = small.devices.iloc[0]
    assert not small.summary["oom"] and dev["peak_memory_bytes"] <= dev["memory_capacity_bytes"]
    assert small.summary["iteration_time_s"] >= ahead.summary["iteration_time_s"]


def test_reduce_scatter_buckets_follow_deepspeeds_rule():
    # bucket of 9h² elements: a gradient that would take a non-empty bucket past it is
    # preceded by the bucket's reduce-scatter. Gradients arrive output layer first: the final
    # norm, then per layer FC2, FC1, norm2, projection, QKV, norm1 (weight, bias), then the
    # embedding's two (the tied word matrix once, after its last use; alone past the cap, so
    # the positions that follow go alone too)
    n = 4
    res = gpt(n, dp_options={"bucket_size": 9 * H * H * 2})
    b1 = [H, H, 4 * H * H, H, 4 * H * H, 4 * H, H, H]
    b2 = [H * H, H, 3 * H * H, 3 * H, H, H, 4 * H * H, H]
    b3 = [4 * H * H, 4 * H, H, H, H * H, H, 3 * H * H, 3 * H, H, H]
    b4, b5 = [V * H], [S * H]
    red = lane(res, "comm")
    red = red[red["name"].str.startswith("zero3 reduce-scatter")]
    assert red["bytes"].tolist() == [2 * sum(pad(g, n) for g in b) for b in (b1, b2, b3, b4, b5)]


def test_2021_coordinator_serialises_gathers_copies_compute_and_reductions():
    # v0.3 without overlap_comm: every gathering fetch synchronises the device, each parameter
    # gathered and reduce-scattered on its own through PyTorch ≤ 1.9's list-form collectives
    # (n copy kernels over the bytes, read and written), the reductions in line on the
    # compute stream: the backward's end is the sum of everything
    n, bw = 4, 1e9
    res = gpt(
        n,
        bw,
        dp_options={"overlap_grad_reduce": False},
        coordinator="v0.3",
        prefetch_bucket_size=0,
        max_reuse_distance=0,
    )
    cm = CostModel.for_gpu("A100-SXM4-80GB")
    launch, hbm = cm.eff.launch_s, cm.gpu.hbm_bandwidth * cm.eff.memory
    ag, comp = lane(res, "gather"), lane(res, "compute")
    ag = ag[ag["kind"] == "collective"]
    passes = comp[comp["name"].str.contains(" m\\d+[FRB]$")]
    red = comp[comp["name"].str.startswith("zero3 reduce-scatter")]
    assert len(ag) == sum(len(g) for g in gathers_without_prefetch_or_reuse())
    assert len(red) == 2 * 12 + 2 + 2  # every parameter's own: 12 per layer, final norm, embedding
    moved = list(ag["bytes"]) + list(red["bytes"])
    copies = res.spans[res.spans["name"].str.startswith("zero3 list copies")]
    copies = copies[copies["device"] == copies["device"].min()]
    assert sorted((copies["end_s"] - copies["start_s"]).to_numpy()) == pytest.approx(
        sorted(n * launch + 2 * b / hbm for b in moved), rel=1e-12
    )
    busy = float((passes["end_s"] - passes["start_s"]).sum())
    want = sum(ring(n, b, bw) + n * launch + 2 * b / hbm for b in moved) + busy
    assert float(red["end_s"].max()) == pytest.approx(want, rel=1e-9)


BASE = {
    "name": "p",
    "cluster": {"nodes": 1, "gpus_per_node": 8},
    "model": {"preset": "gpt-1.3b", "seq_len": 512},
    "training": {"global_batch": 16, "micro_batch": 1, "framework": "deepspeed"},
    "parallel": {"dp": 8, "zero": 3},
}
SYNTHETIC = {"kind": "synthetic", "layers": 4, "forward": 1e-3, "backward": 2e-3, "params": 1e7}


def test_deepspeed_profile_runs_its_coordinator_on_transformers_only():
    z3 = cs.load_scenario(BASE).parallel.data_parallel.deepspeed_zero3
    assert (z3.prefetch_bucket_size, z3.max_live_parameters, z3.param_persistence_threshold) == (
        5e7,
        1e9,
        1e5,
    )
    assert z3.coordinator == "v0.6"
    synthetic_model = cs.load_scenario({**BASE, "model": SYNTHETIC})
    assert synthetic_model.parallel.data_parallel.deepspeed_zero3 is None  # FSDP units


@pytest.mark.parametrize(
    "change, field",
    [
        ({"parallel": {"dp": 4, "pp": 2, "zero": 3}}, "parallel.pp"),
        ({"parallel": {"dp": 8, "zero": 3, "schedule": "gpipe"}}, "parallel.schedule"),
        (
            {
                "model": SYNTHETIC,
                "parallel": {"dp": 8, "zero": 3, "data_parallel": {"deepspeed_zero3": {}}},
            },
            "parallel.data_parallel.deepspeed_zero3",
        ),
    ],
)
def test_what_deepspeed_zero3_cannot_run_is_refused_naming_the_field(change, field):
    with pytest.raises(ScenarioError, match=field):
        cs.simulate({**BASE, **change}, progress=False)
