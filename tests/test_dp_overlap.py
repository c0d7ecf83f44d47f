"""parallel.data_parallel: bucketed, overlapped and sharded data-parallel traffic (and FSDP)
on synthetic models, against closed forms of the analytical ring (float precision)."""

import pytest

import clustersim as cs
from clustersim.workload.stage_cost import chunk_costs
from tests.conftest import synthetic

F, B, OPT, BW, ALPHA = 1e-3, 2e-3, 3e-4, 1e11, 1e-6
STEPS = {
    "all_reduce": lambda n: 2 * (n - 1),
    "reduce_scatter": lambda n: n - 1,
    "all_gather": lambda n: n - 1,
}


def ring(kind: str, n: int, nbytes: float) -> float:
    """The analytical ring on one node: steps · (α + S/(n·B))."""
    return STEPS[kind](n) * (ALPHA + nbytes / (n * BW))


def run(dp_options, *, n=4, m=2, layers=4, params=1e7, zero=0, iterations=1, slowdown=1.0):
    raw = synthetic(1, m, F, B, layers_per_stage=layers, dp=n, params=params, optimizer=OPT, bandwidth=BW)
    raw["cluster"]["collective_alpha"] = {"intra_node": ALPHA, "inter_node": ALPHA}
    raw["cluster"]["comm_compute_slowdown"] = slowdown
    raw["simulation"].update(
        collective_model="analytical",
        collectives={k: "ring" for k in STEPS},
        iterations=iterations,
    )
    raw["parallel"]["zero"] = zero
    if dp_options is not None:
        raw["parallel"]["data_parallel"] = dp_options
    return cs.simulate(raw, progress=False)


def end(res) -> float:
    return float(res.spans["end_s"].max())


def collectives(res):
    """The first GPU's collective spans, in start order."""
    sp = res.spans
    return sp[(sp["kind"] == "collective") & (sp["device"] == sp["device"].iloc[0])].sort_values("start_s")


def test_unset_and_empty_options_are_todays_single_allreduce():
    base, empty = run(None), run({})
    assert end(empty) == end(base)
    assert end(base) == pytest.approx(2 * (F + B) + ring("all_reduce", 4, 4e7) + OPT, rel=1e-12)
    assert len(collectives(empty)) == 1


def test_buckets_without_overlap_chain_after_the_last_backward():
    # one bucket per layer (bucket_size = a layer's gradients): L all-reduces back to back
    res = run({"bucket_size": 1e7})
    assert end(res) == pytest.approx(2 * (F + B) + 4 * ring("all_reduce", 4, 1e7) + OPT, rel=1e-12)
    assert list(collectives(res)["bytes"]) == [10_000_000] * 4


def test_overlap_when_the_network_keeps_up_exposes_the_last_bucket_only():
    t = ring("all_reduce", 4, 1e7)
    assert t < B / 4  # each bucket ends before the next layer's backward piece does
    res = run({"overlap_grad_reduce": True, "bucket_size": 1e7})
    assert end(res) == pytest.approx(2 * (F + B) + t + OPT, rel=1e-12)
    # each bucket starts when its layer's piece of the last backward ends (layers 3, 2, 1, 0)
    starts = list(collectives(res)["start_s"])
    last_backward = 2 * (F + B) - B
    assert starts == pytest.approx([last_backward + (i + 1) * B / 4 for i in range(4)], rel=1e-12)


def test_overlap_when_the_network_does_not_keep_up_is_the_reduction_chain():
    t = ring("all_reduce", 4, 1e8)
    assert t > B / 4
    res = run({"overlap_grad_reduce": True, "bucket_size": 1e8}, params=1e8)
    first = 2 * (F + B) - B + B / 4  # the last layer's backward piece ends
    assert end(res) == pytest.approx(first + 4 * t + OPT, rel=1e-12)


def test_megatron_default_bucket_holds_40m_parameters_of_fp32():
    # synthetic: 4 layers of 1e8 bytes; the default bucket is 40M × 4 bytes = 1.6e8 bytes,
    # so buckets close after 2 layers (reverse order): 2e8, 2e8
    res = run({"overlap_grad_reduce": True}, params=1e8)
    assert list(collectives(res)["bytes"]) == [200_000_000] * 2


def test_ddp_first_bucket_closes_at_its_own_cap():
    # DDP: bucket_cap_mb 25 MiB, the first bucket 1 MiB; layers of 1e7 bytes → [1 layer], [3 layers]
    res = run({"overlap_grad_reduce": True, "bucket_size": "25 MiB", "first_bucket_size": "1 MiB"})
    assert list(collectives(res)["bytes"]) == [10_000_000, 30_000_000]


def test_distributed_optimizer_reduce_scatters_steps_the_shard_and_gathers():
    rs, ag = ring("reduce_scatter", 4, 1e7), ring("all_gather", 4, 1e7)
    res = run({"distributed_optimizer": True, "overlap_grad_reduce": True, "bucket_size": 1e7})
    assert end(res) == pytest.approx(2 * (F + B) + rs + OPT + 4 * ag, rel=1e-12)
    kinds = list(collectives(res)["name"].str.split().str[1])
    assert kinds == ["reduce-scatter"] * 4 + ["all-gather"] * 4
    # zero 1 and 2 run the same traffic
    assert end(run({"overlap_grad_reduce": True, "bucket_size": 1e7}, zero=1)) == end(res)


def test_overlap_param_gather_hides_the_gathers_behind_the_next_forward():
    rs, ag = ring("reduce_scatter", 4, 1e7), ring("all_gather", 4, 1e7)
    assert ag < F / 4
    opts = {"distributed_optimizer": True, "overlap_grad_reduce": True, "bucket_size": 1e7}
    step = 2 * (F + B) + rs + OPT
    # without: every step ends with the whole gather chain
    assert end(run(opts, iterations=2)) == pytest.approx(2 * (step + 4 * ag), rel=1e-12)
    # with: the second step's first layer waits for its bucket only; the last step gathers nothing
    res = run({**opts, "overlap_param_gather": True}, iterations=2)
    assert end(res) == pytest.approx(2 * step + ag, rel=1e-12)


def test_grad_and_param_dtypes_set_the_bytes_of_a_real_model():
    raw = {
        "name": "gpt dtypes",
        "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu": "A100-SXM4-80GB"},
        "model": {"preset": "gpt-1.3b", "seq_len": 512},
        "training": {"global_batch": 2, "micro_batch": 1},
        "parallel": {"dp": 2, "data_parallel": {}},
    }
    sc = cs.load_scenario(raw)
    (fp32,) = chunk_costs(sc, 1)
    raw["parallel"]["data_parallel"] = {"grad_reduce_dtype": "bf16", "param_gather_dtype": "fp32"}
    (mixed,) = chunk_costs(cs.load_scenario(raw), 1)
    params = sum(fp32.layer_grads) / 4
    assert fp32.grad_bytes == pytest.approx(4 * params, rel=1e-6)  # fp32 main grads, as today
    assert sum(fp32.layer_weights) == pytest.approx(2 * params, rel=1e-6)
    assert sum(mixed.layer_grads) == pytest.approx(2 * params, rel=1e-6)
    assert sum(mixed.layer_weights) == pytest.approx(4 * params, rel=1e-6)
    assert len(fp32.layer_grads) == fp32.layers == 24
    # the per-layer passes hold the whole pass: same compute time
    for ph, whole in (("F", fp32.forward), ("B", fp32.backward)):
        pieces = fp32.layer_segments(ph)
        assert sum(s.duration for p in pieces for s in p) == pytest.approx(whole, rel=1e-12)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_fsdp_without_prefetch_exposes_every_unit_gather_as_the_ring_says(n):
    layers, S = 4, 1e7
    ag, rs = ring("all_gather", n, S), ring("reduce_scatter", n, S)
    res = run({"prefetch": 0}, n=n, m=1, layers=layers, params=S, zero=3)
    # per unit: all-gather, then its forward; again before its backward; the reduce-scatters
    # keep up behind the backward, the last one is exposed
    assert end(res) == pytest.approx(2 * layers * ag + F + B + rs + OPT, rel=1e-12)
    ops = collectives(res)
    gathers = ops[ops["name"].str.startswith("fsdp all-gather")]
    assert len(gathers) == 2 * layers and (gathers["end_s"] - gathers["start_s"]).to_numpy() == pytest.approx(
        ag
    )
    assert len(ops[ops["name"].str.startswith("fsdp reduce-scatter")]) == layers


def test_fsdp_exposed_time_grows_with_the_group_as_2_n_minus_1_alpha():
    # latency-bound units (1 byte): exposed = 2L·(n−1)(α + …) + (n−1)(α + …), linear in n − 1
    layers = 4
    exposed = {
        n: end(run({"prefetch": 0}, n=n, m=1, layers=layers, params=1, zero=3)) - (F + B + OPT)
        for n in (2, 4, 8)
    }
    per = {n: (2 * layers + 1) * (n - 1) * (ALPHA + 1 / (n * BW)) for n in exposed}
    assert [exposed[n] for n in (2, 4, 8)] == pytest.approx([per[n] for n in (2, 4, 8)], rel=1e-9)
    assert exposed[8] - exposed[4] == pytest.approx((2 * layers + 1) * 4 * ALPHA, rel=1e-6)


def test_fsdp_prefetch_hides_the_gathers_when_compute_is_longer():
    layers, S = 4, 1e7
    ag, rs = ring("all_gather", 4, S), ring("reduce_scatter", 4, S)
    assert ag < F / layers
    res = run({"prefetch": 1}, m=1, layers=layers, params=S, zero=3)
    assert end(res) == pytest.approx(ag + F + B + rs + OPT, rel=1e-12)


def test_fsdp_units_in_flight_set_the_memory_peak():
    S = 1e7
    static = 4 * S  # the synthetic model's weights (its bytes are not sharded)
    for prefetch, units in ((0, 1), (1, 2)):
        res = run({"prefetch": prefetch}, m=1, params=S, zero=3)
        assert res.summary["peak_memory_gib"] * 2**30 == pytest.approx(static + units * S, rel=1e-12)
    # two layers per unit: twice the bytes per gather, half as many
    res = run({"prefetch": 0, "fsdp_unit": 2}, m=1, params=S, zero=3)
    assert res.summary["peak_memory_gib"] * 2**30 == pytest.approx(static + 2 * S, rel=1e-12)
    assert len(collectives(res)) == 2 * 2 + 2


@pytest.mark.parametrize(
    "prefetch,reshard,parameters", [(0, True, 1), (1, True, 1), (2, True, 1), (1, False, 1), (1, True, 3)]
)
def test_memory_estimate_without_simulating_matches_the_run(prefetch, reshard, parameters):
    from clustersim.experiments.memory import estimate_peak_memory

    opts = {"prefetch": prefetch, "reshard_after_forward": reshard, "parameters_per_layer": parameters}
    raw = synthetic(1, 2, F, B, layers_per_stage=4, dp=4, params=1e7, activation=3e6)
    raw["parallel"].update(zero=3, data_parallel=opts)
    res = cs.simulate(raw, progress=False)
    assert estimate_peak_memory(cs.load_scenario(raw)) == round(res.summary["peak_memory_gib"] * 2**30)


def test_fsdp_without_resharding_gathers_only_before_the_forward():
    layers, S = 4, 1e7
    ag, rs = ring("all_gather", 4, S), ring("reduce_scatter", 4, S)
    res = run({"prefetch": 0, "reshard_after_forward": False}, m=1, params=S, zero=3)
    assert end(res) == pytest.approx(layers * ag + F + B + rs + OPT, rel=1e-12)
    assert res.summary["peak_memory_gib"] * 2**30 == pytest.approx(4 * S + layers * S, rel=1e-12)


def test_hsdp_shards_within_groups_and_all_reduces_across():
    layers, S, g = 4, 1e7, 2
    ag, rs, ar = ring("all_gather", g, S), ring("reduce_scatter", g, S), ring("all_reduce", 2, S / g)
    res = run({"prefetch": 0, "shard_group_size": g}, m=1, params=S, zero=3)
    assert end(res) == pytest.approx(2 * layers * ag + F + B + rs + ar + OPT, rel=1e-12)
    hsdp = res.spans[res.spans["name"].str.startswith("hsdp all-reduce")]
    assert len(hsdp) == 4 * layers and (hsdp["bytes"] == S / g).all()


def test_comm_compute_slowdown_acts_on_the_overlapped_buckets():
    # two layers: bucket 0 (layer 1) runs during layer 0's backward piece, which runs at
    # half speed meanwhile: the piece takes B/2 + t/2
    t = ring("all_reduce", 4, 1e7)
    res = run({"overlap_grad_reduce": True, "bucket_size": 1e7}, m=1, layers=2, slowdown=2.0)
    assert end(res) == pytest.approx(F + B + 1.5 * t + OPT, rel=1e-12)
    # the breakdown's cost: t s at half speed lost t/2 of compute on every GPU
    assert res.summary["interference_nccl_s"] == pytest.approx(t / 2, rel=1e-12)
    assert (
        "interference_nccl_s"
        not in run({"overlap_grad_reduce": True, "bucket_size": 1e7}, m=1, layers=2).summary
    )


@pytest.mark.parametrize(
    "change,field",
    [
        ({"data_parallel": {"shard_group_size": 3}, "zero": 3}, "parallel.data_parallel.shard_group_size"),
        ({"data_parallel": {"shard_group_size": 2}}, "parallel.data_parallel.shard_group_size"),
        ({"data_parallel": {}, "gradient_compression": {"ratio": 4}}, "parallel.gradient_compression"),
    ],
)
def test_settings_that_cannot_run_are_refused_naming_the_field(change, field):
    raw = synthetic(1, 2, F, B, dp=4)
    raw["parallel"].update(change)
    with pytest.raises(cs.ScenarioError, match=field.replace(".", r"\.")):
        cs.resolve_scenario(raw)


def _gpt(framework=None, **parallel):
    raw = {
        "name": "gpt profile",
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu": "A100-SXM4-80GB"},
        "model": {"preset": "gpt-1.3b", "seq_len": 512},
        "training": {"global_batch": 4, "micro_batch": 1},
        "parallel": {"dp": 4, **parallel},
    }
    if framework:
        raw["training"]["framework"] = framework
    return raw


def test_megatron_2021_is_the_default_profile_and_fills_nothing():
    for raw in (_gpt(), _gpt("megatron_2021")):
        sc = cs.load_scenario(raw)
        assert sc.parallel.data_parallel is None and sc.model.attention is None and sc.parallel.zero == 0


@pytest.mark.parametrize(
    "framework,zero,expect,attention",
    [
        (
            "megatron_core",
            0,
            {
                "distributed_optimizer": True,
                "overlap_grad_reduce": True,
                "overlap_param_gather": True,
                "grad_reduce_dtype": "bf16",
            },
            "flash",
        ),
        (
            "deepspeed",
            2,
            {"bucket_size": 10**9, "overlap_grad_reduce": False, "grad_reduce_dtype": "bf16"},
            None,
        ),
        ("deepspeed", 3, {"overlap_grad_reduce": True}, None),
        ("fsdp2", 3, {"reshard_after_forward": True, "prefetch": 1, "grad_reduce_dtype": "fp32"}, "flash"),
    ],
)
def test_profiles_fill_their_bundle(framework, zero, expect, attention):
    sc = cs.load_scenario(_gpt(framework, **({"zero": zero} if framework != "fsdp2" else {})))
    dp = sc.parallel.data_parallel
    assert {k: getattr(dp, k) for k in expect} == expect
    assert sc.parallel.zero == zero and sc.model.attention == attention


def test_stated_values_win_over_the_profile():
    raw = _gpt("fsdp2", zero=0, data_parallel={"bucket_size": "4 MiB"})
    raw["model"]["attention"] = "standard"
    sc = cs.load_scenario(raw)
    dp = sc.parallel.data_parallel
    assert sc.parallel.zero == 0 and sc.model.attention == "standard"
    assert (dp.bucket_size, dp.first_bucket_size, dp.overlap_grad_reduce) == (4 * 2**20, 2**20, True)


@pytest.mark.parametrize(
    "opts,zero",
    [
        ({"prefetch": 1, "shard_group_size": 2}, 3),
        ({"prefetch": 1, "parameters_per_layer": 2, "bucket_size": 1.5e7}, 3),
        ({"reduce_every_micro_batch": True, "bucket_size": 1e7}, 2),
        (
            {
                "distributed_optimizer": True,
                "overlap_grad_reduce": True,
                "overlap_param_gather": True,
                "bucket_size": 1e7,
            },
            0,
        ),
    ],
)
def test_dag_evaluator_and_engine_agree_on_the_overlapped_lanes(opts, zero):
    def spans(evaluator):
        raw = synthetic(1, 2, F, B, layers_per_stage=4, dp=4, params=1e7, optimizer=OPT, bandwidth=BW)
        raw["parallel"].update(zero=zero, data_parallel=opts)
        raw["simulation"].update(collective_model="analytical", iterations=2, evaluator=evaluator)
        res = cs.simulate(raw, progress=False)
        assert res.summary["evaluator"].startswith(evaluator)
        return res.spans.sort_values(["device", "lane", "start_s", "name"]).reset_index(
            drop=True
        ), res.summary

    (des, s1), (dag, s2) = spans("des"), spans("dag")
    assert des.equals(dag) and s1["peak_memory_gib"] == s2["peak_memory_gib"]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved", "zb_h1", "zb_h2", "pipedream_2bw"])
@pytest.mark.parametrize(
    "opts,zero",
    [
        ({"overlap_grad_reduce": True, "bucket_size": 1e7}, 0),
        (
            {
                "distributed_optimizer": True,
                "overlap_grad_reduce": True,
                "overlap_param_gather": True,
                "bucket_size": 1e7,
            },
            0,
        ),
        ({"prefetch": 1, "reshard_after_forward": False}, 3),
        ({"prefetch": 2, "fsdp_unit": 2}, 3),
        ({"prefetch": 1, "parameters_per_layer": 3, "bucket_size": 1e7}, 3),
        ({"megatron_fsdp": {"communication_unit_size": 10**7}}, 3),
        ({"reduce_every_micro_batch": True, "overlap_param_gather": True, "bucket_size": 1e7}, 2),
        ({"reduce_every_micro_batch": True, "overlap_grad_reduce": True, "bucket_size": 2e7}, 0),
    ],
)
def test_every_schedule_moves_each_gradient_byte_once_per_step(schedule, opts, zero):
    # per GPU and optimizer step the reductions carry the stage's gradients once (buckets)
    # or once per micro-batch (FSDP units); the all-gathers carry its parameters as often
    p, m, iterations, layers = 2, 4, 2, 4
    raw = synthetic(
        p, m, F, B, layers_per_stage=layers, dp=2, params=1e7, schedule=schedule, iterations=iterations
    )
    raw["parallel"].update(zero=zero, data_parallel=opts)
    if schedule == "interleaved":
        raw["parallel"]["virtual_stages"] = 2
    res = cs.simulate(raw, progress=False)
    sp = res.spans
    gpu = sp[(sp["kind"] == "collective") & (sp["device"] == sp["device"].iloc[0])]
    steps = int((sp[(sp["device"] == sp["device"].iloc[0])]["phase"] == "O").sum())
    grads = layers * 1e7  # the stage's gradient (= parameter) bytes
    reduced = gpu[gpu["name"].str.contains("reduce")]["bytes"].sum()
    gathered = gpu[gpu["name"].str.contains("all-gather")]["bytes"].sum()
    per_step = m if zero == 3 or opts.get("reduce_every_micro_batch") else 1
    assert reduced == pytest.approx(steps * per_step * grads)
    if zero == 3:
        passes = 1 if opts.get("reshard_after_forward") is False else 2  # forward (and backward)
        assert gathered == pytest.approx(steps * m * passes * grads)
    else:
        sharded = opts.get("distributed_optimizer", False) or zero in (1, 2)
        assert gathered == pytest.approx(
            (steps - 1) * grads if sharded else 0
        )  # the last step's is not needed


@pytest.mark.parametrize(
    "opts,zero",
    [
        ({"prefetch": 1}, 3),
        ({"prefetch": 1, "parameters_per_layer": 2}, 3),
        ({"reduce_every_micro_batch": True, "bucket_size": 1e7}, 2),
        (
            {
                "distributed_optimizer": True,
                "overlap_grad_reduce": True,
                "overlap_param_gather": True,
                "bucket_size": 1e7,
            },
            0,
        ),
    ],
)
def test_folding_keeps_the_run_on_the_fabric(opts, zero):
    def summary(fold):
        raw = synthetic(2, 4, F, B, layers_per_stage=4, dp=4, params=1e7, iterations=2, network="flow")
        raw["parallel"].update(zero=zero, data_parallel=opts)
        raw["simulation"]["fold"] = fold
        return cs.simulate(raw, progress=False).summary

    plain, folded = summary(False), summary(True)
    assert folded["folded"].startswith("yes")
    assert (folded["iteration_time_s"], folded["peak_memory_gib"]) == (
        plain["iteration_time_s"],
        plain["peak_memory_gib"],
    )
