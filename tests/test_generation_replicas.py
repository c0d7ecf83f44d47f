"""More than one serving replica (docs/generation.md): ``parallel.dp`` replicas, each its own
scheduler and KV cache, requests handed out by ``generation.dispatch``."""

from __future__ import annotations

import pytest

from clustersim import simulate
from clustersim.errors import ScenarioError

INTERVAL = 0.011  # s between arrivals: replicas overlap their requests' service


def scenario(dp: int, gen: dict) -> dict:
    return {
        "name": "replicas",
        "cluster": {"nodes": 1, "gpus_per_node": dp, "gpu": "A100-SXM4-80GB"},
        "model": {"preset": "llama2-7b"},
        "training": {"global_batch": dp, "mode": "inference", "cuda_graphs": True},
        "parallel": {"tp": 1, "dp": dp},
        "generation": gen,
    }


def trace(path, rows) -> str:
    path.write_text("arrival_s,prompt_len,output_len\n" + "".join(f"{t!r},{p},{o}\n" for t, p, o in rows))
    return str(path)


# lengths that differ request by request, so a request served on the wrong replica shows
LENGTHS = [(180, 9), (420, 5), (95, 14), (300, 3), (610, 7), (60, 11), (250, 6), (140, 10), (333, 4)]
COLUMNS = ["prompt_len", "output_len", "ttft_s", "tpot_s", "latency_s", "preemptions"]


@pytest.mark.parametrize("dp", [2, 3])
def test_each_round_robin_replica_is_a_single_replica_at_rate_over_dp(tmp_path, dp):
    """Round robin over deterministic arrivals every INTERVAL: replica k serves requests
    k, k + dp, … arriving every dp × INTERVAL from k × INTERVAL — exactly what one replica
    serves at rate / dp. Its requests' latencies and steps equal that run's."""
    rows = [(i * INTERVAL, p, o) for i, (p, o) in enumerate(LENGTHS[: 3 * dp])]
    res = simulate(scenario(dp, {"trace": trace(tmp_path / "all.csv", rows)}))
    assert sorted(res.requests.replica.value_counts().tolist()) == [3] * dp
    for k in range(dp):
        mine = rows[k::dp]
        single = simulate(scenario(1, {"trace": trace(tmp_path / f"r{k}.csv", mine)}))
        served = res.requests[res.requests.replica == k].reset_index(drop=True)
        assert served.request.tolist() == list(range(k, 3 * dp, dp))
        assert served[COLUMNS].equals(single.requests[COLUMNS])
        steps = res.steps[res.steps.pool == f"replica{k}"].drop(columns="pool").reset_index(drop=True)
        assert steps.equals(single.steps.drop(columns="pool"))
    # metrics over all requests: every request once, throughput over the whole makespan
    assert sorted(res.requests.request) == list(range(3 * dp))
    assert res.summary["requests"] == 3 * dp and res.summary["num_gpus"] == dp
    assert res.summary["output_tokens_per_s"] == pytest.approx(
        res.requests.output_len.sum() / res.requests.end_s.max(), rel=1e-12
    )
    # replica k's steps run on its own GPU
    assert sorted(res.spans[res.spans.lane == "compute"].device.unique()) == [f"gpu{k}" for k in range(dp)]


def test_least_loaded_sends_to_the_replica_with_fewest_outstanding():
    """All at once, nothing has finished when requests are handed out: the outstanding
    counts are the counts handed out, so least-loaded deals them round robin. Far apart, every
    request finds every replica idle and goes to replica 0 (the lowest index on a tie)."""
    gen = {"requests": 6, "prompt_len": {"dist": "uniform", "low": 50, "high": 400}, "output_len": 6}
    burst = {**gen, "arrival": {"process": "all_at_once"}}
    a = simulate(scenario(2, {**burst, "dispatch": "least_loaded"}))
    b = simulate(scenario(2, burst))
    assert a.requests.equals(b.requests) and a.summary["ttft_p99_s"] == b.summary["ttft_p99_s"]
    sparse = {**gen, "arrival": {"process": "constant", "interval": 5.0}, "dispatch": "least_loaded"}
    c = simulate(scenario(2, sparse))
    assert (c.requests.replica == 0).all()
    assert set(c.steps.pool) == {"replica0"}


def test_least_loaded_spares_a_short_request_the_long_ones_queue(tmp_path):
    """Every second request long (1,500-token prompt, 40 tokens out), the others done within
    the 50 ms to the next arrival: round robin stacks the long ones on replica 0, where each
    prefill stalls the others' decodes; least-loaded sends a long request to the replica whose
    short one has finished, so the long ones split over both and the latencies drop."""
    rows = [(i * 0.05, 1500 if i % 2 == 0 else 40, 40 if i % 2 == 0 else 2) for i in range(8)]
    path = trace(tmp_path / "t.csv", rows)
    rr, ll = (simulate(scenario(2, {"trace": path, "dispatch": p})) for p in ("round_robin", "least_loaded"))
    assert (rr.requests[rr.requests.prompt_len == 1500].replica == 0).all()
    assert set(ll.requests[ll.requests.prompt_len == 1500].replica) == {0, 1}
    for stat in ("latency_p99_s", "latency_mean_s", "iteration_time_s"):
        assert ll.summary[stat] < rr.summary[stat]


def test_replicas_are_deterministic():
    gen = {
        "requests": 10,
        "arrival": {"process": "poisson", "rate": 40},
        "prompt_len": {"dist": "lognormal", "median": 200, "sigma": 0.5, "low": 16, "high": 800},
        "output_len": {"dist": "uniform", "low": 2, "high": 12},
        "dispatch": "least_loaded",
    }
    a, b = simulate(scenario(2, gen)), simulate(scenario(2, dict(gen)))
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps) and a.spans.equals(b.spans)
    assert {k: v for k, v in a.summary.items() if k != "wall_time_s"} == {
        k: v for k, v in b.summary.items() if k != "wall_time_s"
    }


def test_dp_auto_serves_a_replica_on_every_tp_pp_gpus():
    raw = scenario(
        4, {"requests": 4, "prompt_len": 30, "output_len": 2, "arrival": {"process": "all_at_once"}}
    )
    raw["parallel"] = {"tp": 2, "dp": "auto"}
    res = simulate(raw)
    assert res.requests.replica.tolist() == [0, 1, 0, 1]
    assert sorted(res.spans[res.spans.lane == "compute"].device.unique()) == ["gpu0", "gpu1", "gpu2", "gpu3"]


def test_a_bad_dispatch_policy_is_refused_naming_the_field():
    with pytest.raises(ScenarioError) as err:
        simulate(scenario(2, {"prompt_len": 10, "output_len": 2, "dispatch": "random"}))
    assert err.value.field == "generation.dispatch"
    assert "round_robin" in str(err.value) and "least_loaded" in str(err.value)


def test_the_picture_draws_a_stair_per_replica():
    from clustersim.viz.generation import plot_generation

    gen = {"requests": 5, "prompt_len": 40, "output_len": 4, "arrival": {"process": "all_at_once"}}
    res = simulate(scenario(2, gen))
    top, bottom = plot_generation(res.steps).axes
    assert [line.get_label() for line in top.lines] == ["replica0", "replica1"]
    for k, line in enumerate(top.lines):  # replica 0 got requests 0, 2, 4; replica 1 got 1, 3
        assert max(line.get_ydata()) == 3 - k
    assert len(bottom.lines) == 2
