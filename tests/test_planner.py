"""PipeDream's planner (SOSP'19 §3.1): the dynamic programme against brute force, the
partition options of a scenario, and the paper's VGG-16 setting."""

import itertools
import math
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.cli import main
from clustersim.planner import (
    LayerProfile,
    Network,
    Optimizer,
    layer_profiles,
    network_of,
    plan_scenario,
    uniform_partition,
)
from clustersim.topology import build_topology
from clustersim.workload.stage_builder import balanced_partition, contiguous_min_max
from clustersim.workload.stage_cost import chunk_costs
from tests.conftest import synthetic

VGG = Path(__file__).parents[1] / "scenarios" / "pipedream-vgg16-16xV100-10GbE.yaml"


def _random_layers(rng, n):
    return [
        LayerProfile(
            rng.uniform(1e-3, 5e-3),
            rng.uniform(2e-3, 9e-3),
            rng.choice([1e5, 1e6, 2e7]),
            rng.choice([0.0, 1e6, 5e7, 3e8]),
            rng.uniform(0, 1e8),
        )
        for _ in range(n)
    ]


def _compositions(n_layers, n_stages):
    for cuts in itertools.combinations(range(1, n_layers), n_stages - 1):
        bounds = (0,) + cuts + (n_layers,)
        yield [(bounds[k], bounds[k + 1] - 1) for k in range(n_stages)]


def _brute_force(opt, n_layers, gpus):
    best = math.inf
    for k in range(1, min(n_layers, gpus) + 1):
        for stages in _compositions(n_layers, k):
            for reps in itertools.product(range(1, gpus + 1), repeat=k):
                if sum(reps) != gpus:
                    continue
                # the optimiser's memory check sees ceil(gpus / replicas) in flight per stage
                t = max(opt.stage_time(i, j, r, math.ceil(gpus / r)) for (i, j), r in zip(stages, reps))
                t = max([t] + [opt.transfer(j, gpus) for i, j in stages[:-1]])
                best = min(best, t)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_dynamic_programme_matches_brute_force(seed):
    rng = random.Random(seed)
    layers = _random_layers(rng, rng.randint(1, 5))
    net = Network(intra=rng.choice([1e9, 3e10]), inter=rng.choice([1.25e9, 1e10]), gpus_per_node=2)
    opt = Optimizer(layers, net, memory_bytes=rng.choice([math.inf, 2e9]))
    gpus = rng.randint(1, 4)
    plan = opt.best(gpus)
    assert plan.time_per_minibatch_s == pytest.approx(_brute_force(opt, len(layers), gpus), rel=1e-12)
    if math.isfinite(plan.time_per_minibatch_s):
        assert sum(s.replicas for s in plan.stages) == gpus
        assert sum(plan.partition) == len(layers)


@pytest.mark.parametrize("seed", range(6))
def test_uniform_partition_is_the_best_contiguous_split(seed):
    rng = random.Random(100 + seed)
    layers = _random_layers(rng, 6)
    net = Network(1e10, 1.25e9, 4)
    opt = Optimizer(layers, net)
    pp, dp = rng.randint(1, 4), rng.randint(1, 3)
    got = opt.uniform(pp, dp)
    want = min(
        max(
            [opt.stage_time(i, j, dp, pp - k) for k, (i, j) in enumerate(st)]
            + [opt.transfer(j, pp * dp) for _, j in st[:-1]]
        )
        for st in _compositions(6, pp)
    )
    assert got.time_per_minibatch_s == pytest.approx(want, rel=1e-12)
    assert uniform_partition(layers, net, pp, dp) == got.partition


def test_compute_bound_model_stays_data_parallel_and_heavy_weights_pipeline():
    net = Network(1e10, 1e9, 4)
    light = [LayerProfile(1e-2, 2e-2, 1e6, 0.0)] * 4
    assert Optimizer(light, net).best(8).config == "8"
    heavy = [LayerProfile(1e-2, 2e-2, 1e5, 0.0)] * 3 + [LayerProfile(1e-4, 2e-4, 1e5, 4e9)]
    plan = Optimizer(heavy, net).best(8)
    assert plan.stages[-1].replicas == 1 and plan.stages[-1].first == 3


def test_vgg16_planner_finds_pipedreams_15_1():
    rep = plan_scenario(cs.load_scenario(VGG))
    assert rep.best.config == "15-1"  # PipeDream's published configuration
    assert rep.best.partition == [13, 3]  # the 13 convs replicated, the 3 FC layers alone
    assert rep.speedup_over_dp > 3.0  # paper: 5.28x (epoch time); ours in docs/schedules.md


@pytest.mark.parametrize("per_node", [None, 1, 2])
def test_planner_prices_the_nics_the_topology_builds(per_node):
    # 2 servers × 4 GPUs at 10 Gbit/s: with nic.per_node unset the topology builds one NIC
    # per GPU, so a server sends at 4 × 1.25 GB/s — the planner must price the same
    raw = synthetic(2, 4, dp=4)
    nic = {"bandwidth": "10 Gbit/s", **({"per_node": per_node} if per_node else {})}
    raw["cluster"] = {"nodes": 2, "gpus_per_node": 4, "nic": nic}
    sc = cs.load_scenario(raw)
    g = build_topology(sc.cluster.model_dump())
    built = sum(
        d["bandwidth"] for a, _, d in g.edges(data=True) if a.startswith("node0.") and d["kind"] == "nic"
    )
    assert network_of(sc).inter == built == 1.25e9 * (per_node or 4)


def test_memory_check_stashes_weights_not_gradients():
    # bf16 + Adam: 2 bytes of weights per parameter, 4 of gradients on the all-reduce
    quick = cs.load_scenario("scenarios/quickstart.yaml")
    lp, cost = layer_profiles(quick)[1], chunk_costs(quick, 24, [1] * 24)[1]
    assert (lp.stashed, lp.stashed * 2, lp.resident) == (
        cost.static.weights,
        lp.param_bytes,
        cost.static.total,
    )
    # a stage of that layer with 3 micro-batches in flight needs static + 3 × (weights + activations)
    need = lp.resident + 3 * (lp.stashed + lp.activation_memory)
    assert Optimizer([lp], Network(1e10, 1e9, 8), need).stage_time(0, 0, 1, 3) < math.inf
    assert Optimizer([lp], Network(1e10, 1e9, 8), need - 1).stage_time(0, 0, 1, 3) == math.inf


def test_partition_options():
    raw = synthetic(2, 4, 1e-3, 2e-3, layers_per_stage=3)
    even = cs.simulate(raw, progress=False).summary["iteration_time_s"]
    raw["parallel"]["partition"] = "balanced"
    assert cs.simulate(raw, progress=False).summary["iteration_time_s"] == pytest.approx(even, rel=1e-12)
    raw["parallel"]["partition"] = [1, 5]  # slow second stage: 5 layers of 3 ms
    res = cs.simulate(raw, progress=False)
    assert res.summary["iteration_time_s"] == pytest.approx(1e-3 / 3 * 1 + 4 * 5e-3 + 2e-3 / 3, rel=1e-9)
    raw["parallel"]["partition"] = "pipedream"
    assert cs.simulate(raw, progress=False).summary["iteration_time_s"] == pytest.approx(even, rel=1e-12)


@pytest.mark.parametrize(
    "bad,match",
    [
        ([1, 2], "parallel.partition.*summing to the model's 6 layers"),
        ([3, 2, 1], "parallel.partition.*2 model chunks"),
        ("fastest", "parallel.partition.*expected even, balanced, pipedream"),
    ],
)
def test_bad_partition_is_named(bad, match):
    raw = synthetic(2, 4, layers_per_stage=3)
    raw["parallel"]["partition"] = bad
    with pytest.raises(cs.ScenarioError, match=match):
        cs.load_scenario(raw)


def test_cli_plan(capsys):
    assert main(["plan", str(VGG)]) == 0
    out = capsys.readouterr().out
    assert "best pipeline 15-1" in out and "--set parallel.pp=" in out


def _loop_min_max(rows, fits):
    """contiguous_min_max as it was written before its array form: a cell at a time."""
    chunks, n = len(rows), len(rows[0])
    prefix = [list(itertools.accumulate(row, initial=0.0)) for row in rows]
    best = [[math.inf] * (n + 1) for _ in range(chunks + 1)]
    cut = [[0] * (n + 1) for _ in range(chunks + 1)]
    best[0][0] = 0.0
    for k in range(1, chunks + 1):
        for i in range(k, n - (chunks - k) + 1):
            for j in range(k - 1, i):
                if best[k - 1][j] == math.inf or not fits(k - 1, j, i):
                    continue
                v = max(best[k - 1][j], prefix[k - 1][i] - prefix[k - 1][j])
                if v < best[k][i]:
                    best[k][i], cut[k][i] = v, j
    if best[chunks][n] == math.inf:
        return None
    sizes, i = [], n
    for k in range(chunks, 0, -1):
        sizes.append(i - cut[k][i])
        i = cut[k][i]
    return sizes[::-1]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            st.lists(  # small whole costs: ties everywhere, so the tie-break is compared too
                st.lists(st.sampled_from([0.0, 0.1, 0.2, 0.3, 1.0, 2.0, 3.0]), min_size=n, max_size=n),
                min_size=1,
                max_size=n,
            ),
            st.integers(0, 2**32),
            st.sampled_from([0.0, 0.3, 1.0]),
        )
    )
)
def test_contiguous_min_max_is_the_cell_by_cell_programme(case):
    rows, seed, refuse = case
    rng = random.Random(seed)
    refused = {c for c in itertools.product(range(len(rows)), range(13), range(13)) if rng.random() < refuse}
    fits = (lambda k, i, j: (k, i, j) not in refused) if refuse else None
    got = contiguous_min_max(rows, fits)
    assert got == _loop_min_max(rows, fits or (lambda k, i, j: True))
    assert got is None or all(type(s) is int for s in got)
    if rows[1:] == rows[:-1]:
        assert balanced_partition(rows[0], len(rows)) == contiguous_min_max(rows)
