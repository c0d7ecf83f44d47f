"""Expert parallelism under DualPipe / DualPipe-V: one chunk's MoE all-to-alls hidden behind
the other chunk's compute inside an overlapped F&B pair (closed form), the mirrored stages'
expert gradients summed (group and bytes), both chunks' experts held per GPU, folding exact.

A synthetic MoE layer on one NVSwitch node (8 GPUs, the analytical network, the direct
all-to-all: each all-to-all takes X = α + (ep − 1)/ep · S/B, tests/test_expert_parallel.py),
fixed costs off so that a pass is its layer's kernels only.
"""

from __future__ import annotations

import pytest

import clustersim as cs
from clustersim.hardware.presets import DEFAULT_ALPHA
from clustersim.resolve import resolve
from clustersim.workload.resolve import resolve_transformer

BW, LAT = 100e9, 1e-6
MOE = {"layers": 2, "hidden": 1024, "heads": 8, "vocab": 1024, "seq_len": 512, "bias": False}
MOE |= {"experts": 8, "experts_per_token": 2, "moe_ffn_hidden": 2048}
S = 512 * 2 * 1024 * 2  # each rank's dispatch buffer: tokens × top-k × hidden × 2 B


def _raw(bw=BW, ep=4, schedule="dualpipe", pp=2, m=4, layers=2, fold=False) -> dict:
    return {
        "cluster": {
            "nodes": 1,
            "gpus_per_node": 8,
            "gpu": "H100-SXM5-80GB",
            "topology": {"kind": "single_node"},
            "intra_node": {"kind": "nvswitch", "bandwidth": bw, "latency": LAT, "efficiency": 1.0},
        },
        "model": {**MOE, "layers": layers},
        "training": {
            "global_batch": m * 8 // pp,
            "micro_batch": 1,
            "fixed_costs": {"kernel_launch": 0, "microbatch_overhead": 0, "host_dispatch": 0},
        },
        "parallel": {"ep": ep, "pp": pp, "schedule": schedule},
        "simulation": {"network": "analytical", "collectives": {"all_to_all": "direct"}, "fold": fold},
    }


def _stretches(cost, phase) -> list[float]:
    """Compute seconds of a pass between its all-to-alls (its segments cut at each collective)."""
    out = [0.0]
    for seg in cost.segments(phase):
        if seg.kind == "collective":
            out.append(0.0)
        else:
            out[-1] += seg.duration
    return out


@pytest.mark.parametrize("bw", [1e12, BW, 10e9])
def test_pair_hides_each_all_to_all_behind_the_other_chunks_next_stretch(bw):
    """DualPipe, pp 2, m 4: stage 0's one overlapped pair is F of micro-batch 3 on chunk 3
    (attention A | dispatch | experts E | combine | P) with B of micro-batch 0 on chunk 0
    (unpermute U | combine | experts E_B | dispatch | attention A_B). The backward has less
    compute before its first all-to-all (U < A), so it leads and the stretches alternate
    U, A, E_B, E, A_B, P (DeepSeek-V3 Figure 4: ATTN(F) beside COMBINE(B), MLP(B) beside
    DISPATCH(F), MLP(F) beside DISPATCH(B), ATTN(B) beside COMBINE(F)). Each all-to-all
    starts with the stretch after its producer on one FIFO ep stream, so the pair takes
    U + Σ max(X, C) + P over the four hiding stretches C: exposed = Σ max(0, X − C) —
    nothing when X is shorter than them (1 TB/s), the short experts' stretch only (100 GB/s),
    4X − ΣC when the all-to-alls dominate (10 GB/s)."""
    sc = cs.load_scenario(_raw(bw))
    costs = resolve(sc).chunk_costs
    a, e, p = _stretches(costs[3], "F")
    u, e_b, a_b = _stretches(costs[0], "B")
    assert u < a  # the backward leads
    x = DEFAULT_ALPHA["nvlink"] + LAT + 3 / 4 * S / bw
    hiding = [a, e_b, e, a_b]
    span = u + sum(max(x, c) for c in hiding) + p
    s = cs.simulate(sc, progress=False).spans
    d = s[(s.device == "gpu0") & s.lane.isin(["compute", "ep"])]
    pair = d[((d.phase == "F") & (d.microbatch == 3)) | ((d.phase == "B") & (d.microbatch == 0))]
    ep = pair[pair.lane == "ep"].sort_values("start_s")
    assert list(ep.phase) == ["B", "F", "B", "F"]  # combine(B), dispatch(F), dispatch(B), combine(F)
    for t in ep.end_s - ep.start_s:
        assert t == pytest.approx(x, rel=1e-12)
    compute = pair[pair.lane == "compute"]
    busy = float((compute.end_s - compute.start_s).sum())
    assert busy == pytest.approx(u + a + e_b + e + a_b + p, rel=1e-12)
    measured = float(pair.end_s.max() - pair.start_s.min())
    assert measured == pytest.approx(span, rel=1e-12)
    exposed = sum(max(0.0, x - c) for c in hiding)
    assert measured - busy == pytest.approx(exposed, rel=1e-9, abs=1e-15)
    if bw == 1e12:
        assert exposed == 0.0
    if bw == 10e9:
        assert exposed == pytest.approx(4 * x - sum(hiding), rel=1e-12)


def test_mirrored_stages_sum_both_chunks_expert_gradients():
    """pp 2, dp 4, ep 2 (edp 2): stage 0 holds chunks 0 and 3 (= model chunk 1's second copy),
    stage 1 chunks 1 and 2; the expert gradients of GPU 0 are summed with its expert-DP
    partner (2) and their twins on the mirrored stage (4, 6) — 4 B/param of its E/ep = 4
    experts of both chunks' layers — after the dense all-reduce over the same stages."""
    sc = cs.load_scenario(_raw(ep=2))
    cfg = resolve_transformer(sc.model)
    costs = resolve(sc).chunk_costs
    per_chunk = int(4 * 4 * cfg.mlp_params(cfg.expert_ffn))  # one layer per chunk
    assert costs[0].expert_grad_bytes == costs[3].expert_grad_bytes == per_chunk
    prog = cs.compile_scenario(sc, fold=False)
    experts = [op for op in prog.ops if op.name.endswith("experts")]
    assert len(experts) == 8  # one per GPU
    assert {op.device: op.group for op in experts} == {
        d: (0, 2, 4, 6) if d % 2 == 0 else (1, 3, 5, 7) for d in range(8)
    }
    assert all(op.nbytes == 2 * per_chunk for op in experts)
    dense = {op.device: op for op in prog.ops if op.name == f"dp all-reduce s{op.stage}"}
    assert dense[0].group == (0, 1, 2, 3, 4, 5, 6, 7)  # dp 4 of stage 0 and of stage 1
    assert dense[0].nbytes == costs[0].gradient_bytes + costs[3].gradient_bytes
    res = cs.simulate(sc, progress=False)
    s = res.spans[res.spans.device == "gpu0"]
    assert (
        s[s.name.str.endswith("experts")].start_s.values >= s[s.name == "dp all-reduce s0"].end_s.max()
    ).all()


@pytest.mark.parametrize("schedule", ["dualpipe", "dualpipe_v"])
def test_each_gpu_holds_both_chunks_experts_at_one_over_ep(schedule):
    """Weights per GPU = both of its chunks' (DualPipe: the two copies' chunks; DualPipe-V:
    chunks s and 2p − 1 − s); the experts of each at E/ep: going from ep 1 to ep 4 saves
    2 B × (E − E/4) × the expert's parameters for each of the GPU's layers (2 chunks × 1)."""
    cfg = resolve_transformer(cs.load_scenario(_raw()).model)
    layers = 2 if schedule == "dualpipe" else 4  # one layer per chunk either way
    weights = {
        ep: cs.compile_scenario(cs.load_scenario(_raw(ep=ep, schedule=schedule, layers=layers)), fold=False)
        .static_memory[0]
        .weights
        for ep in (1, 4)
    }
    assert weights[1] - weights[4] == int(2 * 2 * (8 - 2) * cfg.mlp_params(cfg.expert_ffn))


@pytest.mark.parametrize("schedule,pp,m", [("dualpipe", 2, 4), ("dualpipe", 4, 8), ("dualpipe_v", 2, 4)])
def test_folding_expert_parallel_dualpipe_is_exact(schedule, pp, m):
    """Two DGX-H100 nodes on the flow network, EP 16/pp ∧ 8 (pp 2: one node per expert
    group, edp 2): the folded run (one GPU per stage; the mirrored expert all-reduce meets two
    stages' representatives) equals the unfolded one to the last bit."""

    def run(fold):
        layers = pp if schedule == "dualpipe" else 2 * pp
        raw = _raw(ep=min(8, 16 // pp), schedule=schedule, pp=pp, m=m, layers=layers, fold=fold)
        raw["cluster"] = {"preset": "dgx_h100", "nodes": 2}
        raw["training"]["global_batch"] = m * 16 // pp
        raw["simulation"]["network"] = "flow"
        return cs.simulate(raw, progress=False).summary

    folded, plain = run(True), run(False)
    assert folded["folded"].startswith("yes")
    assert folded["iteration_time_s"] == plain["iteration_time_s"]
    assert folded["peak_memory_gib"] == plain["peak_memory_gib"]


@pytest.mark.parametrize(
    "schedule,pp,m,ep",
    [
        ("dualpipe", 2, 4, 2),
        ("dualpipe", 2, 6, 4),
        ("dualpipe", 4, 8, 2),
        ("dualpipe", 4, 10, 2),
        ("dualpipe_v", 2, 5, 4),
        ("dualpipe_v", 4, 8, 2),
    ],
)
def test_expert_parallel_pairs_compile_acyclic_and_run(schedule, pp, m, ep):
    """Every rank of an expert group issues the same pairs in the same order (the leading
    chunk is chosen from the slowest rank's durations), so the program has no cycle through
    deps and lane order, and every all-to-all of every pass runs: 4 per layer and
    micro-batch on each GPU (dispatch and combine, forward and backward)."""
    layers = pp if schedule == "dualpipe" else 2 * pp
    raw = _raw(ep=ep, schedule=schedule, pp=pp, m=m, layers=layers)
    raw["model"] |= {"expert_load": "skew", "expert_skew": 1.0, "expert_seed": 3}  # ranks differ
    sc = cs.load_scenario(raw)
    prog = cs.compile_scenario(sc, fold=False)
    prog.check()
    res = cs.simulate(sc, progress=False)
    ep_spans = res.spans[res.spans.lane == "ep"]
    assert len(ep_spans) == 8 * 4 * m * (layers // pp)  # each GPU: its stage's layers, every micro-batch
