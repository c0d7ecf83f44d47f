"""DeepEP's node-deduplicated dispatch (clustersim/workload/deepep.py): its bytes against an
exact enumeration of every routing of a token, against Megatron's alltoall dispatcher, and
the flex dispatcher in a run."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations
from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.workload.deepep import dispatch_matrix, hit_probability, received_tokens
from clustersim.workload.moe_dispatch import ExpertSplit, dispatch_buffer_bytes, ep_moe_ops
from clustersim.workload.ops import TPComm
from tests.test_moe_kernels import CFG


def _enumerate(experts: int, k: int, ep: int, per_node: int) -> tuple[float, float]:
    """Over every equally likely set of k experts a token of rank 0 routes to: the mean
    count of distinct remote nodes, and of the other GPUs of rank 0's node, it reaches."""
    per_gpu = experts // ep
    nodes = gpus = 0
    for chosen in combinations(range(experts), k):
        hit = {x // per_gpu for x in chosen}
        nodes += len({g // per_node for g in hit} - {0})
        gpus += len({g for g in hit if g // per_node == 0} - {0})
    n = comb(experts, k)
    return nodes / n, gpus / n


@pytest.mark.parametrize(
    "experts, k, ep, per_node",
    [(16, 4, 8, 2), (16, 2, 8, 4), (12, 3, 6, 2), (12, 3, 6, 4), (8, 8, 4, 2), (16, 1, 8, 8)],
)
def test_rdma_bytes_are_one_copy_per_distinct_remote_node(experts, k, ep, per_node):
    """A rank's network bytes = T·h·e × the mean distinct remote nodes a token reaches
    (Megatron's alltoall: T·h·e·k·(ep − m)/ep, one copy per remote expert); its NVLink bytes
    to each peer = N·T·h·e·p_gpu, p_gpu the exact probability a token reaches that peer."""
    cfg = replace(CFG, experts=experts, experts_per_token=k)
    per_token = 1e6  # T·h·e
    matrix = dispatch_matrix(cfg, ep, per_node, per_token)
    remote = sum(b for j, b in enumerate(matrix[0]) if j // per_node != 0)
    peers = [b for j, b in enumerate(matrix[0]) if j // per_node == 0 and j != 0]
    nodes, gpus = _enumerate(experts, k, ep, per_node)
    assert remote == pytest.approx(per_token * nodes, abs=ep)  # int bytes per entry
    n_nodes = -(-ep // per_node)
    assert sum(peers) == pytest.approx(n_nodes * per_token * gpus, abs=ep)
    plain = per_token * k * (ep - per_node) / ep
    assert remote <= plain + ep


@settings(max_examples=50, deadline=None)
@given(
    ep_exp=st.integers(1, 5),
    per_node_exp=st.integers(0, 3),
    k=st.integers(1, 8),
    per_gpu=st.integers(1, 8),
)
def test_deduplication_never_moves_more_than_one_copy_per_expert(ep_exp, per_node_exp, k, per_gpu):
    """Over RDMA and in total, DeepEP sends no more than the alltoall dispatcher's k copies,
    and a rank receives exactly the tokens that reach it: ep·T·p_gpu (its own included)."""
    ep = 2**ep_exp
    per_node = min(ep, 2**per_node_exp)
    experts = ep * per_gpu
    k = min(k, experts)
    cfg = replace(CFG, experts=experts, experts_per_token=k)
    matrix = dispatch_matrix(cfg, ep, per_node, 1e9)
    far = sum(b for j, b in enumerate(matrix[0]) if j // per_node != 0)
    assert far <= 1e9 * k * (ep - per_node) / ep * (1 + 1e-9) + ep
    p_gpu = hit_probability(experts, k, per_gpu)
    assert received_tokens(cfg, ep, 100.0) == pytest.approx(ep * 100.0 * p_gpu)
    assert 0.0 <= p_gpu <= 1.0 and p_gpu <= k / ep * per_gpu * (1 + 1e-12) + 1e-12


def test_flex_dispatch_and_combine_in_the_layer():
    """The flex dispatcher's layer: the dispatch (host-synced when asked) and the combine
    carry DeepEP's matrix and its transpose; each rank permutes the ep·T·p_gpu tokens it
    received; no sort-chunks (its permute groups by local expert)."""
    split = ExpertSplit(ep=8, etp=1, dispatcher="flex", host_sync=True, per_node=8)
    ops = ep_moe_ops(CFG, 1, 1, 2, split)
    comms = {op.name: op for op in ops if isinstance(op, TPComm)}
    dispatch, combine = comms["ep dispatch"], comms["ep combine"]
    assert dispatch.host_sync and not combine.host_sync
    assert combine.matrix == tuple(zip(*dispatch.matrix))
    p_gpu = hit_probability(128, 8, 16)
    assert sum(dispatch.matrix[0]) == pytest.approx(7 * 4096 * 2048 * 2 * p_gpu, abs=8)
    assert sum(dispatch.matrix[0]) < 4096 * 8 * 2048 * 2 * 7 / 8  # the alltoall's off-rank copies
    (ranks,) = [op for op in ops if hasattr(op, "ranks")]
    names = [op.name for op in ranks.ranks[0]]
    assert names[0] == "moe_permute" and "moe_sort_chunks" not in names
    assert dispatch_buffer_bytes(CFG, 1, 1, 2, split) == pytest.approx(2 * sum(dispatch.matrix[0]), abs=16)


def test_flex_runs_across_nodes_and_refuses_expert_tensor_parallelism():
    """EP 16 over two nodes runs with the flex dispatcher, its exposed EP time below the
    alltoall dispatcher's (fewer bytes over the NICs); flex with etp > 1 is refused."""
    raw = {
        "cluster": {"preset": "dgx_h100", "nodes": 2, "comm_compute_slowdown": 1},
        "model": {"hf_config": "qwen3-30b-a3b", "seq_len": 1024, "layers": 2},
        "training": {"global_batch": 16, "micro_batch": 1, "precision": "bf16", "framework": "megatron_core"},
        "parallel": {"tp": 1, "pp": 1, "dp": 16, "ep": 16},
        "simulation": {"network": "analytical", "collective_model": "analytical", "fidelity": "fast"},
    }
    plain = cs.simulate(cs.load_scenario(raw)).summary
    raw["parallel"]["moe_token_dispatcher"] = "flex"
    flex = cs.simulate(cs.load_scenario(raw)).summary
    assert flex["exposed_ep_fraction"] * flex["iteration_time_s"] < (
        plain["exposed_ep_fraction"] * plain["iteration_time_s"]
    )
    raw["parallel"].update(tp=2, sequence_parallel=True, tp_comm_overlap=False, etp=2, dp=8, ep=8)
    with pytest.raises(ScenarioError, match="flex"):
        cs.load_scenario(raw)
