"""parallel.tp_comm_overlap: TP collectives pipelined with their GEMMs (Transformer Engine
userbuffers), against the chunk pipeline's closed forms on a small transformer (analytical
collectives on a direct network, one micro-batch, float precision). The plain collectives
are NCCL ring collectives; the userbuffers chunks are transfers between TP neighbours at
the link's bandwidth (latency 0 here)."""

import pytest

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.workload.sp_regather import NAME as REGATHER
from clustersim.workload.stage_cost import chunk_costs
from clustersim.workload.tp_overlap import BULK, PIPELINE, RING

TP, ALPHA = 4, 1e-6


def raw(overlap: bool, *, bandwidth: float, tp: int = TP, sp: bool = True, splits: int | None = None) -> dict:
    # b·s·h·2 bytes = 1·768·4096·2, divisible by tp − 1 = 3 and by 4 splits: no rounding of chunk bytes
    parallel = {"tp": tp, "pp": 1, "dp": 1, "sequence_parallel": sp, "tp_comm_overlap": overlap}
    if splits:
        parallel["tp_comm_overlap_num_splits"] = splits
    return {
        "cluster": {
            "nodes": 1,
            "gpus_per_node": tp,
            "gpu": "A100-SXM4-80GB",
            "intra_node": {"bandwidth": bandwidth, "latency": 0.0},
            "collective_alpha": {"intra_node": ALPHA, "inter_node": ALPHA},
        },
        "model": {
            "kind": "transformer",
            "layers": 2,
            "hidden": 4096,
            "heads": 32,
            "vocab": 1024,
            "seq_len": 768,
        },
        # the overlap's closed forms, without the host's issue race (tests/test_host.py)
        "training": {"global_batch": 1, "micro_batch": 1, "fixed_costs": {"host_dispatch": 0}},
        "parallel": parallel,
        "simulation": {
            "network": "direct",
            "collective_model": "analytical",
            "collectives": {"all_gather": "ring", "reduce_scatter": "ring"},
        },
    }


def ring_time(nbytes: float, bw: float, n: int = TP) -> float:
    """A ring all-gather or reduce-scatter of ``nbytes`` over n ranks of one node."""
    return (n - 1) * (ALPHA + nbytes / (n * bw))


def hidden(seg, bw: float, n: int = TP) -> float:
    """What overlapping ``seg`` saves against its plain collective followed by its GEMM:
    plain = chunks·g + ring(S); overlapped as the chunk pipeline's closed form
    (clustersim.compilers.pipeline.tp_overlap)."""
    k, S = seg.chunks, seg.nbytes
    g, plain = seg.duration / k, seg.duration + ring_time(S, bw, n)
    if seg.method == RING:  # n − 1 ring steps, each passing one S/n shard to the next rank
        return plain - (g + (n - 1) * max(g, step_time(seg, bw, n)))
    c = step_time(seg, bw, n)
    if seg.method == PIPELINE:  # k reduce-scatters of S/k after each GEMM chunk
        return plain - (g + (k - 1) * max(g, c) + c)
    return plain - max(seg.duration, c)  # bulk


def step_time(seg, bw: float, n: int = TP) -> float:
    """One userbuffers transfer of ``seg``: a ring step moves S/n; a reduce-scatter chunk of
    S/k bytes moves its (n − 1)/n to the neighbour."""
    if seg.method == RING:
        return (seg.nbytes // n) / bw
    return (seg.nbytes // seg.chunks * (n - 1) // n) / bw


def end(res) -> float:
    return float(res.spans["end_s"].max())


def overlap_segments(scenario) -> list:
    cost = chunk_costs(cs.load_scenario(scenario), 1)[0]
    return [s for ph in ("F", "B") for s in cost.segments(ph) if s.kind == "overlap"]


@pytest.mark.parametrize("bandwidth", [2e11, 2e9])
def test_iteration_is_the_plain_one_less_what_each_chunk_pipeline_hides(bandwidth):
    segs = overlap_segments(raw(True, bandwidth=bandwidth))
    on, off = (end(cs.simulate(raw(ov, bandwidth=bandwidth), progress=False)) for ov in (True, False))
    # the SP backward's re-gather runs beside the dgrad GEMM either way: NCCL's ring all-gather
    # without overlap, userbuffers' bulk transfer with (clustersim.workload.sp_regather)
    saved = sum(
        max(s.duration, ring_time(s.nbytes, bandwidth)) - max(s.duration, step_time(s, bandwidth))
        if s.name == REGATHER
        else hidden(s, bandwidth)
        for s in segs
    )
    assert saved > 0
    assert on == pytest.approx(off - saved, rel=1e-12, abs=1e-15)


def test_the_two_bandwidths_cover_both_regimes():
    """At 200 GB/s a ring step is shorter than its GEMM chunk (the GEMM hides it), at 2 GB/s
    longer (the GEMM is hidden): the closed-form test above takes both branches of max."""
    ring = [s for s in overlap_segments(raw(True, bandwidth=2e11)) if s.method == RING][0]
    for bw, faster in ((2e11, True), (2e9, False)):
        assert (step_time(ring, bw) < ring.duration / TP) is faster


def test_each_ring_step_hides_min_comm_gemm():
    """Per chunk, from the spans: the all-gather before QKV runs as tp − 1 ring steps, GEMM
    chunk k starting when chunk k−1 and step k have ended."""
    res = cs.simulate(raw(True, bandwidth=2e9), progress=False)
    s = res.spans[(res.spans.device == "gpu0") & (res.spans.phase == "F")].sort_values("start_s")
    steps = s[s.name.str.startswith("tp recv tp all-gather ")].iloc[: TP - 1]
    c = (steps.end_s - steps.start_s).to_numpy()
    gemm = s[(s.lane == "compute") & (s.start_s >= steps.start_s.iloc[0] - 1e-15)].iloc[:TP]
    g = (gemm.end_s - gemm.start_s).to_numpy()
    t0 = steps.start_s.iloc[0]
    expected = g[0] + sum(max(gk, ck) for gk, ck in zip(g[1:], c))
    assert gemm.end_s.iloc[-1] - t0 == pytest.approx(expected, rel=1e-12)
    assert c[0] > g[1]  # communication-bound here: each step exposes c − g


def test_te_default_methods_per_gemm():
    """TE's initialize_ub table: ring exchange before QKV/FC1 (fprop) and before the
    projection/FC2 dgrad, pipeline after the projection/FC2 (fprop, 4 splits), bulk for the
    QKV/FC1 wgrad's reduce-scatter and their dgrad's all-gather of the SP input; per layer,
    forward and backward."""
    cost = chunk_costs(cs.load_scenario(raw(True, bandwidth=2e11, splits=3)), 1)[0]
    per_layer = {
        ph: [(s.method, s.collective, s.chunks) for s in cost.segments(ph) if s.kind == "overlap"]
        for ph in ("F", "B")
    }
    assert per_layer["F"] == [(RING, "all_gather", TP), (PIPELINE, "reduce_scatter", 3)] * 4
    assert (
        per_layer["B"]
        == [
            (RING, "all_gather", TP),
            (BULK, "all_gather", 1),
            (BULK, "reduce_scatter", 1),
        ]
        * 4
    )


def test_off_by_default_and_gemm_work_is_kept():
    """Off: no overlap segment; on: the same compute seconds and FLOPs per pass."""
    a = chunk_costs(cs.load_scenario(raw(False, bandwidth=2e11)), 1)[0]
    b = chunk_costs(cs.load_scenario(raw(True, bandwidth=2e11)), 1)[0]
    assert not [s for s in a.segments("F") if s.kind == "overlap"]
    assert b.forward == pytest.approx(a.forward, rel=1e-12)
    assert b.backward == pytest.approx(a.backward, rel=1e-12)
    assert b.forward_flops == pytest.approx(a.forward_flops, rel=1e-12)


@pytest.mark.parametrize(
    "change",
    [{"sp": False}, {"tp": 1, "sp": True}],
)
def test_refused_without_sequence_parallelism(change):
    with pytest.raises(ScenarioError, match="parallel.tp_comm_overlap.*sequence_parallel"):
        cs.load_scenario(raw(True, bandwidth=2e11, **change))


def test_refused_at_stage_granularity():
    sc = raw(True, bandwidth=2e11)
    sc["simulation"]["granularity"] = "stage"
    with pytest.raises(ScenarioError, match="granularity"):
        cs.load_scenario(sc)


def test_sm_margin_is_shown_as_interference_beside_pipeline_and_bulk_only():
    """With cluster.comm_compute_slowdown k ≠ 1, TE's SM margin (pipeline and bulk GEMMs on
    SMs − 16; ring exchange on copy engines keeps every SM): each pipeline/bulk GEMM chunk of
    g s is followed by an interference op of (f − 1)·g, f the GEMM's slowdown on SMs − 16
    (clustersim.workload.gemm_interference, checked in tests/test_gemm_interference.py),
    none after a ring chunk; the summary's interference_fraction and interference_tp_s are
    their time over the iteration and in seconds."""
    k, bw = 1.5, 2e11
    sc = raw(True, bandwidth=bw)
    sc["cluster"]["comm_compute_slowdown"] = k
    segs = overlap_segments(sc)
    res = cs.simulate(sc, progress=False)
    s = res.spans[res.spans.device == "gpu0"]
    extra = s[s.name.str.endswith(" interference")]
    margined = [seg for seg in segs if seg.method != RING]
    assert all(seg.margin > 0 for seg in margined) and not [
        seg for seg in segs if seg.method == RING and seg.margin
    ]
    expected = sorted(seg.margin / seg.chunks for seg in margined for _ in range(seg.chunks))
    assert sorted((extra.end_s - extra.start_s).to_numpy()) == pytest.approx(expected, rel=1e-9)
    share = sum(expected) / res.summary["iteration_time_s"]
    assert res.summary["interference_fraction"] == pytest.approx(share, rel=1e-9)
    assert res.summary["interference_tp_s"] == pytest.approx(sum(expected), rel=1e-9)
    assert "interference_fraction" not in cs.simulate(raw(True, bandwidth=bw), progress=False).summary


def test_dag_evaluator_and_simpy_engine_agree_on_the_chunk_ops():
    sc = raw(True, bandwidth=2e9)
    spans = {}
    for evaluator in ("dag", "des"):
        sc["simulation"]["evaluator"] = evaluator
        spans[evaluator] = cs.simulate(sc, progress=False).spans
    assert spans["dag"][["start_s", "end_s"]].equals(spans["des"][["start_s", "end_s"]])
