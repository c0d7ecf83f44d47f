"""Heterogeneous clusters: node groups of mixed GPU types and speeds, uneven data-parallel
shares (``parallel.dp_split``) and stages sized to their GPUs (docs/heterogeneous.md)."""

import itertools

import pytest

import clustersim as cs
from clustersim.hardware.gpus import get_gpu
from clustersim.hardware.node_groups import gpu_types, heterogeneity, node_gpus
from clustersim.planner import resolve_partition
from clustersim.workload.resolve import resolve_transformer
from clustersim.workload.stage_cost import chunk_costs

A100, V100 = "A100-SXM4-80GB", "V100-SXM2-32GB"


def _mixed(
    speeds: list[float],
    p: int = 1,
    total_mb: int = 12,
    split="even",
    schedule: str = "1f1b",
    f: float = 1e-3,
    b: float = 2e-3,
    optimizer: float = 0.0,
    layers_per_stage: int = 1,
) -> dict:
    """A synthetic job on one-GPU nodes whose speeds are ``speeds`` (node order), dp = len / p,
    free transfers and collectives (zero bytes, zero latency), so only compute takes time."""
    dp = len(speeds) // p
    return {
        "name": "mixed",
        "cluster": {
            "gpus_per_node": 1,
            "gpu": A100,
            "node_groups": [{"nodes": 1, "gpu": A100 if s == 1 else V100, "speed": s} for s in speeds],
            "intra_node": {"latency": 0},
            "nic": {"latency": 0},
            "topology": {"kind": "fat_tree"},
            "collective_alpha": {"intra_node": 0, "inter_node": 0},
        },
        "model": {
            "kind": "synthetic",
            "layers": p * layers_per_stage,
            "forward": f / layers_per_stage,
            "backward": b / layers_per_stage,
            "optimizer": optimizer,
        },
        "training": {"global_batch": total_mb, "micro_batch": 1},
        "parallel": {"pp": p, "dp": dp, "schedule": schedule, "dp_split": split},
        "simulation": {"network": "analytical"},
    }


# dp_split "speed" (docs/heterogeneous.md) hands micro-batches out one at a time, from 1 each,
# to the replica whose estimate T_r(m + 1) = (m + 1 + p − 1)(f + b) / speed_r is smallest,
# ties to the lower replica. By hand, with f + b = 3 ms:
#  * p 1, speeds [1, 0.5]: T = 3m vs 6m ms; the 10 extra micro-batches go 0 0 0 1 0 0 1 0 0 1
#    (ties at 12, 18, 24 ms go to replica 0) → [8, 4] (24 ms each, the brute-force optimum too).
#  * p 2, replica 0 = nodes 0 and 2 (speed 1), replica 1 = nodes 1 and 3 (speed 0.5):
#    T = 3(m + 1) vs 6(m + 1) ms; the 10 go 0 0 0 0 1 0 0 1 0 0 (ties at 18, 24, 30 ms to
#    replica 0) → [9, 3]: 30 ms vs 24 ms ([8, 4] would tie at 30 ms; the greedy rule picks [9, 3]).
@pytest.mark.parametrize(
    "p,speeds,schedule,split,counts",
    [
        (1, [1.0, 0.5], "1f1b", "speed", [8, 4]),
        (1, [1.0, 0.5, 0.8], "gpipe", [5, 3, 4], [5, 3, 4]),
        (2, [1.0, 0.5, 1.0, 0.5], "1f1b", "speed", [9, 3]),  # stage 0 = nodes 0, 1; stage 1 = nodes 2, 3
        (2, [1.0, 0.5, 1.0, 0.5], "gpipe", "even", [6, 6]),
        (2, [1.0, 0.8, 1.0, 0.8], "1f1b", [7, 5], [7, 5]),
    ],
)
def test_iteration_is_the_slowest_replica_pipeline_plus_allreduce_and_optimizer(
    p, speeds, schedule, split, counts
):
    # Replicas run their pipelines independently and meet at the (here free) gradient
    # all-reduce: T = max_r (m_r + p − 1)(f + b) / speed_r (a flow shop of equal jobs) + the
    # optimizer step, which the slowest GPU of stage 0 (the last to finish) runs at its speed.
    f, b, opt = 1e-3, 2e-3, 5e-4
    res = cs.simulate(_mixed(speeds, p, split=split, schedule=schedule, optimizer=opt), progress=False)
    dp = len(speeds) // p
    if split != "even":
        assert res.summary["microbatches_per_replica"] == counts
    sp = res.spans
    first = sp[(sp["phase"] == "F") & (sp["stage"] == 0) & (sp["iteration"] == 0)]
    ran = first.groupby(first["device"].map(res.devices.set_index("device")["dp_rank"]))[
        "microbatch"
    ].nunique()
    assert list(ran) == counts  # each replica's pipeline ran the micro-batches the summary reports
    expected = max((m + p - 1) * (f + b) / speeds[r] for r, m in enumerate(counts)) + opt / min(speeds[:dp])
    assert res.summary["iteration_time_s"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("p", [1, 2])
def test_speed_split_beats_even_and_is_optimal(p):
    speeds = [1.0, 0.5] * p
    even = cs.simulate(_mixed(speeds, p, split="even"), progress=False).summary
    fast = cs.simulate(_mixed(speeds, p, split="speed"), progress=False).summary
    assert fast["iteration_time_s"] < even["iteration_time_s"]
    # no integer split of the 12 micro-batches does better (brute force over all of them)
    best = min(max((m0 + p - 1) * 3e-3, (12 - m0 + p - 1) * 3e-3 / 0.5) for m0 in range(1, 12))
    assert fast["iteration_time_s"] == pytest.approx(best, rel=1e-9)


def _gpt_on_a100_and_v100(global_batch: int, split: str) -> dict:
    """A 2-layer GPT-1.3B on 1 A100 node + 1 V100 node of 2 GPUs each, pp 1, dp 4."""
    return {
        "cluster": {
            "gpus_per_node": 2,
            "node_groups": [{"nodes": 1, "gpu": A100}, {"nodes": 1, "gpu": V100}],
            "topology": {"kind": "fat_tree"},
        },
        "model": {"preset": "gpt-1.3b", "layers": 2, "seq_len": 512},
        "training": {"global_batch": global_batch, "precision": "fp16"},
        "parallel": {"pp": 1, "dp_split": split},
        "simulation": {"network": "analytical"},
    }


def test_mixed_gpu_types_are_priced_memory_and_peak_per_device():
    # 1 A100 node + 1 V100 node of 2 GPUs, pp 1, dp 4: each GPU runs the cost model of its own type
    sc = cs.load_scenario(_gpt_on_a100_and_v100(8, "even"))
    res = cs.simulate(sc, progress=False)
    assert res.summary["num_gpus"] == 4 and res.summary["gpus"] == f"2× {A100} + 2× {V100}"
    dev = res.devices.set_index("device")
    assert list(dev["gpu"]) == [A100, A100, V100, V100]
    assert list(dev["memory_capacity_bytes"]) == [get_gpu(g).memory_bytes for g in (A100, A100, V100, V100)]
    comp = res.spans[(res.spans["lane"] == "compute") & (res.spans["phase"] == "F")]
    fwd = comp.groupby("device").apply(
        lambda d: (d["end_s"] - d["start_s"]).sum() / d["microbatch"].nunique(), include_groups=False
    )
    for device, gpu in [("gpu0", A100), ("gpu3", V100)]:
        cost = chunk_costs(sc, 1, gpu=gpu)[0]  # the kernels after the framework's per-pass op
        assert fwd[device] == pytest.approx(cost.pass_overhead + cost.forward, rel=1e-9)
    assert fwd["gpu3"] > 1.5 * fwd["gpu0"]  # a V100 is slower than an A100 on the same layer
    # MFU divides the model FLOP/s by the sum of the GPUs' own peaks
    peak = 2 * get_gpu(A100).peak_flops + 2 * get_gpu(V100).peak_flops
    flops = resolve_transformer(sc.model).iteration_flops(8, recompute=False)
    assert res.summary["mfu"] == pytest.approx(flops / res.summary["iteration_time_s"] / peak, rel=1e-12)


def test_speed_split_on_mixed_types_beats_even():
    even = cs.simulate(_gpt_on_a100_and_v100(32, "even"), progress=False).summary
    fast = cs.simulate(_gpt_on_a100_and_v100(32, "speed"), progress=False).summary
    # pp 1, dp 4: replicas 0, 1 on the A100 node, 2, 3 on the V100 node (GPU order; see
    # devices above). Per micro-batch, a replica takes forward + backward of the whole model
    # on its GPU type; the best split gives a to each A100 and v to each V100 (2a + 2v = 32)
    # minimising the slower replica, max(a·t_A, v·t_V).
    sc = cs.load_scenario(_gpt_on_a100_and_v100(32, "speed"))
    t_a, t_v = (sum(c.forward + c.backward for c in chunk_costs(sc, 1, gpu=g)) for g in (A100, V100))
    a = min(range(1, 16), key=lambda a: max(a * t_a, (16 - a) * t_v))
    assert fast["microbatches_per_replica"] == [a, a, 16 - a, 16 - a]
    assert a > 16 - a  # the A100s get more
    assert fast["iteration_time_s"] < even["iteration_time_s"]


def test_folding_refuses_heterogeneous_clusters():
    raw = _mixed([1.0, 0.5])
    raw["simulation"]["fold"] = True
    with pytest.raises(
        cs.ScenarioError,
        match=r"simulation.fold: True is invalid; cannot fold this scenario: "
        r"mixed GPU types \(A100-SXM4-80GB, V100-SXM2-32GB\) make replicas",
    ):
        cs.simulate(raw, progress=False)
    raw["simulation"]["fold"] = "auto"
    assert cs.simulate(raw, progress=False).summary["folded"].startswith("no (mixed GPU types")
    same_type = _mixed([1.0, 1.0])
    same_type["cluster"]["node_groups"] = [{"nodes": 1}, {"nodes": 1, "speed": 0.9}]
    same_type["simulation"]["fold"] = True
    with pytest.raises(cs.ScenarioError, match="node_groups speed factors make replicas differ"):
        cs.simulate(same_type, progress=False)
    uneven = _mixed([1.0, 1.0], split=[7, 5])
    uneven["simulation"]["fold"] = True
    with pytest.raises(cs.ScenarioError, match="an uneven dp_split makes replicas differ"):
        cs.simulate(uneven, progress=False)


def _balanced(speeds, layers, params=0.0, partition="balanced"):
    raw = _mixed(speeds, p=len(speeds), layers_per_stage=1)
    raw["model"].update(layers=layers, forward=1e-3, backward=2e-3, params=params)
    raw["training"]["global_batch"] = 8
    raw["parallel"].update(partition=partition, dp="auto")
    return cs.load_scenario(raw)


def _brute_force(times, layers, fits=lambda k, n: True):
    best = None
    for cut in itertools.combinations(range(1, layers), len(times) - 1):
        sizes = [e - s for s, e in zip((0, *cut), (*cut, layers))]
        if all(fits(k, n) for k, n in enumerate(sizes)):
            t = max(n * t for n, t in zip(sizes, times))
            best = t if best is None else min(best, t)
    return best


def test_balanced_partition_gives_slower_gpus_fewer_layers():
    sc = _balanced([1.0, 0.5], 9)
    part = resolve_partition(sc, 2)
    assert part == [6, 3]
    # the planner's partition reaches the brute-force optimum over every cut of the 9 layers
    assert max(n * t for n, t in zip(part, [3e-3, 6e-3])) == pytest.approx(_brute_force([3e-3, 6e-3], 9))
    # the simulation runs that split: two equal 18 ms stages, 1F1B with m = 8 takes (m + p − 1)·18 ms
    res = cs.simulate(sc, progress=False)
    assert res.summary["iteration_time_s"] == pytest.approx((8 + 2 - 1) * 18e-3, rel=1e-9)


def test_balanced_partition_respects_each_stage_memory():
    # the V100 stage is twice as fast here, so time alone would put 6 of 9 layers on it, but
    # each layer holds 10 GB of weights and the V100 has 32 GB: at most 3 layers fit there
    gb = 10 * 10**9
    sc = _balanced([1.0, 2.0], 9, params=gb)
    part = resolve_partition(sc, 2)
    cap = [get_gpu(A100).memory_bytes, get_gpu(V100).memory_bytes]
    assert part == [6, 3]
    times = [3e-3, 1.5e-3]
    # the planner's partition is the best one that fits each stage's memory ...
    reached = max(n * t for n, t in zip(part, times))
    assert reached == pytest.approx(_brute_force(times, 9, lambda k, n: n * gb <= cap[k]))
    # ... which the memory limit made worse than the best split by time alone
    assert reached > _brute_force(times, 9) * (1 + 1e-9)


def test_pipedream_planner_gives_slower_gpus_fewer_layers():
    part = resolve_partition(_balanced([1.0, 0.5], 9, partition="pipedream"), 2)
    assert part == [6, 3]
    part = resolve_partition(_balanced([0.5, 1.0], 9, partition="pipedream"), 2)
    assert part == [3, 6]


def test_search_balances_stages_and_splits_batches_on_mixed_clusters():
    from clustersim.experiments import search
    from clustersim.experiments.plan_search import Execution, SearchSpace

    raw = _mixed([1.0, 1.0, 0.5, 0.5], p=1, total_mb=8)  # 2 fast nodes, then 2 half-speed ones
    raw["model"]["layers"] = 6  # 1 ms forward + 2 ms backward per layer on a fast GPU
    result = search(raw, space=SearchSpace(schedules=["1f1b"]), execution=Execution(progress=False))
    table = result.table.set_index("parallel.pp")
    assert table.loc[2, "parallel.partition"] == "balanced" and table.loc[2, "parallel.dp_split"] == "speed"
    assert table.loc[1, "parallel.dp_split"] == "speed" and (table["status"] == "ok").all()
    # pp 2 × dp 2: stage 0 on the fast nodes, stage 1 on the slow ones; balanced gives the slow
    # stage fewer layers, [4, 2]: 12 ms per stage, (m + p − 1)·12 ms = 60 ms at m = 4 (an even
    # [3, 3] would pace at 18 ms: 90 ms).
    assert table.loc[2, "iteration_time_s"] == pytest.approx(60e-3, rel=1e-9)
    # pp 1 × dp 4 over 18 ms and 36 ms replicas: 3 + 3 + 1 + 1 micro-batches, 54 ms — the winner
    assert table.loc[1, "iteration_time_s"] == pytest.approx(54e-3, rel=1e-9)
    assert result.best["parallel.pp"] == 1


@pytest.mark.parametrize(
    "change,match",
    [
        ({"cluster.nodes": 3}, r"cluster.nodes: 3 is invalid; node_groups hold 2 nodes; accepted: 2"),
        (
            {"cluster.node_groups": [{"nodes": 1, "gpu": "V99"}, {"nodes": 1}]},
            r"cluster.node_groups\[0\].gpu: 'V99' is invalid; not a known GPU; known: ",
        ),
        (
            {"cluster.node_groups": [{"nodes": 1, "speed": 0}, {"nodes": 1}]},
            r"cluster.node_groups\[0\].speed: 0 is invalid; expected a value above 0 and at most 1,000",
        ),
        (
            {"parallel.dp_split": [5, 5]},
            r"parallel.dp_split: \[5, 5\] is invalid; give the micro-batches of each of the dp = 2 replicas, summing to "
            r"global_batch / micro_batch = 12",
        ),
        (
            {"parallel.dp_split": "fast"},
            r"parallel.dp_split: 'fast' is invalid; expected even, speed or a list",
        ),
        (
            {"parallel.dp_split": "speed", "parallel.schedule": "pipedream"},
            r"parallel.schedule: 'pipedream' is invalid; an uneven dp_split needs a flushing schedule",
        ),
        (
            {"parallel.dp_split": "speed", "training.global_batch": 1},
            r"training.global_batch: 1 is invalid; dp_split needs at least one micro-batch per replica",
        ),
    ],
)
def test_bad_heterogeneous_settings_are_clear_errors(change, match):
    sc = cs.load_scenario(_mixed([1.0, 0.5]))
    with pytest.raises(cs.ScenarioError, match=match):
        sc.with_overrides(change)


def test_tp_group_must_not_mix_gpu_types():
    raw = {
        "cluster": {
            "gpus_per_node": 2,
            "node_groups": [{"nodes": 1}, {"nodes": 1, "gpu": V100}],
            "topology": {"kind": "fat_tree"},
        },
        "model": {"preset": "gpt-1.3b", "layers": 2},
        "training": {"global_batch": 4},
        "parallel": {"tp": 4},
    }
    with pytest.raises(
        cs.ScenarioError,
        match=r"parallel.tp: 4 is invalid; with mixed GPU types .* must sit inside "
        r"one node",
    ):
        cs.load_scenario(raw)


def test_hap_scenario_runs():
    sc = cs.load_scenario("scenarios/hap-mixed-a100-v100.yaml")
    res = cs.simulate(sc, progress=False)
    assert res.summary["num_gpus"] == 32 and not res.summary["oom"]
    even = cs.simulate(sc.with_overrides({"parallel.dp_split": "even"}), progress=False)
    assert res.summary["iteration_time_s"] < even.summary["iteration_time_s"]


def test_clustersim_plan_on_mixed_gpus_proposes_the_best_uniform_plan():
    # a fast node and a half-speed one, 9 layers of 3 ms: data parallelism runs at the slow
    # GPU's pace, 9 · 3 ms / 2 replicas × 2 = 27 ms per minibatch; two stages sized to their
    # GPUs, [6, 3], take max(6 · 3, 3 · 3 · 2) = 18 ms
    from clustersim.planner import plan_scenario

    raw = _mixed([1.0, 0.5])
    raw["model"]["layers"] = 9
    report = plan_scenario(cs.load_scenario(raw))
    assert report.uniform_only.startswith("mixed GPU types") and report.uniform_pp == 2
    assert report.best.partition == [6, 3]
    assert report.best.time_per_minibatch_s == pytest.approx(18e-3, rel=1e-9)
    assert report.data_parallel_s == pytest.approx(27e-3, rel=1e-9)
    assert "parallel.stage_replicas" not in report.best_overrides()
    assert "uniform pp × dp plans only — mixed GPU types" in report.table()
    res = cs.simulate(cs.load_scenario(raw).with_overrides(report.best_overrides()), progress=False)
    assert res.summary["pp"] == 2
    # 3 micro-batches do not split over 2 replicas, so pp = 1 is not a plan; the data-parallel
    # baseline is still priced at the slow GPU's pace, 27 ms
    raw["training"]["global_batch"] = 3
    raw["parallel"].update(pp=2, dp=1, partition="balanced")
    assert plan_scenario(cs.load_scenario(raw)).data_parallel_s == pytest.approx(27e-3, rel=1e-9)


def test_clustersim_plan_with_tensor_parallelism_plans_tp_groups():
    # 16 GPUs at tp 2 are 8 workers; stage replication runs without tp, so only uniform
    # plans are searched, and the plan printed runs on the cluster as it is
    from clustersim.planner import plan_scenario

    sc = cs.load_scenario("scenarios/quickstart.yaml").with_overrides({"parallel.tp": 2})
    report = plan_scenario(sc)
    assert report.gpus == 8 and report.tp == 2 and report.uniform_only.startswith("tp = 2")
    planned = sc.with_overrides(report.best_overrides())
    assert planned.parallel.tp * planned.parallel.pp * planned.dp == 16
    assert report.table().startswith("PipeDream planner on 8 tensor-parallel groups of 2 GPUs")


def test_unsupported_combinations_are_refused():
    sc = cs.load_scenario(_mixed([1.0, 0.5]))
    with pytest.raises(
        cs.ScenarioError,
        match=r"parallel.stage_replicas: \[1, 1\] is invalid; stage replication "
        r"runs one GPU type",
    ):
        cs.resolve_scenario(
            sc.with_overrides({"parallel.pp": 2, "model.layers": 2, "parallel.stage_replicas": [1, 1]})
        )


def test_same_scenario_same_spans():
    raw = _mixed([1.0, 0.5, 0.8], split="speed")
    assert cs.simulate(raw, progress=False).spans.equals(cs.simulate(raw, progress=False).spans)


@pytest.mark.parametrize(
    "groups",
    [
        None,
        [{"nodes": 2, "gpu": A100}, {"nodes": 1, "gpu": V100}, {"nodes": 3, "gpu": A100}],
        [{"nodes": 1}, {"nodes": 2, "speed": 0.9}],
        [{"nodes": 3, "speed": 1.0}],
    ],
)
def test_gpu_types_and_heterogeneity_read_per_group_what_the_nodes_say(groups):
    """GPU types and the speed check, read once a node group, are what every node's
    (name, speed) of ``node_gpus`` gives: the distinct names in node order, and whether any
    node's speed differs from 1."""
    raw = _mixed([1.0, 1.0, 1.0])
    raw["cluster"]["node_groups"] = groups
    raw["cluster"]["nodes"] = 3 if groups is None else sum(g["nodes"] for g in groups)
    raw["parallel"] = {"dp": raw["cluster"]["nodes"]}
    cl = cs.load_scenario(raw).cluster
    nodes = node_gpus(cl)
    assert gpu_types(cl) == list(dict.fromkeys(name for name, _ in nodes))
    mixed = len(gpu_types(cl)) > 1 or any(speed != 1.0 for _, speed in nodes)
    assert (heterogeneity(cl) is not None) == mixed
