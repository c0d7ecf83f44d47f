"""Parameter-server training: closed forms on an idle star, the staleness bound on the
spans, async vs sync, hybrid switching, determinism and scenario errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.errors import ProgramError, ScenarioError
from clustersim.program import APPLY, PULL, PUSH, Program, server_lane, server_lane_worker
from clustersim.trace.ps_metrics import gradient_staleness

LAT = 10e-6
UP, DOWN = 1.25e8, 2.5e8  # 1 and 2 Gbit/s in bytes/s


def scenario(
    workers=4,
    layers=3,
    fwd=1e-3,
    bwd=2e-3,
    params=100e3,
    opt=0.3e-3,
    ps=None,
    iterations=3,
    network="analytical",
    stragglers=(),
    micro=1,
    noise=None,
):
    """A star of single-GPU workers around the ``server`` node and a synthetic model."""
    return {
        "name": "ps-test",
        "cluster": {
            "nodes": workers,
            "gpus_per_node": 1,
            "topology": {"kind": "star", "uplink": UP, "downlink": DOWN, "latency": LAT},
            "stragglers": [{"gpus": [g], "slowdown": k} for g, k in stragglers],
        },
        "model": {
            "kind": "synthetic",
            "layers": layers,
            "forward": fwd,
            "backward": bwd,
            "params": params,
            "optimizer": opt,
        },
        "training": {"global_batch": workers * micro},
        "parallel": {"parameter_server": ps or {"mode": "sync"}},
        "simulation": {
            "iterations": iterations,
            "network": network,
            **({"compute_noise": {"sigma": noise}} if noise else {}),
        },
    }


def push_ends(res):
    """Per worker (rows) and iteration (columns): when its last push arrived."""
    sp = res.spans
    return sp[sp["lane"] == "push"].groupby(["device", "iteration"])["end_s"].max().unstack()


def all_equal(frame, value: float) -> bool:
    """Every cell of ``frame`` equals ``value`` to floating-point precision."""
    cells = frame.to_numpy().ravel().tolist()
    return cells == pytest.approx([value] * len(cells), rel=1e-9)


def run(sc) -> cs.Result:
    return cs.simulate(sc, progress=False)


@pytest.mark.parametrize("network", ["analytical", "packet"])
def test_sync_one_layer_closed_form(network):
    # pull → forward → backward → push → update, nothing overlaps
    res = run(scenario(layers=1, network=network))
    period = 1e-3 + 2e-3 + (LAT + 100e3 / DOWN) + (LAT + 100e3 / UP) + 0.3e-3
    assert res.summary["iteration_time_s"] == pytest.approx(period, rel=1e-9)
    assert res.summary["samples_per_s"] == pytest.approx(4 / period, rel=1e-9)
    assert all_equal(push_ends(res).diff(axis=1).iloc[:, 1:], period)


@pytest.mark.parametrize("micro", [1, 3])
def test_sync_layers_overlap_comm_with_compute(micro):
    # each layer's pull (0.41 ms) hides under the forward before it and each push (0.81 ms)
    # under the backward after it: only layer 0's push, its update and its pull are exposed
    layers, opt = 4, 0.4e-3
    res = run(scenario(layers=layers, opt=opt, micro=micro))
    period = micro * layers * 3e-3 + (LAT + 100e3 / UP) + opt / layers + (LAT + 100e3 / DOWN)
    assert res.summary["iteration_time_s"] == pytest.approx(period, rel=1e-9)


def test_sync_comm_bound_layers_serialize_on_the_links():
    # pulls (Q) longer than a layer's forward, pushes (P) longer than its backward: the
    # forward of the last layer waits for all L pulls, layer 0's push for all L pushes
    layers, fwd, bwd, opt = 3, 0.1e-3, 0.2e-3, 0.03e-3
    res = run(scenario(layers=layers, fwd=fwd, bwd=bwd, opt=opt))
    q, p = LAT + 100e3 / DOWN, LAT + 100e3 / UP
    period = layers * q + fwd + bwd + layers * p + opt / layers
    assert res.summary["iteration_time_s"] == pytest.approx(period, rel=1e-9)


def test_sync_iteration_is_the_slowest_worker_plus_its_link():
    layers, k = 3, 2.5
    res = run(scenario(layers=layers, stragglers=[(1, k)], iterations=4))
    period = k * layers * 3e-3 + (LAT + 100e3 / UP) + 0.1e-3 + (LAT + 100e3 / DOWN)
    assert all_equal(push_ends(res).diff(axis=1).iloc[:, 1:], period)
    assert res.summary["iteration_time_s"] == pytest.approx(period, rel=1e-9)
    assert res.summary["staleness_updates_max"] == 0


def test_async_equals_sync_for_identical_workers():
    sync = run(scenario(iterations=4))
    for ps in ({"mode": "async"}, {"mode": "async", "staleness": 0}, {"mode": "hybrid", "sync_after": 2}):
        res = run(scenario(iterations=4, ps=ps))
        assert res.summary["iteration_time_s"] == pytest.approx(sync.summary["iteration_time_s"], rel=1e-9)


@settings(max_examples=12, deadline=None)
@given(
    workers=st.integers(2, 5),
    s=st.integers(0, 3),
    slow=st.floats(1.0, 3.0),
    seed=st.integers(0, 10**6),
    layers=st.integers(1, 3),
    per_layer=st.booleans(),
)
def test_async_never_runs_more_than_s_ahead(workers, s, slow, seed, layers, per_layer):
    sc = scenario(
        workers=workers,
        layers=layers,
        iterations=s + 4,
        stragglers=[(0, slow)],
        noise=0.3,
        ps={"mode": "async", "staleness": s, "per_layer": per_layer},
    )
    sc["simulation"]["seed"] = seed
    res = run(sc)
    sp = res.spans
    done = push_ends(res)  # iteration i of w is done when its last push arrived
    starts = sp[sp["lane"] == "compute"].groupby(["device", "iteration"])["start_s"].min().unstack()
    for i in range(s + 1, s + 4):
        assert (starts[i] >= done[i - s - 1].max()).all()
    # the bound per key: the others' updates between a read and its apply, iterations i−s … i+s
    assert res.summary["staleness_updates_max"] <= (2 * s + 1) * (workers - 1)


@settings(max_examples=8, deadline=None)
@given(workers=st.integers(2, 5), s=st.integers(0, 2), slow=st.floats(1.0, 3.0), seed=st.integers(0, 10**6))
def test_async_is_never_slower_than_sync(workers, s, slow, seed):
    # the async dependencies are a subset of the sync ones and the compute noise is the same
    # (worker op ids do not depend on the mode); updates take no time so none is drawn
    def ends(ps):
        sc = scenario(workers=workers, opt=0.0, iterations=5, stragglers=[(0, slow)], noise=0.3, ps=ps)
        sc["simulation"]["seed"] = seed
        return push_ends(run(sc))

    sync, asyn = ends({"mode": "sync"}), ends({"mode": "async", "staleness": s})
    assert (asyn.to_numpy() <= sync.to_numpy() * (1 + 1e-12)).all()


def test_async_is_faster_than_sync_with_a_straggler():
    base = scenario(workers=4, iterations=8, stragglers=[(0, 2.0)])
    sync = run(base)
    asyn = run(
        cs.load_scenario(base).with_overrides(
            {"parallel.parameter_server": {"mode": "async", "staleness": 2}}
        )
    )
    assert asyn.summary["samples_per_s"] > sync.summary["samples_per_s"]
    assert asyn.summary["staleness_updates_max"] > 0 == sync.summary["staleness_updates_max"]
    # the fast workers run at their own pace until they are s iterations ahead
    fast = 3 * 3e-3 + (LAT + 100e3 / UP) + 0.1e-3 + (LAT + 100e3 / DOWN)
    assert push_ends(asyn).loc["gpu1", 1] - push_ends(asyn).loc["gpu1", 0] == pytest.approx(fast, rel=1e-9)


def test_hybrid_switches_from_async_to_sync():
    k, its = 3, 8
    res = run(
        scenario(
            iterations=its, stragglers=[(0, 2.0)], ps={"mode": "hybrid", "staleness": 1, "sync_after": k}
        )
    )
    sp = res.spans
    server = sp[sp["device"] == "server"]
    applied = server[server["phase"] == "O"]
    assert set(applied.loc[applied["iteration"] < k, "lane"]) == {f"apply.w{w}" for w in range(4)}
    assert set(applied.loc[applied["iteration"] >= k, "lane"]) == {"update"}
    sync_period = 2.0 * 3 * 3e-3 + (LAT + 100e3 / UP) + 0.1e-3 + (LAT + 100e3 / DOWN)
    fast_period = 3 * 3e-3 + (LAT + 100e3 / UP) + 0.1e-3 + (LAT + 100e3 / DOWN)  # its own pace
    gaps = push_ends(res).diff(axis=1)
    assert gaps.loc["gpu1", 1] == pytest.approx(fast_period, rel=1e-9)  # async: the fast worker ran ahead
    assert all_equal(gaps.loc[:, k + 2 :], sync_period)
    st_ = gradient_staleness(sp)
    assert (st_.loc[st_["iteration"] > k, "staleness"] == 0).all()


def test_server_lanes_are_per_worker_and_parse_back():
    res = run(scenario(iterations=2, ps={"mode": "async", "staleness": 1}))
    lanes = set(res.spans.loc[res.spans["device"] == "server", "lane"])
    assert lanes == {
        f"{kind}.w{w}" for kind in ("pull", "push", "apply") for w in range(4)
    }  # docs/parameter_server.md
    for kind in (PULL, PUSH, APPLY):
        assert {server_lane_worker(ln, kind) for ln in lanes} == {
            *range(4),
            None,
        }  # None: another kind's lane
        assert all(server_lane_worker(server_lane(kind, w), kind) == w for w in (0, 12))
    assert server_lane_worker(PULL, PULL) is None  # a worker's own pull lane


def test_partitioned_tensors_split_over_servers():
    # two parameter servers on a custom topology, each tensor sharded in halves
    sc = scenario(
        workers=2, layers=2, params=1001, ps={"mode": "sync", "servers": ["ps0", "ps1"], "partition": True}
    )
    links = [
        {"src": f"gpu{g}", "dst": s, "bandwidth": UP, "latency": LAT}
        for g in range(2)
        for s in ("ps0", "ps1")
    ]
    sc["cluster"]["topology"] = {
        "kind": "custom",
        "nodes": [{"name": "ps0", "kind": "server"}, {"name": "ps1", "kind": "server"}],
        "links": links,
    }
    res = run(sc)
    sp = res.spans
    pushes = sp[sp["lane"] == "push"]
    assert sorted(pushes.groupby("iteration").size()) == [8] * 3  # 2 workers × 2 layers × 2 shards
    assert pushes.groupby(["device", "iteration"])["bytes"].sum().eq(2002).all()
    assert set(sp.loc[sp["lane"] == "update", "device"]) == {"ps0", "ps1"}
    # each server holds its halves of both layers' weights and gradient buffers (no optimizer
    # state in a synthetic model): 1001 bytes split 501 + 500, the larger half on ps0
    held = res.memory[res.memory["device"].isin(["ps0", "ps1"])].groupby("device")["allocated_bytes"].max()
    assert held.to_dict() == {"ps0": 2 * (501 + 501), "ps1": 2 * (500 + 500)}
    # without partition the layers go round robin, each whole
    res2 = run(cs.load_scenario(sc).with_overrides({"parallel.parameter_server.partition": False}))
    up2 = res2.spans[res2.spans["lane"] == "update"]
    assert dict(up2.groupby("device")["stage"].unique().map(list)) == {"ps0": [0], "ps1": [1]}


def test_one_tensor_per_model_when_not_per_layer():
    # the whole model is pulled before the first forward and pushed after the last backward
    layers = 3
    res = run(scenario(layers=layers, ps={"mode": "sync", "per_layer": False}))
    period = layers * 3e-3 + (LAT + 300e3 / UP) + 0.3e-3 + (LAT + 300e3 / DOWN)
    assert res.summary["iteration_time_s"] == pytest.approx(period, rel=1e-9)


def test_buckets_group_layers_into_tensors():
    # DynaComm-style segments: layers [0, 1] and [2, 3] travel as one tensor each; the
    # bucket of layers 2–3 hides under the backward of 1–0, the last one is exposed
    layers, opt = 4, 0.4e-3
    res = run(scenario(layers=layers, opt=opt, ps={"mode": "sync", "buckets": [2, 2]}))
    period = layers * 3e-3 + (LAT + 200e3 / UP) + opt / 2 + (LAT + 200e3 / DOWN)
    assert res.summary["iteration_time_s"] == pytest.approx(period, rel=1e-9)
    pushes = res.spans[(res.spans["lane"] == "push") & (res.spans["device"] == "gpu0")]
    assert list(pushes.loc[pushes["iteration"] == 0, "stage"]) == [1, 0]


def test_same_scenario_same_spans():
    sc = scenario(stragglers=[(2, 1.7)], noise=0.2, ps={"mode": "async", "staleness": 1}, iterations=4)
    a, b = run(sc), run(sc)
    assert a.spans.equals(b.spans)
    assert a.summary["staleness_updates_mean"] == b.summary["staleness_updates_mean"]


def test_result_names_the_server_and_reports_workers():
    res = run(scenario())
    assert "server" in set(res.spans["device"]) and "server" in set(res.memory["device"])
    assert list(res.devices["device"]) == [f"gpu{w}" for w in range(4)]
    assert {"period_s", "staleness_updates_mean", "staleness_updates_max"} <= set(res.devices.columns)
    assert res.summary["ps_mode"] == "sync"


def test_program_device_names_default_to_gpus_and_must_cover_every_device():
    assert Program(2).device_names == ["gpu0", "gpu1"]
    assert Program(2, ["gpu0", "server"]).device_names == ["gpu0", "server"]
    with pytest.raises(ProgramError, match="1 device names for 2 devices"):
        Program(2, ["server"])


@pytest.mark.parametrize(
    ("ps", "extra", "field"),
    [
        ({"mode": "sync", "staleness": 2}, {}, "parallel.parameter_server.staleness: 2"),
        ({"mode": "hybrid"}, {}, "parallel.parameter_server.sync_after: None"),
        ({"mode": "async", "sync_after": 3}, {}, "parallel.parameter_server.sync_after: 3"),
        (
            {"servers": ["nowhere"]},
            {},
            "parallel.parameter_server.servers[0]: 'nowhere' is invalid; not a node",
        ),
        ({"servers": ["server", "server"]}, {}, "parallel.parameter_server.servers"),
        ({"mode": "eventually"}, {}, "parallel.parameter_server.mode"),
        ({}, {"simulation.network": "direct"}, "simulation.network: 'direct'"),
        ({}, {"parallel.pp": 2, "training.global_batch": 4}, "parallel.pp: 2"),
        ({"buckets": [1, 1]}, {}, "parallel.parameter_server.buckets: [1, 1] is invalid; layers per tensor"),
        ({"buckets": [2, 1], "per_layer": False}, {}, "parallel.parameter_server.buckets"),
        ({"buckets": [0, 3]}, {}, "parallel.parameter_server.buckets[0]: 0 is invalid"),
        (
            {},
            {"parallel.zero": 1},
            "parallel.zero: 1 is invalid; not supported with parallel.parameter_server; accepted: 0",
        ),
    ],
)
def test_bad_parameter_server_settings_name_the_field(ps, extra, field):
    base = scenario(ps=ps)
    with pytest.raises(ScenarioError) as err:
        # the field rules refuse at load, the parameter-server compiler's check right after resolve
        cs.resolve_scenario(cs.load_scenario(base).with_overrides(extra) if extra else base)
    assert str(err.value).startswith(field)


def test_shipped_edge_scenario_async_beats_sync():
    # 16 edge workers, two throttled: the sync server waits for them every iteration
    sc = cs.load_scenario("scenarios/ps-edge-16workers-20mbit.yaml").with_overrides(
        {"simulation.iterations": 5}
    )
    sync = run(sc)
    asyn = run(sc.with_overrides({"parallel.parameter_server": {"mode": "async", "staleness": 2}}))
    assert asyn.summary["samples_per_s"] > sync.summary["samples_per_s"]
    assert (
        sync.summary["staleness_updates_max"] == 0 < asyn.summary["staleness_updates_max"] <= (2 * 2 + 1) * 15
    )


def test_real_model_pulls_weights_pushes_gradients_and_leaves_the_optimizer_on_the_server():
    from clustersim.workload.rules import model_layers
    from clustersim.workload.stage_cost import chunk_costs

    sc = cs.load_scenario(
        {
            "name": "ps-resnet50",
            "cluster": {
                "nodes": 2,
                "gpus_per_node": 1,
                "gpu": "V100-SXM2-32GB",
                "topology": {"kind": "star"},
            },
            "model": {"preset": "resnet50"},
            "training": {"global_batch": 16, "micro_batch": 8},
            "parallel": {"parameter_server": {"mode": "sync"}},
            "simulation": {"iterations": 1, "network": "analytical"},
        }
    )
    layers = model_layers(sc.model)
    costs = chunk_costs(sc, layers, [1] * layers)
    res = run(sc)
    sp = res.spans[res.spans["device"] == "gpu0"]
    assert sp.loc[sp["lane"] == "pull", "bytes"].sum() == sum(c.static.weights for c in costs)
    assert sp.loc[sp["lane"] == "push", "bytes"].sum() == sum(c.gradient_bytes for c in costs)
    assert (res.devices["optimizer_bytes"] == 0).all() and (res.devices["params_bytes"] > 0).all()
    # the server holds, for the whole run, the weights it serves, their optimizer state and
    # one buffer the pushed gradients land in
    server = res.memory[res.memory["device"] == "server"]
    held = sum(c.static.weights + c.static.optimizer + c.gradient_bytes for c in costs)
    assert server["allocated_bytes"].max() == server["allocated_bytes"].iloc[0] == held


def test_workers_of_mixed_gpu_types_each_run_their_own_gpus_costs():
    # one V100 worker, one T4 worker: each worker's per-layer compute is its own GPU's cost
    # model, and the same bytes move (weights and gradients do not depend on the GPU)
    from clustersim.workload.rules import model_layers
    from clustersim.workload.stage_cost import chunk_costs

    sc = cs.load_scenario(
        {
            "name": "ps-mixed",
            "cluster": {
                "gpus_per_node": 1,
                "topology": {"kind": "star"},
                "node_groups": [{"nodes": 1, "gpu": "V100-SXM2-32GB"}, {"nodes": 1, "gpu": "T4-16GB"}],
            },
            "model": {"preset": "resnet50"},
            "training": {"global_batch": 16, "micro_batch": 8},
            "parallel": {"parameter_server": {"mode": "async"}},
            "simulation": {"iterations": 1, "network": "analytical"},
        }
    )
    layers = model_layers(sc.model)
    res = run(sc)
    comp = res.spans[res.spans["lane"] == "compute"]
    for dev, gpu in (("gpu0", "V100-SXM2-32GB"), ("gpu1", "T4-16GB")):
        costs = chunk_costs(sc, layers, [1] * layers, gpu=gpu)
        mine = comp[comp["device"] == dev]
        assert (mine["end_s"] - mine["start_s"]).sum() == pytest.approx(
            sum(c.forward + c.backward for c in costs), rel=1e-9
        )
    pushed = res.spans[res.spans["lane"] == "push"].groupby("device")["bytes"].sum()
    assert pushed["gpu0"] == pushed["gpu1"]


def test_star_server_bandwidth_is_shared_by_all_workers():
    # the centre's own NIC (server_bandwidth S) carries the 4 simultaneous pushes (and the
    # 4 pulls): on the flow network each gets S/4 when that is below its own link
    workers, server_bw = 4, 2e8
    sc = scenario(workers=workers, layers=1, network="flow")
    sc["cluster"]["topology"]["server_bandwidth"] = server_bw
    res = run(sc)
    share = server_bw / workers
    period = 3e-3 + (LAT + 100e3 / min(DOWN, share)) + (LAT + 100e3 / min(UP, share)) + 0.3e-3
    assert res.summary["iteration_time_s"] == pytest.approx(period, rel=1e-9)
    sc["cluster"]["topology"]["server_bandwidth"] = 1e12  # far above the links: no change
    fast = 3e-3 + (LAT + 100e3 / DOWN) + (LAT + 100e3 / UP) + 0.3e-3
    assert run(sc).summary["iteration_time_s"] == pytest.approx(fast, rel=1e-9)
