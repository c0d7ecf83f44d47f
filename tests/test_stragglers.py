"""Straggler GPUs and random compute noise (device-level variability)."""

import numpy as np
import pytest

import clustersim as cs
from clustersim.workload.stage_cost import chunk_costs
from tests.conftest import synthetic


@pytest.mark.parametrize(
    "p,m,s,k", [(4, 8, 0, 2.0), (4, 8, 2, 1.5), (3, 5, 2, 3.0), (5, 1, 4, 2.0), (1, 4, 0, 1.7)]
)
def test_gpipe_with_one_slow_stage(p, m, s, k):
    # A flow shop of identical jobs: the slow stage paces the forward and the backward
    # waves, T = Σ_stages (f + b) + (m − 1)·k(f + b) = (p − 1)(f + b) + m·k(f + b).
    f, b = 1e-3, 2e-3
    raw = synthetic(p, m, f, b, schedule="gpipe")
    raw["cluster"]["stragglers"] = [{"gpus": [s], "slowdown": k}]
    res = cs.simulate(raw)
    assert res.summary["iteration_time_s"] == pytest.approx((p - 1) * (f + b) + m * k * (f + b), rel=1e-12)
    # the slow stage is never idle in its window; everyone else waits for it
    bub = res.devices.set_index("stage")["bubble_fraction"]
    assert bub[s] == pytest.approx(1 - m * k * (f + b) / res.summary["iteration_time_s"], abs=1e-12)


def test_data_parallel_ranks_wait_for_the_straggler_at_the_allreduce():
    f, b, m, k = 1e-3, 2e-3, 4, 1.5
    raw = synthetic(1, m, f, b, dp=2, params=2**20)
    raw["cluster"]["stragglers"] = [{"gpus": [1], "slowdown": k}]
    res = cs.simulate(raw)
    ar = res.spans[res.spans["kind"] == "collective"].set_index("device")
    # both members' all-reduce spans start when the slow replica arrives
    assert ar.loc["gpu0", "start_s"] == ar.loc["gpu1", "start_s"] == pytest.approx(m * k * (f + b), rel=1e-12)
    comp0 = res.spans[(res.spans["device"] == "gpu0") & (res.spans["phase"] == "B")]
    assert comp0["end_s"].max() == pytest.approx(m * (f + b), rel=1e-12)  # gpu0 finished early, then waited


def test_noise_is_seeded_and_mean_one():
    raw = synthetic(2, 64, 1e-3, 2e-3)
    raw["simulation"]["compute_noise"] = {"distribution": "lognormal", "sigma": 0.2}
    a, b = cs.simulate(raw), cs.simulate(raw)
    assert a.spans.equals(b.spans)
    raw["simulation"]["seed"] = 1
    c = cs.simulate(raw)
    assert not a.spans.equals(c.spans)
    comp = a.spans[(a.spans["lane"] == "compute") & (a.spans["phase"] == "F")]
    ratio = (comp["end_s"] - comp["start_s"]) / 1e-3
    assert ratio.std() > 0.1
    assert ratio.mean() == pytest.approx(1.0, abs=0.08)
    assert np.all(ratio > 0)


def test_bad_straggler_is_a_clear_error():
    raw = synthetic(2, 2)
    raw["cluster"]["stragglers"] = [{"gpus": [7], "slowdown": 2}]
    with pytest.raises(
        cs.ScenarioError, match=r"cluster.stragglers\[0\].gpus: 7 is invalid; GPU indices run from 0 to 1"
    ):
        cs.load_scenario(raw)
    raw["cluster"]["stragglers"] = [{"gpus": [1], "slowdown": -1}]
    with pytest.raises(
        cs.ScenarioError,
        match=r"cluster.stragglers\[0\].slowdown: -1 is invalid; expected a value above 0 and at most 10,000",
    ):
        cs.load_scenario(raw)


def test_waits_name_the_straggler_at_the_allreduce():
    # gpu0 is ready at m(f + b) and waits for gpu1 (slowed k×) until m·k(f + b)
    f, b, m, k = 1e-3, 2e-3, 4, 1.5
    raw = synthetic(1, m, f, b, dp=2, params=2**20)
    raw["cluster"]["stragglers"] = [{"gpus": [1], "slowdown": k}]
    waits = cs.simulate(raw).waits
    rv = waits[waits["reason"] == "rendezvous"]
    assert list(rv["device"]) == ["gpu0"] and list(rv["waited_for_device"]) == ["gpu1"]
    assert rv["waited_s"].iloc[0] == pytest.approx(m * (k - 1) * (f + b), rel=1e-12)
    assert rv["waited_for_op"].iloc[0].startswith("dp all-reduce")


def test_waits_follow_the_pipeline_fill_and_the_slow_stage():
    # GPipe, slow stage s: stage s + 1 waits for gpu{s} before every forward after the
    # first by (k − 1)·f, and its first forward waits for the fill, Σ_{q ≤ s} forward times.
    p, m, f, b, s, k = 4, 6, 1e-3, 2e-3, 1, 2.0
    raw = synthetic(p, m, f, b, schedule="gpipe")
    raw["cluster"]["stragglers"] = [{"gpus": [s], "slowdown": k}]
    res = cs.simulate(raw)
    w = res.waits[(res.waits["device"] == f"gpu{s + 1}") & (res.waits["op"].str.startswith("F"))]
    assert set(w["waited_for_device"]) == {f"gpu{s}"}
    first = w[w["microbatch"] == 0]["waited_s"].iloc[0]
    assert first == pytest.approx(s * f + k * f, rel=1e-12)
    later = w[w["microbatch"] > 0]["waited_s"]
    assert len(later) == m - 1 and later.to_numpy() == pytest.approx((k - 1) * f, rel=1e-9)
    # nobody waits for the fast stage before the slow one on the forward wave
    assert not (
        (res.waits["waited_for_device"] == "gpu0")
        & (res.waits["device"] == "gpu1")
        & (res.waits["microbatch"] > 0)
        & res.waits["op"].str.startswith("F")
    ).any()


def test_waits_survive_save_and_load(tmp_path):
    raw = synthetic(2, 2, dp=2, params=2**20)
    raw["cluster"]["stragglers"] = [{"gpus": [3], "slowdown": 2.0}]
    res = cs.simulate(raw)
    res.save(tmp_path, plots=False)
    back = cs.load_result(tmp_path)
    assert back.waits[["device", "waited_for_device", "reason"]].equals(
        res.waits[["device", "waited_for_device", "reason"]]
    )
    assert back.waits["waited_s"].to_numpy() == pytest.approx(res.waits["waited_s"].to_numpy(), rel=1e-12)


def test_a_flaky_straggler_is_random_per_op_on_its_gpus_only_and_seeded():
    raw = synthetic(2, 64, 1e-3, 2e-3)
    raw["cluster"]["stragglers"] = [{"gpus": [1], "slowdown": 2.0, "noise": {"sigma": 0.3}}]
    a, b = cs.simulate(raw), cs.simulate(raw)
    assert a.spans.equals(b.spans)
    comp = a.spans[(a.spans["lane"] == "compute") & (a.spans["phase"] == "F")]
    ratio = (comp["end_s"] - comp["start_s"]) / 1e-3
    on0, on1 = ratio[comp["device"] == "gpu0"], ratio[comp["device"] == "gpu1"]
    assert on0.to_numpy() == pytest.approx(1.0, rel=1e-12)  # the healthy GPU keeps its exact time
    assert on1.std() > 0.2 and on1.mean() == pytest.approx(2.0, abs=0.25)
    raw["simulation"]["seed"] = 5
    assert not cs.simulate(raw).spans.equals(a.spans)


def test_shipped_pipedream_straggler_scenario_is_paced_by_the_straggler():
    # PipeDream 15-1: stage 0 (13 VGG-16 layers) on 15 round-robin replicas, stage 1 on gpu15;
    # gpu3 runs k× slow. A weight update merges the backwards of all 15 replicas, so every
    # replica waits at the all-reduce for gpu3, and the run settles into gpu3's loop, idle
    # only for its round trip to stage 1: k·F0 → send → F1, B1 → recv → k·B0 → all-reduce →
    # k·O0. Nothing else moves while gpu3 computes, so the send and recv go over idle links:
    # one chunk (A < chunk_size) through the leaf switch, store-and-forward on two NIC links,
    # ℓ + 2·A/B_nic; the all-reduce, the same on every loop, is the simulated one on idle links
    # (checked against the ring's bandwidth term: its latency terms have no closed form here).
    # The reported period (between the ends of iterations 3 and 4) is one loop.
    # The regime needs k·F0 long enough that the other replicas' sends to stage 1 are done
    # before gpu3's: at the shipped k = 2 under GEMMs priced by shape (issue 36: V100 runs
    # VGG's convolutions ~7 % faster) two of them still cross leaf0 -> node3 while gpu3 sends,
    # so its send queues behind them (checked below); the closed form is checked at k = 3.
    shipped = cs.load_scenario("scenarios/pipedream-vgg16-10GbE-straggler.yaml")
    (straggler,) = shipped.cluster.stragglers[0].gpus
    k = 3.0
    sc = shipped.with_overrides({"cluster.stragglers": [{"gpus": [straggler], "slowdown": k}]})
    conv, fc = chunk_costs(sc, 2, sc.parallel.partition)
    nic = sc.cluster.nic
    assert conv.activation_bytes < sc.simulation.chunk_size
    transfer = nic.latency + 2 * conv.activation_bytes / nic.bandwidth
    slow = cs.simulate(sc, progress=False)
    # from iteration 1 on: in iteration 0 the other replicas' first sends may still hold the
    # links when gpu3's first forward ends (warm-up, before the run settles into gpu3's loop)
    spans = slow.spans
    ops = spans[(spans["device"] == f"gpu{straggler}") & (spans["iteration"] > 0)]
    took = (ops["end_s"] - ops["start_s"]).groupby(ops["kind"])
    assert took.get_group("send").to_numpy() == pytest.approx(transfer, rel=1e-9)
    assert took.get_group("recv").to_numpy() == pytest.approx(transfer, rel=1e-9)
    allreduce = took.get_group("collective").to_numpy()
    assert allreduce == pytest.approx(allreduce[0], rel=1e-12)
    # and it is, within its per-step latencies (< 2 %), the bandwidth term of a ring of the 15
    # replicas over the servers' one 10 GbE NIC each: 2(n − 1)/n · S / B_nic
    n = sc.parallel.stage_replicas[0]
    ring = 2 * (n - 1) / n * conv.gradient_bytes / (nic.bandwidth * nic.efficiency)
    assert ring < allreduce[0] < 1.02 * ring
    # each pass starts with the framework's fixed op (training.fixed_costs), on the compute
    # lane: the straggler runs it slowed too
    loop = (
        k * (conv.forward + conv.backward + 2 * conv.pass_overhead + conv.optimizer)
        + 2 * transfer
        + fc.forward
        + fc.backward
        + 2 * fc.pass_overhead
        + allreduce[0]
    )
    assert slow.summary["iteration_time_s"] == pytest.approx(loop, rel=1e-9)
    # without the straggler the replicas' sends contend for the NICs (no closed form): faster
    healthy = cs.simulate(sc.with_overrides({"cluster.stragglers": []}), progress=False)
    assert healthy.summary["iteration_time_s"] < slow.summary["iteration_time_s"]
    blame = slow.waits.groupby("waited_for_device")["waited_s"].sum()
    assert blame.idxmax() == f"gpu{straggler}"


def test_shipped_straggler_sends_queue_only_behind_other_replicas_sends():
    # at the shipped k = 2 (see above) gpu3's send to stage 1 may wait behind the other
    # replicas' sends on the shared leaf -> node link, never take less than its idle transfer,
    # and its recv (nothing else flows to it) is the idle transfer exactly
    sc = cs.load_scenario("scenarios/pipedream-vgg16-10GbE-straggler.yaml")
    (straggler,) = sc.cluster.stragglers[0].gpus
    conv, _ = chunk_costs(sc, 2, sc.parallel.partition)
    transfer = sc.cluster.nic.latency + 2 * conv.activation_bytes / sc.cluster.nic.bandwidth
    spans = cs.simulate(sc, progress=False).spans
    ops = spans[(spans["device"] == f"gpu{straggler}") & (spans["iteration"] > 0)]
    took = (ops["end_s"] - ops["start_s"]).groupby(ops["kind"])
    assert (took.get_group("send").to_numpy() >= transfer * (1 - 1e-9)).all()
    assert took.get_group("recv").to_numpy() == pytest.approx(transfer, rel=1e-9)
