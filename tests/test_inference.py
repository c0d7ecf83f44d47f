"""Forward-only pipelines (``training.mode: inference``): closed forms, invariants, errors.

Notation: p stages, n requests, f forward time per stage per request, c the time of one
stage-to-stage transfer (the direct network: its latency, no bytes), b = max(f, c) the
bottleneck (f when p = 1): every stage's compute lane and every hop's send lane serve requests one at a
time, in order, so the pipeline is a tandem line of deterministic servers
(f, c, f, …, c, f). Its empty-pipeline latency is S = p·f + (p − 1)·c and request i
leaves at d_i = max(a_i + S, d_{i−1} + b) (a_i its arrival).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.compilers.inference.compile import arrival_times
from clustersim.hardware.gpus import get_gpu
from clustersim.scenario.schema import ArrivalSpec
from clustersim.topology import build_topology
from clustersim.topology.routing import Router
from clustersim.workload.resolve import resolve_transformer
from clustersim.workload.stage_cost import chunk_costs
from tests.conftest import synthetic


def inference(p, n, f, c=0.0, *, arrival=None, dp=1, activation=0, params=0, **kw) -> dict:
    raw = synthetic(p, n, f, 2 * f, latency=c, dp=dp, activation=activation, params=params, **kw)
    raw["training"]["mode"] = "inference"
    if arrival is not None:
        raw["training"]["arrival"] = arrival
    return raw


def departures(arrivals, S, b):
    out, prev = [], -np.inf
    for a in arrivals:
        prev = max(a + S, prev + b)
        out.append(prev)
    return out


@pytest.mark.parametrize(
    "p,n,f,c",
    [
        (1, 1, 1e-3, 0.0),
        (1, 5, 1e-3, 0.0),
        (4, 8, 1e-3, 2e-4),
        (4, 8, 1e-3, 3e-3),
        (6, 3, 2e-3, 2e-3),
        (8, 16, 5e-4, 1e-4),
    ],
)
def test_all_requests_at_once(p, n, f, c):
    # offline batch: request i leaves at S + i·b; the makespan is S + (n − 1)·b
    # (= n·f + (p − 1)(f + c) when c ≤ f)
    res = cs.simulate(inference(p, n, f, c), progress=False)
    S, b = p * f + (p - 1) * c, max(f, c) if p > 1 else f
    req = res.requests
    assert list(req["request"]) == list(range(n))
    assert req["arrival_s"].tolist() == [0.0] * n
    assert req["end_s"].tolist() == pytest.approx([S + i * b for i in range(n)], rel=1e-9)
    assert req["start_s"].tolist() == pytest.approx([i * f for i in range(n)], rel=1e-9, abs=1e-15)
    s = res.summary
    assert s["iteration_time_s"] == pytest.approx(S + (n - 1) * b, rel=1e-9)
    assert s["requests"] == n
    assert s["requests_per_s"] == pytest.approx(n / (S + (n - 1) * b), rel=1e-9)
    assert s["first_request_latency_s"] == pytest.approx(S, rel=1e-9)
    assert s["latency_max_s"] == pytest.approx(S + (n - 1) * b, rel=1e-9)
    assert s["latency_mean_s"] == pytest.approx(S + (n - 1) * b / 2, rel=1e-9)
    if n > 1:
        assert s["steady_requests_per_s"] == pytest.approx(1 / b, rel=1e-9)
    else:
        assert s["steady_requests_per_s"] is None


@pytest.mark.parametrize("p,f,c,gap", [(4, 1e-3, 2e-4, 1e-3), (4, 1e-3, 3e-3, 3e-3), (3, 2e-3, 0.0, 5e-3)])
def test_arrivals_slower_than_the_bottleneck_never_queue(p, f, c, gap):
    n = 7
    res = cs.simulate(inference(p, n, f, c, arrival={"process": "constant", "interval": gap}), progress=False)
    S = p * f + (p - 1) * c
    req = res.requests
    assert req["arrival_s"].tolist() == pytest.approx([i * gap for i in range(n)], rel=1e-9)
    assert req["latency_s"].tolist() == pytest.approx([S] * n, rel=1e-9)
    assert req["queue_s"].abs().max() < 1e-12
    assert res.summary["iteration_time_s"] == pytest.approx((n - 1) * gap + S, rel=1e-9)
    assert res.summary["latency_p99_s"] == pytest.approx(S, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    p=st.integers(1, 5),
    n=st.integers(1, 12),
    f=st.floats(1e-5, 1e-2),
    c=st.sampled_from([0.0, 1e-5, 3e-3]),
    rate=st.floats(10.0, 1e5),
    seed=st.integers(0, 2**16),
    dp=st.sampled_from([1, 2]),
)
def test_departures_follow_the_tandem_recurrence(p, n, f, c, rate, seed, dp):
    # any arrival process: d_i = max(a_i + S, d_{i−1} + b) per replica; replicas are independent
    raw = inference(p, n, f, c, arrival={"process": "poisson", "rate": rate}, dp=dp)
    raw["simulation"]["seed"] = seed
    res = cs.simulate(raw, progress=False)
    req = res.requests
    a = arrival_times(ArrivalSpec(process="poisson", rate=rate), n * dp, seed)
    assert req["arrival_s"].tolist() == pytest.approx(a, rel=1e-9, abs=1e-15)
    S, b = p * f + (p - 1) * c, max(f, c) if p > 1 else f
    for r in range(dp):
        mine = req[req["replica"] == r]
        assert mine["request"].tolist() == list(range(r, n * dp, dp))
        assert mine["end_s"].tolist() == pytest.approx(departures(mine["arrival_s"], S, b), rel=1e-9)
    assert (req["queue_s"] >= -1e-12).all() and (req["latency_s"] >= S * (1 - 1e-9)).all()
    assert len(req) == res.summary["requests"] == n * dp
    assert not (res.spans["phase"] == "B").any() and not res.spans["name"].str.contains("optimizer").any()


@pytest.mark.parametrize("p", [1, 2, 4])
def test_memory_is_weights_and_boundary_tensors(p):
    # one request: a stage holds its weights, plus during its forward the input it received
    # and the output it makes; everything but the weights is freed at the end
    A, P = 3 * 2**20, 5 * 2**20
    res = cs.simulate(inference(p, 1, 1e-3, activation=A, params=P, bandwidth=1e9), progress=False)
    peak = res.memory.groupby("device")["allocated_bytes"].max()
    final = res.memory.sort_values("time_s", kind="stable").groupby("device")["allocated_bytes"].last()
    for s in range(p):
        holds_input = s > 0
        assert peak[f"gpu{s}"] == P + A + (A if holds_input else 0)
        assert final[f"gpu{s}"] == P


def test_arrival_times_are_seeded_and_have_the_asked_rate():
    spec = ArrivalSpec(process="poisson", rate=250.0)
    a = arrival_times(spec, 4001, seed=7)
    assert a == arrival_times(spec, 4001, seed=7) and a != arrival_times(spec, 4001, seed=8)
    gaps = np.diff(a)
    assert a[0] == 0.0 and (gaps > 0).all()
    # the mean of 4000 exponential gaps lies within 5 standard errors (mean/sqrt(4000)) of 1/rate
    assert abs(gaps.mean() - 1 / 250) < 5 * (1 / 250) / np.sqrt(4000)
    const = arrival_times(ArrivalSpec(process="constant", interval=2e-3), 4, seed=0)
    assert const == pytest.approx([0, 2e-3, 4e-3, 6e-3], rel=1e-12)


def test_stragglers_slow_forwards_but_not_arrivals():
    raw = inference(2, 3, 1e-3, arrival={"process": "constant", "interval": 10e-3})
    raw["cluster"]["stragglers"] = [{"gpus": [0], "slowdown": 2.0}]
    req = cs.simulate(raw, progress=False).requests
    assert req["arrival_s"].tolist() == pytest.approx([0, 10e-3, 20e-3], rel=1e-12)
    assert req["latency_s"].tolist() == pytest.approx([3e-3] * 3, rel=1e-9)  # 2 f on gpu0 + f on gpu1


def test_forward_only_mfu_on_a_transformer():
    # model FLOPs of inference are forward FLOPs only: a third of forward + backward
    raw = {
        "name": "tiny-gpt",
        "cluster": {"nodes": 1, "gpus_per_node": 2},
        "model": {"layers": 4, "hidden": 256, "heads": 4, "vocab": 1000, "seq_len": 128},
        "training": {"mode": "inference", "global_batch": 8, "micro_batch": 2},
        "parallel": {"pp": 2, "schedule": "gpipe"},
    }
    inf = cs.simulate(raw, progress=False).summary
    sc = cs.load_scenario(raw)
    fwd = resolve_transformer(sc.model).iteration_flops(8, recompute=False) / 3
    assert inf["mfu"] == pytest.approx(
        fwd / inf["iteration_time_s"] / (2 * get_gpu(sc.cluster.gpu).peak_flops), rel=1e-12
    )
    assert inf["hfu"] == inf["mfu"]
    assert inf["tokens_per_s"] == pytest.approx(8 * 128 / inf["iteration_time_s"], rel=1e-12)


def test_same_seed_same_result_and_bundle_keeps_requests(tmp_path):
    raw = inference(3, 6, 1e-3, 1e-4, arrival={"process": "poisson", "rate": 800})
    one, two = cs.simulate(raw, progress=False), cs.simulate(raw, progress=False)
    assert one.requests.equals(two.requests) and one.spans.equals(two.spans)
    one.save(tmp_path, plots=False)
    back = cs.load_result(tmp_path)
    assert np.allclose(
        back.requests[["arrival_s", "end_s"]], one.requests[["arrival_s", "end_s"]], rtol=1e-12
    )


@pytest.mark.parametrize(
    "overrides,field,value",
    [
        ({"parallel.schedule": "zb_h1"}, "parallel.schedule", "zb_h1"),
        ({"parallel.schedule": "pipedream"}, "parallel.schedule", "pipedream"),
        ({"parallel.gradient_compression": {"ratio": 4}}, "parallel.gradient_compression", None),
        ({"parallel.zero": 1}, "parallel.zero", 1),
        ({"training.recompute": "full"}, "training.recompute", "full"),
        ({"simulation.iterations": 2}, "simulation.iterations", 2),
        ({"parallel.stage_replicas": [1, 1]}, "parallel.stage_replicas", [1, 1]),
        ({"parallel.activation_compression": {"ratio": 4}}, "parallel.activation_compression", None),
        ({"parallel.dp_split": [2, 2]}, "parallel.dp_split", [2, 2]),
    ],
)
def test_training_only_options_are_refused(overrides, field, value):
    sc = cs.load_scenario(inference(2, 4, 1e-3))
    with pytest.raises(cs.ScenarioError) as e:
        sc.with_overrides(overrides)
    assert e.value.field == field and ("accepted" in e.value.expected or "remove it" in e.value.expected)
    if value is not None:
        assert e.value.value == value


def test_arrival_errors_name_the_field():
    with pytest.raises(cs.ScenarioError, match=r"training.arrival: .*only with training.mode: inference"):
        cs.load_scenario(synthetic(2, 4) | {"training": {"global_batch": 4, "arrival": {"interval": 1e-3}}})
    with pytest.raises(cs.ScenarioError, match=r"training.arrival.*poisson arrival process takes rate"):
        cs.load_scenario(inference(2, 4, 1e-3, arrival={"process": "poisson", "interval": 1e-3}))
    with pytest.raises(cs.ScenarioError, match=r"training.mode"):
        cs.load_scenario(inference(2, 4, 1e-3) | {"training": {"global_batch": 4, "mode": "serve"}})
    with pytest.raises(
        cs.ScenarioError,
        match=r"simulation.fold: True is invalid; cannot fold this scenario: "
        r"inference",
    ):
        cs.simulate(cs.load_scenario(inference(2, 4, 1e-3, dp=2)).with_overrides({"simulation.fold": True}))


def test_edgepipe_scenario_runs_and_is_network_bound():
    res = cs.simulate("scenarios/edgepipe-vit-large-4xT4-1GbE.yaml", progress=False)
    s, req = res.summary, res.requests
    assert s["requests"] == len(req) == 64 and not s["oom"]
    # arrivals (5 ms apart) are slower than every stage and every hop: no request waits
    busiest = res.spans[res.spans["lane"].isin(["compute", "send"])].assign(
        d=lambda x: x["end_s"] - x["start_s"]
    )
    assert busiest["d"].max() < 5e-3
    # network-bound: the longest hop outlasts the longest stage forward
    longest = busiest.groupby("lane")["d"].max()
    assert longest["send"] > longest["compute"]
    # empty-pipeline latency S = Σ stage forwards on the T4 + 3 hops. A hop is gpu → NIC (free
    # wire) → star centre → NIC → gpu: two 1 Gbit/s links, each carrying the star's one-way
    # latency (default nic.latency, 50 µs: clustersim.topology.star), and the packet model's
    # idle-route time (docs/network.md) for A = 197 × 1024 × 2 bytes (fp16 activations) in
    # 64 KiB chunks over h = 2 equal links: A/B + (h − 1)·chunk/B + Σ l.
    sc = cs.load_scenario("scenarios/edgepipe-vit-large-4xT4-1GbE.yaml")
    A, B, chunk = 197 * 1024 * 2, 1e9 / 8, 64 * 1024
    router = Router(build_topology(sc.cluster.model_dump()))
    assert [router.cost(f"gpu{k}", f"gpu{k + 1}") for k in range(3)] == [pytest.approx((2 * 50e-6, B))] * 3
    hop = A / B + chunk / B + 2 * 50e-6
    # a stage's forward: its kernels after the framework's per-pass op (training.fixed_costs)
    forwards = [c.pass_overhead + c.forward for c in chunk_costs(sc, 4, gpu="T4-16GB")]
    assert [c.activation_bytes for c in chunk_costs(sc, 4, gpu="T4-16GB")][:3] == [A] * 3
    assert hop > max(forwards)  # ~3.9 ms per hop against ~1.8 ms per stage
    S = sum(forwards) + 3 * hop
    assert s["first_request_latency_s"] == pytest.approx(S, rel=1e-9)
    assert req["latency_s"].to_numpy() == pytest.approx(S, rel=1e-9)
    assert s["iteration_time_s"] == pytest.approx(63 * 5e-3 + S, rel=1e-9)


def test_edge_pipeline_over_mixed_gpus_prices_each_stage_on_its_own_gpu():
    # EdgePipe's setting: a 2-stage forward pipeline, stage 0 on an A100 box, stage 1 on a
    # T4 box. Each stage runs its own GPU's forward time; with every request at t = 0 the
    # slow stage paces the line: request i ends at S + i·max(f0, f1) (free transfers).
    raw = {
        "name": "mixed-edge",
        "cluster": {
            "gpus_per_node": 1,
            "topology": {"kind": "star"},
            "node_groups": [{"nodes": 1, "gpu": "A100-SXM4-80GB"}, {"nodes": 1, "gpu": "T4-16GB"}],
        },
        "model": {"layers": 4, "hidden": 1024, "heads": 16, "vocab": 1000, "seq_len": 256},
        "training": {"mode": "inference", "global_batch": 6, "micro_batch": 1},
        "parallel": {"pp": 2, "schedule": "gpipe"},
        "simulation": {"network": "analytical"},
    }
    raw["cluster"]["nic"] = {"bandwidth": 1e18, "latency": 0.0}
    sc = cs.load_scenario(raw)
    res = cs.simulate(sc, progress=False)
    # each pass: the framework's per-pass op (training.fixed_costs), then the kernels
    chunks = [chunk_costs(sc, 2, gpu=g)[s] for s, g in enumerate(("A100-SXM4-80GB", "T4-16GB"))]
    f = [c.pass_overhead + c.forward for c in chunks]
    assert f[1] > 2 * f[0]
    comp = res.spans[res.spans["lane"] == "compute"].groupby("device")
    assert (comp["end_s"].sum() - comp["start_s"].sum()).to_numpy() == pytest.approx(
        [6 * f[0], 6 * f[1]], rel=1e-9
    )
    act = chunk_costs(sc, 2)[0].activation_bytes
    hop = 2 * act / 1e18  # NIC → centre → NIC, nothing on the wire
    ends = res.requests["end_s"].to_numpy()
    assert ends == pytest.approx([f[0] + hop + f[1] + i * f[1] for i in range(6)], rel=1e-9)
