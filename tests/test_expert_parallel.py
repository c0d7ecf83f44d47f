"""Expert parallelism: Megatron-Core's groups, token dispatch/combine on the fabric against
the α-β closed form, the slowest expert rank setting the layer time, memory sharded by EP,
and the load-time rules."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import simpy

import clustersim as cs
from clustersim.collectives import estimate_time
from clustersim.collectives.group import Group
from clustersim.collectives.protocol import resolve_protocols
from clustersim.engine.network_setup import build_network
from clustersim.errors import ScenarioError
from clustersim.hardware.presets import DEFAULT_ALPHA
from clustersim.parallel.plan import Plan
from clustersim.planner import run_chunk_costs
from clustersim.record import Recorder
from clustersim.resolve import resolve
from clustersim.workload.cost_model import CostModel
from clustersim.workload.hf_config import load_hf_config
from clustersim.workload.moe import expert_ops, expert_tokens
from clustersim.workload.moe_dispatch import ExpertSplit, rank_tokens
from clustersim.workload.resolve import resolve_transformer
from clustersim.workload.stage_builder import TrainSetup

BW, LAT = 100e9, 1e-6  # the synthetic node's NVSwitch: bytes/s per GPU, latency per hop
MOE = {"layers": 1, "hidden": 1024, "heads": 8, "vocab": 1024, "seq_len": 512, "bias": False}
MOE |= {"experts": 8, "experts_per_token": 2, "moe_ffn_hidden": 2048}


def _node(gpus: int = 8) -> dict:
    return {
        "nodes": 1,
        "gpus_per_node": gpus,
        "gpu": "H100-SXM5-80GB",
        "topology": {"kind": "single_node"},
        "intra_node": {"kind": "nvswitch", "bandwidth": BW, "latency": LAT, "efficiency": 1.0},
    }


def _scenario(model=None, parallel=None, network="analytical", **training):
    return cs.load_scenario(
        {
            "cluster": _node(),
            "model": {**MOE, **(model or {})},
            "training": {"global_batch": 8, "micro_batch": 1, **training},
            "parallel": {"ep": 8, **(parallel or {})},
            "simulation": {"network": network, "collectives": {"all_to_all": "direct"}},
        }
    )


def test_expert_groups_follow_megatron_core_order():
    """tp-ep-dp-pp over each stage's tp × dp GPUs (parallel_state.py's expert RankGenerator)."""
    plan = Plan(tp=2, pp=2, dp=8, gpus_per_node=8, ep=4)  # etp = tp: EP carved out of DP
    assert plan.edp == 2
    assert plan.expert_group(0, "ep") == (0, 2, 4, 6)
    assert plan.expert_group(3, "ep") == (1, 3, 5, 7)
    assert plan.expert_group(0, "etp") == (0, 1)  # = the TP group
    assert plan.expert_group(0, "edp") == (0, 8)
    assert plan.expert_group(16, "ep") == (16, 18, 20, 22)  # stage 1
    folded = Plan(tp=2, pp=1, dp=8, gpus_per_node=8, ep=8, etp=1)  # parallel folding: ETP 1, EP 8
    assert folded.expert_group(0, "ep") == tuple(range(8))
    assert folded.expert_group(9, "ep") == tuple(range(8, 16))
    assert folded.expert_group(0, "edp") == (0, 8)
    assert folded.expert_group(5, "tp_ep") == tuple(range(8))
    assert [folded.expert_rank(d) for d in range(10)] == [0, 1, 2, 3, 4, 5, 6, 7, 0, 1]


def test_expert_groups_fold_context_parallel_ranks_into_expert_data_parallel():
    """With CP the dense order is tp-cp-dp-pp and the expert RankGenerator (cp = 1) reads the
    stage's tp × cp × dp GPUs as etp-ep-edp (parallel_state.py): EP spans CP and DP ranks."""
    plan = Plan(tp=2, pp=2, dp=2, gpus_per_node=8, cp=2, ep=2)
    assert plan.edp == 2  # tp·cp·dp / (etp·ep) = 8 / 4
    assert plan.cp_ring(0, 0, 0) == (0, 2)  # the dense CP group of device 0
    assert plan.expert_group(0, "ep") == (0, 2)  # the same devices: EP over its CP ranks
    assert plan.expert_group(0, "edp") == (0, 4)  # = its DP group
    assert plan.expert_group(9, "ep") == (9, 11)  # stage 1 starts at tp·cp·dp = 8
    assert Plan(tp=1, pp=1, dp=2, gpus_per_node=8, cp=2, ep=4).expert_group(1, "ep") == (0, 1, 2, 3)


@pytest.mark.parametrize("network", ["analytical", "flow"])
def test_dispatch_and_combine_equal_the_direct_all_to_all_closed_form(network):
    """Each rank's send buffer S = T·k·h·e; direct all-to-all on an idle NVSwitch node:
    T = α + (n − 1)/n · S/B, α = NCCL's NVLink step latency + the path's (one hop)."""
    res = cs.simulate(_scenario(network=network))
    spans = res.spans[res.spans.name.isin(("ep dispatch", "ep combine"))]
    S = 512 * 2 * 1024 * 2
    expected = DEFAULT_ALPHA["nvlink"] + LAT + 7 / 8 * S / BW
    assert set(spans.name) == {"ep dispatch", "ep combine"}
    assert len(spans) == 8 * 4  # dispatch + combine, forward and backward, on every GPU
    assert (spans.bytes == S).all()
    for t in spans.end_s - spans.start_s:
        assert t == pytest.approx(expected, rel=1e-12)


def test_all_to_all_across_nodes_equals_its_alpha_beta_form():
    """EP 16 over two DGX-H100 nodes: each all-to-all takes the direct algorithm's α-β time
    for the group's shape, max(α + 7/16·S/B_nvlink, α_net + 8/16·S/B_net), under the NCCL
    protocol of least time (its latency + that form on its wire bytes S/efficiency)."""
    sc = cs.load_scenario(
        {
            "cluster": {"preset": "dgx_h100", "nodes": 2},
            "model": {**MOE, "experts": 16},
            "training": {"global_batch": 16, "micro_batch": 1},
            "parallel": {"ep": 16},
            "simulation": {"network": "analytical", "collectives": {"all_to_all": "direct"}},
        }
    )
    res = cs.simulate(sc)
    spans = res.spans[res.spans.name.isin(("ep dispatch", "ep combine"))]
    S = 512 * 2 * 1024 * 2
    env = simpy.Environment()
    group = Group(env, build_network(resolve(sc), env, Recorder()), [f"gpu{i}" for i in range(16)])
    shape = group.shape()

    def direct(w):
        return max(shape.alpha + 7 / 16 * w / shape.bw, shape.alpha_inter + 8 / 16 * w / shape.bw_inter)

    assert direct(S) == pytest.approx(estimate_time("all_to_all", "direct", shape, S), rel=1e-15)
    protocols = resolve_protocols(sc.cluster.collective_protocols)
    # the wire bytes go out as 16 whole-byte shards, the largest rounded up
    expected = min(p.latency + direct(16 * math.ceil(p.wire_bytes(S) / 16)) for p in protocols)
    assert len(spans) == 16 * 4
    for t in spans.end_s - spans.start_s:
        assert t == pytest.approx(expected, rel=1e-12)


def _expert_time(cfg, counts, cm) -> float:
    """Forward time of one rank's experts at ``counts`` tokens, priced op by op."""
    return sum(cm.time(op.fwd, op.name, "F") for op in expert_ops(cfg, counts, 1, 2))


def test_seeded_skew_makes_the_slowest_expert_rank_set_the_layer_time():
    """With a seeded Zipf skew each EP rank runs its own experts' tokens; the combine
    rendezvous waits for the slowest: every rank's combine starts max_i t_i after the
    dispatch ended (t_i: rank i's experts, from the load model and the cost model)."""
    sc = _scenario({"expert_load": "skew", "expert_skew": 1.2, "expert_seed": 7})
    cfg = resolve_transformer(sc.model)
    cm = CostModel.for_gpu("H100-SXM5-80GB").without_launch()  # launches: the pass's own op (fixed_costs)
    counts = expert_tokens(8 * 512, 8, 2, "skew", skew=1.2, seed=7)  # pool: 8 ranks × 512 tokens
    times = [_expert_time(cfg, counts[i : i + 1], cm) for i in range(8)]
    assert rank_tokens(cfg, ExpertSplit(ep=8), 8 * 512) == counts
    assert max(times) > 1.5 * min(times)  # the skew is real
    res = cs.simulate(sc)
    s = res.spans
    fwd = s[(s.phase == "F") & (s.microbatch == 0)]
    dispatch_end = fwd[fwd.name == "ep dispatch"].end_s.max()
    combine = fwd[fwd.name == "ep combine"]
    for start in combine.start_s:
        assert start - dispatch_end == pytest.approx(max(times), rel=1e-9)
    experts = fwd[
        (fwd.lane == "compute") & (fwd.start_s >= dispatch_end) & (fwd.end_s <= combine.start_s.min())
    ]
    own = dict(zip(experts.device, experts.end_s - experts.start_s))
    for d in range(8):
        assert own[f"gpu{d}"] == pytest.approx(times[d], rel=1e-9)


def test_shared_expert_overlaps_the_all_to_alls():
    """``moe_shared_expert_overlap``: the shared expert's up projection starts with the
    dispatch (not after it) and its down projection with the combine."""
    model = {"shared_ffn_hidden": 4096}
    plain = cs.simulate(_scenario(model))
    over = cs.simulate(_scenario(model, {"moe_shared_expert_overlap": True}))

    def f0(res):
        s = res.spans
        return s[(s.phase == "F") & (s.microbatch == 0) & (s.device == "gpu0")]

    a = f0(over)
    for name in ("ep dispatch", "ep combine"):
        coll = a[a.name == name].iloc[0]
        beside = a[(a.lane == "compute") & (a.start_s == coll.start_s)]
        assert len(beside) == 1  # a compute op starts with the collective
    assert f0(over).end_s.max() < f0(plain).end_s.max()


def test_alltoall_dispatcher_gathers_the_split_sizes_before_each_forward_dispatch():
    """Megatron-Core's alltoall dispatcher all-gathers every rank's int64 tokens per expert
    over the ETP × EP group in ``preprocess`` (token_dispatcher.py,
    ``gather_from_sequence_parallel_region(num_local_tokens_per_expert, group=self.tp_ep_group)``):
    one per MoE layer's forward on every GPU, E·8 bytes a rank, finished before the
    dispatch starts, none backward (integer counts carry no gradient); none under the
    allgather dispatcher, nor where the host never waits for the split sizes (not
    Megatron-Core's dropless dispatcher: ``moe_host_sync`` off)."""
    sync = {"moe_host_sync": True}
    s = cs.simulate(_scenario(parallel=sync)).spans
    gather = s[s.name == "ep split-size all-gather"]
    assert len(gather) == 8 and set(gather.phase) == {"F"}  # 1 layer, 1 micro-batch, 8 GPUs
    assert (gather.bytes == 8 * 8 * 8).all()  # ep ranks × E counts × 8 B (output)
    for dev, g in gather.groupby("device"):
        dispatch = s[(s.device == dev) & (s.name == "ep dispatch") & (s.phase == "F")]
        assert g.end_s.max() <= dispatch.start_s.min()
    for parallel in ({"moe_token_dispatcher": "allgather", **sync}, {}):
        other = cs.simulate(_scenario(parallel=parallel)).spans
        assert not (other.name == "ep split-size all-gather").any()


def test_allgather_dispatcher_gathers_the_pool_over_the_tp_ep_group():
    """``allgather``: all-gather of the T_loc·h hidden states over ETP × EP (output: the
    pool of 8 ranks × 512 tokens × h), reduce-scatter back; no all-to-all."""
    res = cs.simulate(_scenario(parallel={"moe_token_dispatcher": "allgather"}))
    ep = res.spans[res.spans.lane == "ep"]
    assert set(ep.name) == {"ep all-gather", "ep reduce-scatter"}
    assert (ep.bytes == 8 * 512 * 1024 * 2).all()


def test_expert_state_is_sharded_by_ep_and_expert_dp():
    """Mixtral-8x7B, TP 1, EP 8 on 16 GPUs, distributed optimizer (ZeRO 1): weights = dense
    + 1/8 of the experts; Adam state 12 B/param sharded over DP 16 (dense) and expert-DP 2."""
    sc = cs.load_scenario(
        {
            "cluster": {"preset": "dgx_h100", "nodes": 2},
            "model": {"hf_config": "mixtral-8x7b", "seq_len": 4096},
            "training": {"global_batch": 16, "micro_batch": 1},
            "parallel": {"tp": 1, "pp": 1, "ep": 8, "zero": 1},
        }
    )
    c = load_hf_config("mixtral-8x7b", seq_len=4096)
    experts = c.layers * 8 * c.mlp_params() / 8
    dense = c.layers * (c.attention_params() + c.router_params() + 2 * c.norm_params())
    dense += 2 * c.vocab * c.hidden + c.norm_params()
    (cost,) = run_chunk_costs(sc)
    assert cost.static.weights == int(2 * (dense + experts))
    assert cost.static.optimizer == int(12 * dense / 16 + 12 * experts / 2)
    assert cost.expert_grad_bytes == int(4 * experts)


def test_mixtral_ep8_fits_where_megatron_core_fits_it():
    """Megatron-Core's reference Mixtral-8x7B mapping (MoE README, "Reference Best Parallel
    Mapping", MCore v0.8: 64 H100 80GB, seq 4096, TP 1, EP 8, PP 4, VP 8, MBS 1, GBS 256,
    distributed optimizer, all-to-all dispatcher): no OOM."""
    sc = cs.load_scenario(Path(__file__).resolve().parent.parent / "scenarios/mixtral-8x7b-64xH100-ep8.yaml")
    res = cs.simulate(sc.with_overrides({"training.global_batch": 64}))  # m = 4: same peak, 1/4 the time
    assert not res.summary["oom"]
    assert 40 < res.summary["peak_memory_gib"] < 80 * 1e9 / 2**30


@pytest.mark.parametrize(
    "parallel,model,field,message",
    [
        ({"ep": 3}, {}, "parallel.ep", "must divide the 8 routed experts"),
        ({"ep": 0}, {}, "parallel.ep", ""),
        ({"ep": 16}, {"experts": 16}, "parallel.ep", "etp × ep = 1 × 16 must divide 8"),
        (
            {"ep": 2},
            {"experts": 1, "experts_per_token": 1},
            "parallel.ep",
            "needs a transformer model with model.experts > 1",
        ),
        ({"ep": 2, "tp": 2}, {}, "parallel.sequence_parallel", "needs sequence parallelism"),
        ({"etp": 8}, {"moe_ffn_hidden": 2052}, "parallel.etp", "must divide the experts' FFN size 2052"),
        (
            {"ep": 2, "moe_token_dispatcher": "allgather", "moe_shared_expert_overlap": True},
            {},
            "parallel.moe_shared_expert_overlap",
            "needs parallel.moe_token_dispatcher: alltoall",
        ),
        (
            {"moe_shared_expert_overlap": True},
            {},
            "parallel.moe_shared_expert_overlap",
            "needs parallel.ep > 1",
        ),
        ({"ep": 2, "dp_split": [1, 1, 1, 1, 1, 1, 1, 1]}, {}, "parallel.dp_split", "accepted: even"),
        ({"ep": 16, "cp": 2}, {"experts": 16, "attention": "flash"}, "parallel.ep", "tp × cp × dp = 8 GPUs"),
    ],
)
def test_bad_expert_parallel_values_are_refused(parallel, model, field, message):
    par = {"ep": 1, **parallel}
    with pytest.raises((ScenarioError, ValueError)) as err:
        _scenario(model, par)
    assert field.split(".")[-1] in str(err.value)
    assert message in str(err.value)


def test_ep_one_leaves_the_moe_layer_as_before():
    """ep = 1 (etp = tp): no expert collectives; the experts stay in the TP region."""
    sc = _scenario(parallel={"ep": 1, "tp": 2, "sequence_parallel": True})
    res = cs.simulate(sc)
    assert not (res.spans.lane == "ep").any()


def test_skewed_dispatch_is_an_all_to_all_v():
    """With a seeded skew each source sends rank j the copies its experts take, m_j =
    c_j · T_loc/T_pool · h · e bytes (c_j: from the load model); direct sends each rank's
    messages back to back, so on an idle analytical node dispatch = α + (Σm − min m)/B (the
    rank keeping the fewest sends most) and combine (the transpose) = α + 7·max m/B. On
    the flow model the heavy receiver's port bounds the dispatch: ≥ 7·max m / B."""
    skew = {"expert_load": "skew", "expert_skew": 1.2, "expert_seed": 7}
    cfg = resolve_transformer(_scenario(skew).model)
    m = [int(c * 512 / 4096 * 1024 * 2) for c in rank_tokens(cfg, ExpertSplit(ep=8), 8 * 512)]
    alpha = DEFAULT_ALPHA["nvlink"] + LAT
    for network in ("analytical", "flow"):
        s = cs.simulate(_scenario(skew, network=network)).spans
        f = s[(s.phase == "F") & (s.lane == "ep")]
        dispatch, combine = (f[f.name == n] for n in ("ep dispatch", "ep combine"))
        assert (dispatch.bytes == sum(m)).all()
        assert sorted(combine.bytes) == sorted(8 * x for x in m)
        t_d = (dispatch.end_s - dispatch.start_s).max()
        t_c = (combine.end_s - combine.start_s).max()
        if network == "analytical":
            assert t_d == pytest.approx(alpha + (sum(m) - min(m)) / BW, rel=1e-12)
            assert t_c == pytest.approx(alpha + 7 * max(m) / BW, rel=1e-12)
        else:
            assert t_d >= 7 * max(m) / BW * (1 - 1e-12)
            assert t_d > alpha + 7 / 8 * sum(m) / BW  # slower than the even all-to-all of the same bytes


def test_expert_gradients_reduce_over_the_expert_data_parallel_group():
    """TP 2, ETP 1, EP 4 on 8 GPUs (dp 4): edp = 2·4/(1·4) = 2, so after the dense gradients'
    DP all-reduce every GPU all-reduces its experts' fp32 gradients (4 B/param of its 2 of
    8 experts, full FFN) with the one other GPU holding the same experts."""
    sc = _scenario(
        {"shared_ffn_hidden": 1024}, {"tp": 2, "etp": 1, "ep": 4, "sequence_parallel": True}, global_batch=8
    )
    cfg = resolve_transformer(sc.model)
    (cost,) = run_chunk_costs(sc)
    assert cost.expert_grad_bytes == int(4 * 2 * cfg.mlp_params(cfg.expert_ffn))
    s = cs.simulate(sc).spans
    experts = s[s.name == "dp all-reduce s0 experts"]
    dense = s[s.name == "dp all-reduce s0"]
    assert len(experts) == len(dense) == 8
    assert (experts.bytes == cost.expert_grad_bytes).all()
    assert (experts.start_s.values >= dense.end_s.values).all()
    assert Plan(tp=2, pp=1, dp=4, gpus_per_node=8, ep=4, etp=1).expert_group(0, "edp") == (0, 4)


def test_expert_parallel_with_context_parallel_dispatches_each_cp_ranks_tokens():
    """EP 4 × CP 2 on 8 GPUs (dp 4, ring attention): each GPU dispatches its own s/cp = 256
    tokens, S = 256·k·h·e, over the EP group Megatron-Core carves from tp·cp·dp (GPUs 0–3:
    two CP groups), in α + 3/4·S/B; the experts' gradients all-reduce over edp = 8/4 = 2
    GPUs (0 and 4), the dense ones over dp·cp = 8."""
    sc = _scenario({"attention": "flash"}, {"ep": 4, "cp": 2})
    plan = Plan.of(sc)
    assert plan.expert_group(0, "ep") == (0, 1, 2, 3) and plan.cp_ring(0, 0) == (0, 1)
    assert TrainSetup.of(sc).expert_shards == plan.edp == 2  # ZeRO shards expert state the same way
    prog = cs.compile_scenario(sc, fold=False)
    a2a = [op for op in prog.ops if op.name in ("ep dispatch", "ep combine")]
    assert len(a2a) == 8 * 2 * 4  # dispatch + combine, forward and backward, 2 micro-batches
    assert {op.group for op in a2a if op.device == 5} == {(4, 5, 6, 7)}
    experts = [op for op in prog.ops if op.name.endswith("experts") and op.device == 0]
    assert {op.group for op in experts} == {(0, 4)}
    assert any(op.lane == "cp send" for op in prog.ops)  # the ring still runs over CP
    spans = cs.simulate(sc).spans
    spans = spans[spans.name.isin(("ep dispatch", "ep combine"))]
    S = 256 * 2 * 1024 * 2
    assert (spans.bytes == S).all()
    for t in spans.end_s - spans.start_s:
        assert t == pytest.approx(DEFAULT_ALPHA["nvlink"] + LAT + 3 / 4 * S / BW, rel=1e-12)


@pytest.mark.parametrize(
    "nodes,parallel,model",
    [
        (2, {"ep": 8}, {}),
        (2, {"ep": 16}, {"experts": 16}),
        (4, {"tp": 2, "pp": 2, "ep": 4, "sequence_parallel": True}, {"layers": 2}),
        (2, {"tp": 2, "etp": 1, "ep": 8, "sequence_parallel": True}, {}),
    ],
)
def test_folding_an_evenly_loaded_expert_parallel_job_is_exact(nodes, parallel, model):
    """Folded (one GPU per stage, the other expert groups' all-to-alls as shadow traffic
    on the flow fabric) = unfolded, to the last bit; a skewed load refuses folding."""

    def run(fold, extra=None):
        sc = cs.load_scenario(
            {
                "cluster": {"preset": "dgx_h100", "nodes": nodes},
                "model": {**MOE, **model, **(extra or {})},
                "training": {"global_batch": 32 * nodes, "micro_batch": 1},
                "parallel": parallel,
                "simulation": {"network": "flow", "fold": fold},
            }
        )
        return cs.simulate(sc).summary

    folded, plain = run(True), run(False)
    assert folded["folded"].startswith("yes")
    assert folded["iteration_time_s"] == plain["iteration_time_s"]
    assert folded["peak_memory_gib"] == plain["peak_memory_gib"]
    if nodes == 2 and parallel == {"ep": 8}:
        with pytest.raises(ScenarioError, match="uneven expert load"):
            run(True, {"expert_load": "skew", "expert_skew": 1.0})


def test_distributed_optimizer_reduces_expert_buckets_over_expert_dp():
    """parallel.data_parallel with EP 8 on 16 GPUs (edp 2): each chunk's expert gradients
    fill their own buckets, reduce-scattered over the expert-DP group (bf16, the megatron_core
    profile's gradient buffer: 2 B/param of the one local expert per layer) after the dense
    buckets over DP 16; folding stays exact."""

    def run(fold):
        sc = cs.load_scenario(
            {
                "cluster": {"preset": "dgx_h100", "nodes": 2},
                # even load, so that folding applies (the profile's default, auto, is uneven)
                "model": {**MOE, "layers": 4, "expert_load": "uniform"},
                "training": {"global_batch": 32, "micro_batch": 1, "framework": "megatron_core"},
                "parallel": {"ep": 8, "data_parallel": {"bucket_size": "1 MB"}},
                "simulation": {"network": "flow", "fold": fold},
            }
        )
        return sc, cs.simulate(sc)

    sc, res = run(False)
    cfg = resolve_transformer(sc.model)
    s = res.spans[res.spans.device == "gpu0"]
    experts = s[s.name.str.startswith("dp reduce-scatter s0 experts")]
    dense = s[s.name.str.startswith("dp reduce-scatter s0 c")]
    assert experts.bytes.sum() == 2 * 4 * cfg.mlp_params(cfg.expert_ffn)
    assert len(experts) == 4 and len(dense) >= 1
    assert res.summary["iteration_time_s"] == run(True)[1].summary["iteration_time_s"]


@pytest.mark.parametrize(
    "parallel, training, field, needle",
    [
        (
            {"ep": 2, "parameter_server": {"servers": ["switch"]}},
            {},
            "parallel.parameter_server",
            "all-reduce",
        ),
        ({"ep": 8, "schedule": "gpipe"}, {"mode": "inference"}, "parallel.ep", "modelled for training"),
    ],
)
def test_modes_without_expert_parallelism_refuse_it(parallel, training, field, needle):
    """The parameter-server and inference compilers refuse EP in their check, naming the field."""
    raw = {
        "cluster": _node(),
        "model": dict(MOE),
        "training": {"global_batch": 8, "micro_batch": 1, **training},
        "parallel": parallel,
        "simulation": {"network": "analytical"},
    }
    with pytest.raises(cs.ScenarioError, match=needle) as err:
        cs.resolve_scenario(raw)
    assert err.value.field == field
