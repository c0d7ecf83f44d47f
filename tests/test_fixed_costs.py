"""training.fixed_costs: each fixed cost is an op of the Program with its closed-form duration,
and turning it off removes exactly it (docs/models.md, "Fixed costs")."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import simpy
import yaml

import clustersim as cs
from clustersim.collectives.group import Group
from clustersim.collectives.protocol import resolve_protocols
from clustersim.engine.network_setup import build_network
from clustersim.hardware.gpus import get_gpu
from clustersim.record import Recorder
from clustersim.resolve import resolve
from clustersim.workload.cost_model import efficiency_for
from clustersim.workload.grad_accumulation import MAIN_GRAD_BYTES, with_grad_accumulation
from clustersim.workload.memory_bandwidth import memory_curves
from clustersim.workload.ops import LayerOp
from clustersim.workload.stage_builder import GRAD_NORM_BYTES, UNSCALE_BYTES
from clustersim.workload.transformer import TransformerConfig
from clustersim.workload.transformer_ops import embedding_ops, layer_ops, output_ops

ROOT = Path(__file__).resolve().parents[1]

A100_EFFICIENCY = efficiency_for("A100-SXM4-80GB")
L = A100_EFFICIENCY.launch_s
HBM = get_gpu("A100-SXM4-80GB").hbm_bandwidth
#: the achieved bandwidth of A100's tuned memory-bound kernels (Apex multi-tensor, Megatron's
#: adds): each kernel moves its bytes at the plateau and pays the fixed ramp once
CURVE = memory_curves("A100-SXM4-80GB").tuned


def _hbm_s(nbytes: float, kernels: int = 1) -> float:
    return (nbytes + kernels * CURVE.bytes_half) / (HBM * CURVE.frac_max)


HIDDEN, VOCAB, SEQ, LAYERS = 256, 1024, 128, 2
MODEL = {
    "kind": "transformer",
    "layers": LAYERS,
    "hidden": HIDDEN,
    "heads": 4,
    "vocab": VOCAB,
    "seq_len": SEQ,
}
ONE_GPU = {
    "cluster": {"nodes": 1, "gpus_per_node": 1, "gpu": "A100-SXM4-80GB"},
    "model": MODEL,
    "training": {"global_batch": 4, "micro_batch": 1, "precision": "bf16"},
    "parallel": {"tp": 1, "pp": 1, "dp": 1},
    "simulation": {"network": "analytical", "collective_model": "analytical"},
}
DGX = {
    **ONE_GPU,
    "cluster": {"preset": "dgx_a100", "nodes": 1},
    "training": {"global_batch": 8, "micro_batch": 1, "precision": "bf16"},
    "parallel": {"tp": 2, "pp": 2, "dp": 2},
    "simulation": {**ONE_GPU["simulation"], "collectives": {"all_reduce": "ring"}},
}


def _run(raw: dict, **fixed):
    """``raw`` run with ``fixed`` costs; the host issues kernels without delay unless
    ``host_dispatch`` is given (the GPU's wait for it: tests/test_host.py), and the
    framework's extra small kernels are left out (tests/test_host_kernels.py)."""
    raw = copy.deepcopy(raw)
    raw["training"]["fixed_costs"] = {"host_dispatch": 0, "small_kernels": False, **fixed}
    return cs.simulate(cs.load_scenario(raw))


def _named(res, prefix: str):
    return res.spans[res.spans.name.str.startswith(prefix)]


def _kernels(ops: list) -> tuple[int, int]:
    """(forward, backward) roofline kernels of ``ops``: one per non-empty Work."""
    layer = [op for op in ops if isinstance(op, LayerOp)]
    fwd = sum(1 for op in layer if op.fwd.flops or op.fwd.bytes)
    bwd = sum(1 for op in layer for w in (op.bwd_input, op.bwd_weight) if w.flops or w.bytes)
    return fwd, bwd


def _config() -> TransformerConfig:
    from clustersim.workload.resolve import resolve_transformer

    return resolve_transformer(cs.load_scenario(ONE_GPU).spec.model)


def _ops(cfg) -> list:
    """The one-GPU model's ops (tp 1, bf16), embedding to loss."""
    return (
        embedding_ops(cfg, 1, 1, False, 2)
        + LAYERS * layer_ops(cfg, 1, 1, False, 2)
        + output_ops(cfg, 1, 1, False, 2)
    )


def test_launch_op_is_kernel_count_times_launch():
    cfg = _config()
    ops = with_grad_accumulation(_ops(cfg), 2)  # megatron_2021: one main_grad add per weight op
    n_f, n_b = _kernels(ops)
    res = _run(ONE_GPU)
    launches = _named(res, "launch ")
    durations = dict(zip(launches.name, launches.end_s - launches.start_s))
    assert durations["launch F0"] == pytest.approx(n_f * L, rel=1e-12)
    assert durations["launch B0"] == pytest.approx(n_b * L, rel=1e-12)
    assert len(launches) == 2 * 4  # a forward and a backward per micro-batch


def test_framework_op_per_pass_and_default():
    res = _run(ONE_GPU)
    fw = _named(res, "framework ")
    assert sorted(fw.name) == sorted(f"framework {p}{j}" for p in "FB" for j in range(4))
    assert (fw.end_s - fw.start_s).tolist() == pytest.approx([50e-6] * 8, rel=1e-12)


@pytest.mark.parametrize(
    "off,prefix,count",
    [
        ({"kernel_launch": 0}, "launch ", 8),
        ({"microbatch_overhead": 0}, "framework ", 8),
        ({"grad_clip": False}, "grad norm", 1),
    ],
)
def test_turning_one_off_removes_exactly_it(off, prefix, count):
    """On one GPU the step is one chain of ops: the iteration shrinks by the removed ops' time."""
    on, without = _run(ONE_GPU), _run(ONE_GPU, **off)
    gone = _named(on, prefix)
    assert len(gone) == count and _named(without, prefix).empty
    removed = float((gone.end_s - gone.start_s).sum())
    assert on.summary["iteration_time_s"] - without.summary["iteration_time_s"] == pytest.approx(
        removed, rel=1e-9
    )
    assert len(on.spans) - len(without.spans) == count


def test_grad_accumulation_adds_every_weight_gradient_into_fp32_main_grad():
    """megatron_2021: after each of the 4 micro-batches' backward, one add per weight op over
    its parameters, reading the bf16 gradient (2 bytes) and the fp32 main_grad (4) and
    writing it (4), each with its launch; turning it off removes exactly that time, and
    Megatron-Core (gradient-accumulation fusion) has none."""
    holders = [op for op in _ops(_config()) if isinstance(op, LayerOp) and op.params]
    params = sum(op.params for op in holders)
    per_micro_batch = _hbm_s(params * (2 + MAIN_GRAD_BYTES), len(holders)) + len(holders) * L
    on, off = _run(ONE_GPU), _run(ONE_GPU, grad_accumulation=False)
    assert params == resolve(cs.load_scenario(ONE_GPU)).chunk_costs[0].static.weights / 2
    assert on.summary["iteration_time_s"] - off.summary["iteration_time_s"] == pytest.approx(
        4 * per_micro_batch, rel=1e-9
    )
    core = copy.deepcopy(ONE_GPU)
    core["training"]["framework"] = "megatron_core"
    assert not cs.load_scenario(core).training.fixed_costs.grad_accumulation


def test_grad_norm_pass_reads_the_local_fp32_gradients():
    res = _run(ONE_GPU)
    params = resolve(cs.load_scenario(ONE_GPU)).chunk_costs[0].static.weights / 2  # bf16 weights
    (t,) = (_named(res, "grad norm").end_s - _named(res, "grad norm").start_s).tolist()
    assert t == pytest.approx(_hbm_s(params * GRAD_NORM_BYTES) + L, rel=1e-9)


def test_loss_scale_check_with_fp16_only():
    fp16 = copy.deepcopy(ONE_GPU)
    fp16["training"]["precision"] = "fp16"
    res = _run(fp16)
    params = resolve(cs.load_scenario(fp16)).chunk_costs[0].static.weights / 2
    (t,) = (_named(res, "loss-scale check").end_s - _named(res, "loss-scale check").start_s).tolist()
    assert t == pytest.approx(_hbm_s(params * UNSCALE_BYTES) + L, rel=1e-9)
    assert _named(_run(ONE_GPU), "loss-scale check").empty  # bf16: no loss scale
    assert _named(_run(fp16, loss_scale_check=False), "loss-scale check").empty


def _ring(raw: dict, group: list[int], nbytes: float, steps: int) -> float:
    """A ring's α-β time over ``group`` on the scenario's idle fabric: ``steps`` (α + S/(n·B))
    — all-reduce 2(n − 1) steps, all-gather n − 1 — α and B the group's intra-node step
    (collectives.group), under the preset's NCCL protocol of least time (its latency + the
    ring on its wire bytes)."""
    job = resolve(cs.load_scenario(raw))
    env = simpy.Environment()
    fabric = build_network(job, env, Recorder())
    shape = Group(env, fabric, [f"gpu{d}" for d in group], job.cluster.collective_alpha).shape()
    n = len(group)
    return min(
        p.latency + steps * (shape.alpha + p.wire_bytes(nbytes) / (n * shape.bw))
        for p in resolve_protocols(job.cluster.collective_protocols)
    )


def test_scalar_allreduces_span_the_model_parallel_group():
    raw = copy.deepcopy(DGX)
    raw["training"]["precision"] = "fp16"
    raw["parallel"] = {"tp": 4, "pp": 1, "dp": 2}  # a replica's model-parallel group: its 4 TP ranks
    res = _run(raw)
    job = resolve(cs.load_scenario(raw))
    for what in ("found-inf all-reduce", "grad-norm all-reduce"):
        ar = _named(res, what)
        assert len(ar) == 8 and set(ar.bytes) == {4}
        for r in range(2):
            group = [job.plan.device(0, r, t) for t in range(4)]
            mine = ar[ar.device.isin([f"gpu{d}" for d in group])]
            assert len(mine) == 4 and mine.start_s.nunique() == 1  # one rendezvous per replica
            assert (mine.end_s - mine.start_s).tolist() == pytest.approx(
                [_ring(raw, group, 4, 2 * (len(group) - 1))] * 4, rel=1e-9
            )


def test_sharded_optimizer_reduces_the_norm_over_every_gpu():
    raw = copy.deepcopy(DGX)
    raw["parallel"] = {**DGX["parallel"], "zero": 1}
    ar = _named(_run(raw), "grad-norm all-reduce")
    assert len(ar) == 8 and ar.end_s.nunique() == 1  # one all-reduce of all 8 GPUs


def test_tied_embedding_allreduce_between_first_and_last_stage():
    res = _run(DGX)
    tied = _named(res, "tied-embedding all-reduce")
    job = resolve(cs.load_scenario(DGX))
    ends = {job.plan.device(s, r, t) for s in (0, 1) for r in range(2) for t in range(2)}
    assert {int(d[3:]) for d in tied.device} == ends
    assert set(tied.bytes) == {VOCAB * HIDDEN // 2 * 4}  # vocab · hidden / tp fp32 gradients
    assert _named(_run(DGX, tied_embedding_allreduce=False), "tied-embedding").empty
    one_stage = copy.deepcopy(DGX)
    one_stage["parallel"] = {"tp": 2, "pp": 1, "dp": 4}
    assert _named(_run(one_stage), "tied-embedding").empty  # pp = 1: one copy of the matrix
    untied = copy.deepcopy(DGX)
    untied["model"] = {**MODEL, "tied_embeddings": False}
    assert _named(_run(untied), "tied-embedding").empty


def test_synthetic_models_have_no_fixed_costs():
    raw = {
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu": "A100-SXM4-80GB"},
        "model": {"kind": "synthetic", "layers": 4, "forward": 1e-3, "backward": 2e-3},
        "training": {"global_batch": 8},
        "parallel": {"pp": 4, "dp": 1},
    }
    res = cs.simulate(cs.load_scenario(raw))
    assert set(res.spans[res.spans.lane == "compute"].name.str.split().str[0]) <= {
        *(f"{p}{j}" for p in "FB" for j in range(8)),
        "optimizer",
    }


def test_pipeline_gather_after_each_receive_over_the_tp_group():
    res = _run(DGX)
    job = resolve(cs.load_scenario(DGX))
    gathers = _named(res, "pp all-gather")
    # stage 1 receives every forward's activations, stage 0 every backward's gradients
    assert len(gathers) == 2 * 4 * 2 * 2  # (F on stage 1 + B on stage 0) × m × tp × dp
    assert set(gathers.bytes) == {SEQ * HIDDEN * 2}  # b · s · h 16-bit elements
    group = [job.plan.device(1, 0, t) for t in range(2)]
    n, s = 2, SEQ * HIDDEN * 2
    mine = gathers[gathers.device.isin([f"gpu{d}" for d in group])]
    assert (mine.end_s - mine.start_s).tolist() == pytest.approx(
        [_ring(DGX, group, s, n - 1)] * len(mine), rel=1e-9
    )
    assert _named(_run(DGX, pipeline_gather=False), "pp all-gather").empty
    sp = copy.deepcopy(DGX)
    sp["parallel"] = {**DGX["parallel"], "sequence_parallel": True}
    assert _named(_run(sp), "pp all-gather").empty  # the tensor already is the s/tp shard


def test_launch_is_moved_out_of_the_kernels_not_added():
    """The pass's launch op carries what the cost model charged inside each kernel: with the
    default launch a pass costs what its kernels cost with their launches (Korthikanti
    Table 4 — the A100 calibration point — is timed from those kernels and stays put)."""
    from clustersim.workload.cost_model import CostModel
    from clustersim.workload.segments import backward_items, forward_items

    ops = with_grad_accumulation(_ops(_config()), 2)
    cm = CostModel.for_gpu("A100-SXM4-80GB")
    on = copy.deepcopy(ONE_GPU)
    on["training"]["fixed_costs"] = {"host_dispatch": 0, "small_kernels": False}  # the launches alone
    cost = resolve(cs.load_scenario(on)).chunk_costs[0]
    assert cost.forward == pytest.approx(sum(i[1] for i in forward_items(ops, cm)), rel=1e-12)
    assert cost.backward == pytest.approx(sum(i[1] for i in backward_items(ops, cm)), rel=1e-12)
    off = copy.deepcopy(ONE_GPU)
    off["training"]["fixed_costs"] = {"kernel_launch": 0, "host_dispatch": 0, "small_kernels": False}
    n_f, _ = _kernels(ops)
    bare = resolve(cs.load_scenario(off)).chunk_costs[0].forward
    assert cost.forward - bare == pytest.approx(n_f * L, rel=1e-9)


@pytest.mark.parametrize(
    "framework,gather", [("megatron_2021", True), ("megatron_core", False), ("fsdp2", False)]
)
def test_only_megatron_2021_gathers_pipeline_tensors(framework, gather):
    raw = yaml.safe_load((ROOT / "scenarios/quickstart.yaml").read_text())
    raw["training"]["framework"] = framework
    assert cs.load_scenario(raw).training.fixed_costs.pipeline_gather is gather
    assert cs.load_scenario(raw).training.fixed_costs.grad_accumulation is gather  # unfused in 2021 only
    raw["training"]["fixed_costs"] = {"pipeline_gather": True}  # a stated value wins
    assert cs.load_scenario(raw).training.fixed_costs.pipeline_gather is True
