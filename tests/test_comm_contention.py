"""A collective slowed by the GEMM beside it (clustersim.hardware.comm_contention)."""

from __future__ import annotations

import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.engine.interpreter import Engine
from clustersim.hardware.comm_contention import (
    TOLERANCE,
    beside_rate,
    copy_rate_across,
    copy_rate_beside,
    curve_for,
    curves,
    fit,
    pair_seconds,
)
from clustersim.hardware.comm_sms import TOLERANCE as SM_TOLERANCE
from clustersim.hardware.comm_sms import curves as sm_curves
from clustersim.hardware.comm_sms import sm_rate
from clustersim.hardware.datasheets import datasheets
from clustersim.hardware.interference import bus_share, nccl_ctas
from clustersim.network import DirectFabric
from clustersim.record import Recorder
from clustersim.validation.korthikanti import layer_times


@pytest.mark.parametrize("key", sorted(curves()), ids=lambda k: "-".join(k))
def test_every_row_within_tolerance_of_its_curve(key):
    # NanoFlow's A100 rows (0.4 at R = 0.1 … 0.9 at R = 0.5) within 5 % of one power law
    c = curves()[key]
    for share, rate in c.rows:
        assert c.rate(share) == pytest.approx(rate, rel=TOLERANCE)


@given(
    a=st.floats(0.2, 1.5),
    full=st.floats(0.3, 1.0),
    shares=st.lists(st.floats(0.02, 0.3), min_size=2, max_size=6, unique=True),
)
def test_fit_recovers_a_power_law_exactly(a, full, shares):
    shares = sorted(set(round(s, 6) for s in shares))
    if len(shares) < 2 or shares[-1] / shares[0] < 1.05:
        return
    c = fit([(s, (s / full) ** a) for s in shares])
    assert c.exponent == pytest.approx(a, rel=1e-9)
    assert c.full_share == pytest.approx(full, rel=1e-9)


@given(st.floats(1e-3, 1.0), st.floats(1e-3, 1.0))
def test_rate_grows_with_the_share_and_never_exceeds_alone(x, y):
    c = curve_for("A100-SXM4-80GB")[0]
    lo, hi = sorted((x, y))
    assert 0 < c.rate(lo) <= c.rate(hi) <= 1.0


def test_share_outside_zero_to_one_is_refused():
    c = curve_for("A100-SXM4-80GB")[0]
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="share"):
            c.rate(bad)


def test_gpus_without_rows_take_a100s_curve_as_a_transfer():
    assert curve_for("A100-SXM4-80GB")[1] is False
    assert curve_for("H100-SXM")[1] is True
    assert curve_for("H100-SXM")[0] is curve_for("A100-SXM4-80GB")[0]
    # NCCL's 24 CTAs of A100's 108 SMs: R = 2/9, the collective at (R / R_full)^a
    c = curve_for("A100-SXM4-80GB")[0]
    assert beside_rate("A100-SXM4-80GB", 24, 108) == pytest.approx((24 / 108 / c.full_share) ** c.exponent)


def _stepped(gemm_alone, gemm_beside, comm_alone, rate, steps=20000):
    """The pair advanced in small time steps: each task at its beside rate while both run."""
    dt = max(gemm_beside, comm_alone / rate) / steps
    g = c = 0.0  # fractions done
    t = 0.0
    while g < 1.0 or c < 1.0:
        both = g < 1.0 and c < 1.0
        gstep = dt / (gemm_beside if both else gemm_alone) if g < 1.0 else 0.0
        cstep = dt * (rate if both else 1.0) / comm_alone if c < 1.0 else 0.0
        # end exactly at the first finish inside this step
        frac = min(
            1.0,
            (1.0 - g) / gstep if gstep else math.inf,
            (1.0 - c) / cstep if cstep else math.inf,
        )
        g, c, t = g + gstep * frac, c + cstep * frac, t + dt * frac
        g, c = (1.0 if g > 1.0 - 1e-12 else g), (1.0 if c > 1.0 - 1e-12 else c)
    return t


@given(
    gemm=st.floats(1e-4, 1e-2),
    slow=st.floats(1.0, 1.5),
    comm=st.floats(1e-4, 1e-2),
    rate=st.floats(0.3, 1.0),
)
def test_pair_seconds_is_the_two_rates_run_to_completion(gemm, slow, comm, rate):
    want = _stepped(gemm, gemm * slow, comm, rate)
    assert pair_seconds(gemm, gemm * slow, comm, rate) == pytest.approx(want, rel=1e-9)


@given(gemm=st.floats(1e-4, 1e-2), comm=st.floats(1e-4, 1e-2))
def test_without_interference_the_pair_takes_the_longer(gemm, comm):
    assert pair_seconds(gemm, gemm, comm, 1.0) == pytest.approx(max(gemm, comm), rel=1e-12)


def test_contention_slows_the_backward_only():
    # Korthikanti's 22B layer on A100: the forward has no collective beside a kernel; under SP
    # the backward's re-gathers beside the dgrad GEMMs now move at 0.61 of their rate, and
    # without SP no collective runs beside a kernel
    for mode in (("none", True), ("selective", True)):
        f0, b0 = layer_times(*mode, contention=False)
        f1, b1 = layer_times(*mode, contention=True)
        assert f1 == f0 and b1 > b0
    assert layer_times("none", False, contention=True) == layer_times("none", False, contention=False)


#: a 25 GB/s two-GPU fabric; the all-reduce's time alone on it
BW = 25e9


def _pair(
    gemm_s: float,
    nbytes: int,
    slowdown: float,
    contention: float,
    domains=(0, 0),
    across: float = 0.0,
    kind: str = "all_reduce",
    bw: float = BW,
) -> tuple[float, float, dict]:
    """(compute end, collective end, comm_slowed_s) of one compute op of ``gemm_s`` and one
    collective ``kind`` of ``nbytes`` started together on each of two GPUs joined at ``bw``
    (``domains``: their NVLink domains; ``across``: the engine's ``copy_across``)."""
    prog = cs.Program(2)
    for dev in (0, 1):
        prog.add(dev, "compute", "compute", "wgrad", duration=gemm_s)
        prog.add(dev, "tp", "collective", "ar", nbytes=nbytes, group=(0, 1), collective=kind, tag="ar")
    env, rec = simpy.Environment(), Recorder()
    fabric = DirectFabric(env, rec, bw, 0.0)
    engine = Engine(
        prog,
        env,
        fabric,
        rec,
        [2**40] * 2,
        alpha=0.0,
        comm_compute_slowdown=slowdown,
        comm_contention=contention,
        domains=domains,
        copy_across=across,
    )
    engine.run()
    ends = {prog.ops[i].name: e for i, _, e in rec.ops}
    return ends["wgrad"], ends["ar"], engine.comm_slowed_s


def _alone(nbytes: int, kind: str = "all_reduce", bw: float = BW) -> float:
    return _pair(0.0, nbytes, 1.0, 1.0, kind=kind, bw=bw)[1]


@settings(max_examples=25, deadline=None)
@given(
    gemm=st.floats(1e-4, 5e-3),
    mib=st.integers(1, 64),
    slowdown=st.floats(1.05, 1.5),
    contention=st.floats(0.3, 0.99),
)
def test_the_engine_runs_the_pair_as_pair_seconds(gemm, mib, slowdown, contention):
    """Compute at 1/slowdown while the collective runs, the collective at ``contention`` of
    its rate while the compute runs, each at its rate alone after: the later end is
    :func:`pair_seconds`, the collective's added seconds its ``comm_slowed_s``."""
    nbytes = mib * 2**20
    comm = _alone(nbytes)
    g_end, c_end, slowed = _pair(gemm, nbytes, slowdown, contention)
    assert max(g_end, c_end) == pytest.approx(pair_seconds(gemm, gemm * slowdown, comm, contention), rel=1e-9)
    # the collective ends when its work at the two rates is done: after its time alone
    assert c_end > comm and set(slowed) == {1, 3}
    assert slowed[1] == pytest.approx(c_end - comm, rel=1e-9)


def test_off_with_slowdown_one_rate_one_or_across_domains():
    nbytes = 8 * 2**20
    comm = _alone(nbytes)
    # interference off, the rate 1, or the two GPUs in two NVLink domains without a copy rate
    # across them (a GPU without a per-CTA NCCL rate: A100, Blackwell)
    for slowdown, contention, domains in ((1.0, 0.6, (0, 0)), (1.2, 1.0, (0, 0)), (1.2, 0.6, (0, 1))):
        _, c_end, slowed = _pair(1e-3, nbytes, slowdown, contention, list(domains))
        assert c_end == pytest.approx(comm, rel=1e-12) and slowed == {}


def _busbw(kind: str, nbytes: int, seconds: float) -> float:
    """nccl-tests' bus bandwidth of a two-rank ``kind`` of ``nbytes`` taking ``seconds``."""
    return bus_share(kind, 2) * nbytes / seconds


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "all_reduce"])
def test_a_collective_across_nodes_beside_a_long_gemm_ends_at_alone_times_the_rate_ratio(kind):
    """The H100 closed form in the engine: a ring moving B = 360 GB/s of bus bandwidth alone
    (a reduce-scatter across H100 nodes, nccl#1229) whose 16 CTAs copy C = P·r·16 ≈ 263 GB/s
    beside a GEMM runs at C/B of its rate for as long as the GEMM runs beside it: beside one
    that outlasts it, it ends at alone × B/C (≈ 1.37×)."""
    nbytes, copy = (
        64 * 2**20,
        copy_rate_beside("H100-SXM5-80GB", nccl_ctas("H100-SXM5-80GB", "nccl_ring_internode")),
    )
    bw = 360e9  # two ranks: each moves its bus bytes over the one link
    comm = _alone(nbytes, kind, bw)
    busbw = _busbw(kind, nbytes, comm)
    assert busbw == pytest.approx(360e9, rel=1e-12)
    g_end, c_end, slowed = _pair(20 * comm, nbytes, 1.2, 0.6, [0, 1], copy, kind, bw)
    assert c_end == pytest.approx(comm * busbw / copy, rel=1e-9)
    assert c_end / comm == pytest.approx(1.37, abs=0.005)
    assert slowed[1] == pytest.approx(c_end - comm, rel=1e-9) and g_end > c_end
    # beside nothing, with the slowdown off, or in one NVLink domain (the curve's rate there): unchanged
    assert _pair(0.0, nbytes, 1.2, 0.6, [0, 1], copy, kind, bw)[1:] == (comm, {})
    assert _pair(20 * comm, nbytes, 1.0, 0.6, [0, 1], copy, kind, bw)[1:] == (comm, {})
    within = _pair(20 * comm, nbytes, 1.2, 0.6, [0, 0], copy, kind, bw)[1]
    assert within == pytest.approx(comm / 0.6, rel=1e-9)


@settings(max_examples=20, deadline=None)
@given(
    gemm=st.floats(1e-4, 5e-3),
    mib=st.integers(1, 64),
    slowdown=st.floats(1.05, 1.5),
    ratio=st.floats(0.3, 1.5),
)
def test_the_engine_runs_a_pair_across_nodes_as_pair_seconds(gemm, mib, slowdown, ratio):
    """Across NVLink domains the collective keeps min(1, C/B) of its rate while compute runs
    beside it (C: ``copy_across``, B: its bus bandwidth alone), its full rate after: the pair
    ends at :func:`pair_seconds` at that rate — and a collective whose CTAs copy faster than
    its link carries (C ≥ B) ends at its time alone."""
    nbytes = mib * 2**20
    comm = _alone(nbytes)
    copy = ratio * _busbw("all_reduce", nbytes, comm)
    rate = min(1.0, ratio)
    g_end, c_end, slowed = _pair(gemm, nbytes, slowdown, 0.6, [0, 1], copy)
    assert max(g_end, c_end) == pytest.approx(pair_seconds(gemm, gemm * slowdown, comm, rate), rel=1e-9)
    if rate == 1.0:
        # at C = B exactly the rate is 1 up to the rounding of C·seconds/B: a tail of ~1e-21 s
        assert c_end == pytest.approx(comm, rel=1e-12)
        assert all(s <= 1e-12 * comm for s in slowed.values())
    else:
        assert c_end > comm and slowed[1] == pytest.approx(c_end - comm, rel=1e-9)


def _measured_busbw(issue: str, collective: str, nodes: int) -> float:
    """Bus bytes/s of ``issue``'s ``collective`` across ``nodes`` nodes (the collective-level
    rows, ``data/nccl_collective_measurements.csv``): NVIDIA/nccl#1229's H100 reduce-scatter,
    #812's DGX A100 all-reduce."""
    import csv

    from clustersim.validation.collectives import MEASUREMENTS_CSV

    with MEASUREMENTS_CSV.open(newline="", encoding="utf-8") as f:
        (row,) = [
            r
            for r in csv.DictReader(f)
            if f"nccl issue #{issue}" in r["source"]
            and r["collective"] == collective
            and int(r["nodes"]) == nodes
        ]
    return float(row["busbw_GBps"]) * 1e9


def test_nic_bound_claim_holds_at_a_node_rings_ctas_not_at_the_ctas_across_nodes():
    """Why a collective across nodes is not slowed, as a closed form: a ring's n CTAs copy its
    bus bandwidth B; beside a GEMM they copy at most P(n/SMs)·r·n (``copy_rate_beside``: r the
    per-CTA rate alone), so the collective keeps its time alone iff B ≤ P·r·n, i.e. P ≥ P* =
    B/(r·n). Hopper, where r is known (H200's NCCL rows, r = 36.7 GB/s; H100's die, SMs,
    NVLink and NICs): a reduce-scatter across 4 H100 nodes moves B = 360 GB/s (nccl#1229).
    At an NVSwitch ring's 24 CTAs P = 0.55 ≥ P* = 0.41 (483 GB/s): the claim holds. At the 16
    channels NCCL builds across nodes (nccl#1453) P = 0.45 < P* = 0.61 (263 GB/s): it does not —
    such a ring runs at ≤ 0.73 of its rate alone beside a GEMM (the engine's rule across
    nodes, ``copy_rate_across``)."""
    gpu = "H200-SXM-141GB"
    sms, r = datasheets()[gpu].sms, sm_rate(gpu, "nccl", "all_reduce")
    busbw = _measured_busbw("1229", "reduce_scatter", nodes=4)
    node, across = nccl_ctas("H100-SXM5-80GB"), nccl_ctas("H100-SXM5-80GB", "nccl_ring_internode")
    for ctas, holds in ((node, True), (across, False)):
        p = beside_rate(gpu, ctas, sms)
        assert copy_rate_beside(gpu, ctas) == pytest.approx(p * r * ctas, rel=1e-12)
        assert (copy_rate_beside(gpu, ctas) >= busbw) is holds
        assert (p >= busbw / (r * ctas)) is holds  # the same, as the break-even P*
    # alone, the 16 CTAs copy faster than the ring's NICs carry: NIC-bound, as measured
    assert r * across > busbw
    # no per-CTA NCCL rate (RCCL on MI300X): no closed form there
    assert copy_rate_beside("MI300X-192GB", 24) == 0.0


def test_a100s_rule_across_nodes_from_its_own_rows():
    """A100's per-CTA rate is its own rows' (NCCL all-reduce on 4 A100 at 1 to 8 CTAs, SM
    clock at its 1410 MHz boost): r = 16.5 GB/s, the 1-CTA row within the rows' tolerance.
    A DGX A100 all-reduce across nodes moves B = 192 GB/s alone (nccl#812); its 16 CTAs
    (sjeaugey, nccl#689: 16 SMs on an 8-NIC DGX) copy r·16 = 265 GB/s alone — NIC-bound, as
    measured — and P(16/108)·r·16 = 131 GB/s beside a GEMM on A100's own NanoFlow curve:
    the ring keeps 0.68 of its rate while compute runs beside it."""
    gpu = "A100-SXM4-80GB"
    r, across = sm_rate(gpu, "nccl", "all_reduce"), nccl_ctas(gpu, "nccl_ring_internode")
    one_cta = next(b for n, b in sm_curves()[("A100", "nccl", "all_reduce")].rows if n == 1)
    assert r == pytest.approx(one_cta, rel=SM_TOLERANCE["nccl"])
    busbw = _measured_busbw("812", "all_reduce", nodes=2)
    assert r * across > busbw
    copy = copy_rate_beside(gpu, across)
    assert copy == pytest.approx(beside_rate(gpu, across, 108) * r * across, rel=1e-12)
    assert copy < busbw  # bound by what its CTAs copy beside compute


def test_the_summary_names_the_contended_rate():
    from clustersim.hardware.interference import interference_model

    rate = beside_rate("A100-SXM4-80GB", 24, 108)
    said = interference_model(108, 108 / 92, False, 24, 0, rate)
    assert f"collectives within a node at {rate:.2f} of their rate" in said
    assert "within a node" not in interference_model(108, 108 / 92, False, 24)


def test_the_h100_pair_total_is_closer_with_the_collective_slowed():
    """pytorch/pytorch#172714's 8 × H100 8192³ fp16 GEMM beside a NCCL all-gather: 2.02 ms
    overlapped. Priced with the collective slowed by the GEMM (A100's curve transferred) the
    pair is within 10 %; at its rate alone it is 15 % short."""
    from clustersim.validation.comm_pairs import TOLERANCE, pair_checks

    (c,) = pair_checks()
    measured = float(c.row["overlapped_ms"]) * 1e-3
    assert c.overlapped == pytest.approx(measured, rel=TOLERANCE)
    assert abs(c.unslowed / measured - 1) > abs(c.overlapped / measured - 1)
    assert c.overlapped < c.sequential


def _tp_job(gpus: str | None = None) -> dict:
    """GPT 1.3B (4 layers) TP 8 + SP on one H100 node under megatron_core: its TP collectives
    run within the node, beside compute."""
    job = {
        "model": {"preset": "gpt-1.3b", "seq_len": 2048, "layers": 4},
        "training": {"global_batch": 8, "micro_batch": 1, "precision": "bf16", "framework": "megatron_core"},
        "parallel": {"tp": 8, "sequence_parallel": True, "tp_comm_overlap": False},
    }
    return job if gpus is None else {**job, "placement": {"gpus": gpus}}


def test_every_job_of_a_multi_job_run_has_its_collectives_slowed():
    """Two TP-8 jobs on nodes of their own share nothing: each runs as it runs alone — the
    second job's collectives slowed beside compute too (they once were only on the first
    job's GPUs)."""
    cluster = {
        "nodes": 2,
        "gpus_per_node": 8,
        "gpu": "H100-SXM5-80GB",
        "intra_node": {"kind": "nvswitch", "bandwidth": "450 GB/s", "latency": "2 us"},
        "nic": {"per_node": 1, "bandwidth": "400 Gbps", "latency": "2 us"},
    }
    sim = {"iterations": 1, "network": "flow"}
    jobs = [{"name": "a", **_tp_job("0-7")}, {"name": "b", **_tp_job("8-15")}]
    both = cs.simulate(cs.load_scenario({"name": "two", "cluster": cluster, "simulation": sim, "jobs": jobs}))
    alone = cs.simulate(
        cs.load_scenario({"name": "one", "cluster": {**cluster, "nodes": 1}, "simulation": sim, **_tp_job()})
    )
    assert alone.summary["interference_comm_s"] > 0
    for name in ("a", "b"):
        assert both.jobs[name].summary["iteration_time_s"] == pytest.approx(
            alone.summary["iteration_time_s"], rel=1e-12
        )


@pytest.mark.parametrize("framework", ["megatron_core", "fsdp2", "megatron_2021"])
def test_the_rule_across_nodes_is_on_where_the_profiles_interference_is_and_names_itself(framework):
    """Across nodes the collective is slowed only where the profile's default interference
    is on and NCCL's per-CTA rate is sourced (A100's and H200's rows; H100 and H800 take
    H200's, B200 H200's by NCCL's per-channel constants): there at the 16 CTAs of a ring
    across nodes; B300 (no channel count across nodes, no per-CTA rate) keeps its
    collectives across nodes at their rate alone, and ``comm_compute_slowdown: 1`` turns it
    off. The summary's ``interference_model`` says which applies."""
    from clustersim.hardware.interference import interference_model, nccl_ctas_for
    from clustersim.trace.assemble import _interference_model

    def cluster(gpu: str, **extra) -> cs.Scenario:
        cl = {"nodes": 2, "gpus_per_node": 8, "gpu": gpu, **extra}
        return cs.load_scenario(
            {
                "name": "x",
                "cluster": cl,
                "model": {"preset": "gpt-1.3b"},
                "training": {"global_batch": 16, "micro_batch": 1, "framework": framework},
            }
        )

    on = framework != "megatron_2021"
    for gpu in ("A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB", "H800-SXM5-80GB", "B200-SXM-180GB"):
        sc = cluster(gpu)
        want = copy_rate_beside(gpu, 16) if on else 0.0
        assert copy_rate_across(sc.cluster) == want and (want > 0) is on
        assert copy_rate_across(cluster(gpu, comm_compute_slowdown=1).cluster) == 0.0
        if on:
            said = _interference_model(sc)["interference_model"]
            assert f"collectives across nodes at most {want / 1e9:.0f} GB/s" in said
    for gpu in ("B300-SXM-288GB",):
        sc = cluster(gpu)
        assert copy_rate_across(sc.cluster) == 0.0
        if on:
            assert nccl_ctas_for(sc.cluster, gpu)
            assert "collectives across nodes not slowed" in _interference_model(sc)["interference_model"]
    # a run without the per-kernel pricing says nothing of it
    assert "across nodes" not in interference_model(108, 108 / 92, False)
