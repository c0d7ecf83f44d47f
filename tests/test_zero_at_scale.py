"""ZeRO at scale: rings across hosts pay their α's as NCCL does (``cluster.collective_latency:
nccl``), DeepSpeed's per-parameter ZeRO-3 collectives and per-micro-batch ZeRO-2 reduction,
and per-rank bytes that follow the sharding — closed forms on synthetic and GPT models."""

from types import SimpleNamespace

import pytest
import simpy

import clustersim as cs
from clustersim.collectives import Group, Tuning, estimate_time, run_collective
from clustersim.network import PacketFabric
from clustersim.parallel.data_parallel import fill_buckets, parameter_pieces
from clustersim.record import Recorder
from clustersim.topology import build_topology
from tests.conftest import synthetic

F, B, OPT = 4e-2, 8e-2, 1e-3
BW, NIC, A_INTRA, A_NET, GPN = 2e11, 2.5e10, 3e-6, 1.4e-5, 8


def ring(kind: str, n: int, nbytes: float, latency: str) -> float:
    """A ring of n ranks on n/8 hosts of 8 (one NIC per GPU), from first principles: NCCL's
    mean step α over the hosts, and per step the longest of a hop's transfer, the NIC's work
    (S/n over the 8 NICs of a host) and the intra-host port's; ``nccl`` adds the α's in full,
    ``overlapped`` hides them behind the busiest port when the chain is shorter."""
    steps = {"all_reduce": 2 * (n - 1), "reduce_scatter": n - 1, "all_gather": n - 1}[kind]
    hosts, m = n // GPN, GPN
    alpha = ((n - hosts) * A_INTRA + hosts * A_NET) / n
    hop = nbytes / (m * n) * ((n - hosts) / (n * BW) + hosts / (n * NIC))
    ports = max(nbytes / (n * m * NIC), (m - 1) * nbytes / (m * n * BW))
    return steps * (alpha + max(hop, ports) if latency == "nccl" else max(alpha + hop, ports))


def zero3(n: int, latency: str, *, layers=4, params=4e8, **dp_options):
    """ZeRO-3 on a synthetic model over dp = n GPUs on n/8 fat-tree hosts (links without
    latency, so the α's are the scenario's), analytical collectives by ring."""
    raw = synthetic(1, 1, F, B, layers_per_stage=layers, dp=n, params=params, optimizer=OPT)
    raw["cluster"] = {
        "nodes": n // GPN,
        "gpus_per_node": GPN,
        "pcie": None,
        "topology": {"kind": "fat_tree"},
        "intra_node": {"kind": "nvswitch", "bandwidth": BW, "latency": 0.0, "efficiency": 1.0},
        "nic": {"bandwidth": NIC, "latency": 0.0, "per_node": GPN, "efficiency": 1.0},
        "collective_alpha": {"intra_node": A_INTRA, "inter_node": A_NET},
        "collective_latency": latency,
    }
    raw["simulation"].update(
        network="analytical",
        collective_model="analytical",
        collectives={"all_gather": "ring", "reduce_scatter": "ring"},
    )
    raw["parallel"].update(zero=3, data_parallel={"prefetch": 0, **dp_options})
    return cs.simulate(raw, progress=False)


def exposed(res) -> float:
    return float(res.spans["end_s"].max()) - (F + B + OPT)


NS = (16, 32, 64, 128)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("latency", ["nccl", "overlapped"])
def test_zero3_exposed_time_on_a_fat_tree_is_the_rings_closed_form(n, latency):
    # prefetch 0: per unit an all-gather before its forward and again before its backward,
    # the last unit's reduce-scatter after the backward (the others hide behind it)
    L, S = 4, 4e8
    want = 2 * L * ring("all_gather", n, S, latency) + ring("reduce_scatter", n, S, latency)
    assert exposed(zero3(n, latency)) == pytest.approx(want, rel=1e-12)


def test_zero3_exposed_time_grows_with_the_group_as_the_alpha_term_says():
    # port-bound messages: overlapped hides every α, so only NCCL's form grows with n by
    # (2L + 1)·(n − 1)·ᾱ(n) — the per-collective latency the 175B runs show
    L = 4
    for n in NS:
        hosts = n // GPN
        alpha = ((n - hosts) * A_INTRA + hosts * A_NET) / n
        gap = exposed(zero3(n, "nccl")) - exposed(zero3(n, "overlapped"))
        assert gap == pytest.approx((2 * L + 1) * (n - 1) * alpha, rel=1e-9)
    e = {n: exposed(zero3(n, "nccl")) for n in NS}
    assert all(e[a] < e[b] for a, b in zip(NS, NS[1:]))


def test_prefetch_hides_the_gathers_when_compute_is_longer():
    n, L, S = 64, 4, 4e8
    ag, rs = ring("all_gather", n, S, "nccl"), ring("reduce_scatter", n, S, "nccl")
    assert ag < F / L and rs < B / L  # each unit's gather fits under the previous unit's pass
    res = zero3(n, "nccl", prefetch=1)
    assert exposed(res) == pytest.approx(ag + rs, rel=1e-12)
    # every unit's all-gather and reduce-scatter is in the spans with its α-β time
    sp = res.spans[(res.spans["kind"] == "collective") & (res.spans["device"] == res.spans["device"].iloc[0])]
    for prefix, count, t in (("fsdp all-gather", 2 * L, ag), ("fsdp reduce-scatter", L, rs)):
        ops = sp[sp["name"].str.startswith(prefix)]
        assert len(ops) == count and (ops["end_s"] - ops["start_s"]).to_numpy() == pytest.approx(t, rel=1e-12)


def test_deepspeed_per_parameter_collectives_multiply_the_latency():
    # k parameters per layer: k all-gathers of S/k each, back to back; the reduce-scatters
    # fill DeepSpeed's buckets (flush before the parameter that would overflow): 2 per layer
    n, L, S, k = 32, 4, 4e8, 4
    res = zero3(n, "nccl", parameters_per_layer=k, bucket_size=2.5e8)
    ag, rs = ring("all_gather", n, S / k, "nccl"), ring("reduce_scatter", n, S / 2, "nccl")
    assert exposed(res) == pytest.approx(2 * L * k * ag + 2 * rs, rel=1e-12)
    sp = res.spans[(res.spans["kind"] == "collective") & (res.spans["device"] == res.spans["device"].iloc[0])]
    assert (
        sp["name"].str.startswith("fsdp all-gather").sum(),
        sp["name"].str.contains("reduce-scatter").sum(),
    ) == (
        2 * L * k,
        2 * L,
    )
    # the unit's pieces are held together: the weights (synthetic bytes are not sharded) + one unit
    assert res.summary["peak_memory_gib"] * 2**30 == pytest.approx((L + 1) * S, rel=1e-12)
    assert parameter_pieces((10, 7), [0, 1], 3) == [4, 3, 3, 3, 2, 2]
    assert parameter_pieces((10, 7), [0, 1], 1) == [17]
    assert fill_buckets([4, 3, 3, 3, 2, 2], 6) == [4, 6, 5, 2] and fill_buckets([4, 9], None) == [13]


@pytest.mark.parametrize("nodes", [2, 4])
@pytest.mark.parametrize("nbytes", [1 << 20, 1 << 24, 1 << 28])
def test_packet_fabric_ring_across_hosts_pays_the_fill_as_the_closed_form_says(nodes, nbytes):
    # the ring of nccl latency on the packet fabric (its α's one fill before the first step,
    # the steps' messages none) against its closed form: within 4 %, what store-and-forward
    # 1 MiB chunks add (the overlapped form is 4-32 % off the same fabric here)
    c = {
        "nodes": nodes,
        "gpus_per_node": GPN,
        "pcie": None,
        "topology": {"kind": "fat_tree"},
        "intra_node": {"kind": "nvswitch", "bandwidth": BW, "latency": 0.0, "efficiency": 1.0},
        "nic": {"bandwidth": NIC, "latency": 0.0, "per_node": GPN, "efficiency": 1.0},
    }
    n = nodes * GPN
    graph, members = build_topology(c), [f"gpu{i}" for i in range(n)]
    alpha = {"intra_node": A_INTRA, "inter_node": A_NET}
    env = simpy.Environment()
    fabric = PacketFabric(env, Recorder(), graph, chunk_size=1 << 20)
    proc = env.process(
        run_collective(env, fabric, "all_gather", members, nbytes, "ring", Tuning(alpha, "nccl"))
    )
    env.run()
    shape = Group(env, SimpleNamespace(graph=graph), members, alpha, "nccl").shape()
    want = estimate_time("all_gather", "ring", shape, nbytes)
    assert want == pytest.approx(ring("all_gather", n, nbytes, "nccl"), rel=1e-12)
    assert max(proc.value.values()) == pytest.approx(want, rel=0.04)


def _gpt(zero: int, **dp_options):
    return {
        "name": "gpt sharding",
        "cluster": {"nodes": 1, "gpus_per_node": 8, "gpu": "A100-SXM4-80GB"},
        "model": {"preset": "gpt-1.3b", "seq_len": 512},
        "training": {"global_batch": 16, "micro_batch": 1, "precision": "bf16", "optimizer": "adam"},
        "parallel": {"dp": 8, "zero": zero, "data_parallel": dp_options},
        "simulation": {"collective_model": "analytical", "network": "analytical"},
    }


def test_per_rank_bytes_follow_the_sharding_per_stage():
    # mixed-precision Adam per parameter: 2 bytes of weights, 4 of fp32 gradients, 12 of
    # optimizer states (fp32 master + two moments); ZeRO-1 shards the states over dp,
    # ZeRO-2 the gradients too, ZeRO-3 the weights too (Rajbhandari et al. 2020, Fig. 1)
    dp = 8
    cols = {}
    for zero in range(4):
        dev = cs.simulate(_gpt(zero), progress=False).devices.iloc[0]
        cols[zero] = (dev["params_bytes"], dev["grads_bytes"], dev["optimizer_bytes"])
    w, g, o = cols[0]
    assert g == pytest.approx(2 * w, rel=1e-12) and o == pytest.approx(6 * w, rel=1e-12)
    assert cols[1] == pytest.approx((w, g, o / dp), rel=1e-12)
    assert cols[2] == pytest.approx((w, g / dp, o / dp), rel=1e-12)
    assert cols[3] == pytest.approx((w / dp, g / dp, o / dp), rel=1e-12)


@pytest.mark.parametrize("zero", [1, 2])
def test_zero2_reduces_every_micro_batch_zero1_only_at_the_boundary(zero):
    # synthetic, 2 micro-batches, buckets of one layer, no overlap: DeepSpeed ZeRO-2 reduces
    # on the compute stream after each backward, ZeRO-1 once, both gather after the step
    n, L, S, m = 4, 4, 1e7, 2
    raw = synthetic(1, m, 1e-3, 2e-3, layers_per_stage=L, dp=n, params=S, optimizer=OPT)
    raw["cluster"]["collective_alpha"] = {"intra_node": A_INTRA, "inter_node": A_INTRA}
    raw["simulation"].update(
        collective_model="analytical", collectives={"reduce_scatter": "ring", "all_gather": "ring"}
    )
    raw["parallel"].update(zero=zero, data_parallel={"bucket_size": S, "reduce_every_micro_batch": zero == 2})
    res = cs.simulate(raw, progress=False)
    bw = 1e11  # the synthetic node's per-GPU bandwidth
    rs = ag = (n - 1) * (A_INTRA + S / (n * bw))
    reductions = (m if zero == 2 else 1) * L
    assert float(res.spans["end_s"].max()) == pytest.approx(
        m * 3e-3 + reductions * rs + OPT + L * ag, rel=1e-12
    )


def test_deepspeed_profile_states_its_stages():
    z2 = cs.load_scenario({**_gpt(2), "training": {**_gpt(2)["training"], "framework": "deepspeed"}})
    z3 = cs.load_scenario({**_gpt(3), "training": {**_gpt(3)["training"], "framework": "deepspeed"}})
    assert (
        z2.parallel.data_parallel.reduce_every_micro_batch
        and z2.parallel.data_parallel.parameters_per_layer == 1
    )
    assert (
        z3.parallel.data_parallel.deepspeed_zero3
        is not None  # its coordinator: tests/test_deepspeed_zero3.py
        and z2.parallel.data_parallel.deepspeed_zero3 is None
        and not z3.parallel.data_parallel.reduce_every_micro_batch
    )
    assert z3.cluster.collective_latency == "nccl"
    assert cs.load_scenario(_gpt(3)).cluster.collective_latency == "overlapped"  # megatron_2021: as before
