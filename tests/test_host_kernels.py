"""What the host spends per op and the frameworks' extra small kernels
(clustersim/workload/host_kernels.py): every row of host_kernels.csv names a real op's work,
the forward and the backward issue at their own measured rates, a module costs its measured
host time, the extra kernels add exactly their launches and bytes, and ``host_bound_s`` is the
GPU's wait for the host — closed forms, and (hypothesis) the same ops and events with or without
any of it, never faster."""

from __future__ import annotations

import copy
import csv

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.workload.host import HOST_CSV, STACKS, host_waits
from clustersim.workload.host_kernels import KERNELS_CSV, MODULE_STACKS, HostModel, extra_kernels
from clustersim.workload.ops import LayerOp
from clustersim.workload.resolve import resolve_transformer
from clustersim.workload.transformer_ops import layer_ops

H100 = "H100-SXM5-80GB"
#: a Llama-like model (RoPE, RMSNorm, SwiGLU, GQA) on one H100, every framework's glue present
LLAMA = {
    "cluster": {"gpu": H100, "nodes": 1, "gpus_per_node": 1},
    "model": {
        "kind": "transformer",
        "layers": 2,
        "hidden": 512,
        "heads": 8,
        "kv_heads": 2,
        "ffn_hidden": 1408,
        "vocab": 2048,
        "seq_len": 256,
        "norm": "rmsnorm",
        "position": "rope",
        "gated_mlp": True,
        "attention": "flash",
    },
    "training": {"global_batch": 2, "micro_batch": 1, "precision": "bf16"},
    "parallel": {"tp": 1, "pp": 1, "dp": 1},
    "simulation": {"network": "analytical", "collective_model": "analytical"},
}


def _raw(framework: str, **training) -> dict:
    raw = copy.deepcopy(LLAMA)
    raw["training"] = {**raw["training"], "framework": framework, **training}
    return raw


def _run(raw: dict):
    return cs.simulate(cs.load_scenario(raw))


def _rows(path) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def _calibrated(stack: str, quantity: str) -> float:
    (row,) = [
        r for r in _rows(HOST_CSV) if (r["stack"], r["quantity"], r["role"]) == (stack, quantity, "calibrate")
    ]
    return float(row["value_us"]) * 1e-6


def test_every_row_is_sourced_and_names_work_the_framework_runs():
    """A row whose op or phase has no work would price nothing: each names a layer op of its
    framework with work in that phase (under flash or the unfused attention)."""
    rows = _rows(KERNELS_CSV)
    assert rows and all(r["source"].strip() and r["what"].strip() for r in rows)
    assert {r["framework"] for r in rows} <= set(STACKS)
    for framework in STACKS:
        present = set()
        for attention in ("flash", "standard"):
            raw = _raw(framework)
            raw["model"]["attention"] = attention
            cfg = resolve_transformer(cs.load_scenario(raw).spec.model)
            for op in layer_ops(cfg, 1, 1, False, 2, kernels=framework):
                if isinstance(op, LayerOp):
                    present |= {(op.name, ph) for ph, w in op.phases.items() if w.flops or w.bytes}
        assert set(extra_kernels(framework)) <= present, framework


def test_forward_and_backward_issue_at_their_own_measured_rates():
    for framework in STACKS:
        host = HostModel.of(framework, None, False, True, 0.0)
        assert host.dispatch("F") == _calibrated("pytorch_eager", "dispatch")
        assert host.dispatch("B") == host.dispatch("W") == _calibrated("autograd_engine", "dispatch")
        stack = MODULE_STACKS[framework]
        assert host.module_s == (_calibrated(stack, "module") if stack else 0.0)
    te = HostModel.of("megatron_core", None, False, True, 0.0)
    # a TE linear's forward: its module's measured host time (its GEMM's dispatch inside)
    assert te.issue("attn_out", "F", 1) == (0, 0.0, _calibrated("te_module", "module"))
    # its backward: two GEMMs from the autograd engine
    assert te.issue("attn_out", "B", 1)[2] == te.dispatch("B")
    # no work there: nothing issued, nothing extra
    assert te.issue("residual1", "B", 0) == (0, 0.0, 0.0)


def test_cuda_graphs_and_the_override_set_the_host_and_keep_the_extra_kernels():
    graphs = HostModel.of("megatron_core", None, True, True, 1e6)
    assert (graphs.forward_s, graphs.backward_s, graphs.module_s) == (0.0, 0.0, 0.0)
    assert graphs.issue("residual1", "B", 1) == (1, 3e6, 0.0)  # the sum still runs, 3 passes
    fixed = HostModel.of("megatron_core", 2e-6, False, True, 0.0)
    assert fixed.issue("qkv", "F", 1)[2] == 2e-6  # the module at the stated dispatch
    assert HostModel.of("megatron_core", None, False, False, 0.0).extras == {}


@pytest.mark.parametrize("k", [1, 3, 8])
def test_an_item_carrying_its_host_time_races_as_k_kernels_issued_host_over_k_apart(k):
    """Host-bound (H/k > t/k): the GPU ends H + t/k after the pass starts; GPU-bound: t + H/k."""
    for t, host in ((4e-6, 200e-6), (800e-6, 100e-6)):
        waits = host_waits([[("c", t, 0.0, 0, k, host)]], 0.0, 7e-6)
        assert sum(waits) + t == pytest.approx(max(host + t / k, t + host / k), rel=1e-12)
        split = host_waits([[("c", t / k, 0.0, 0, 1, host / k)] * k], 0.0, 7e-6)
        assert sum(waits) == pytest.approx(sum(split), rel=1e-12, abs=1e-18)


def _launches(res, prefix: str) -> float:
    spans = res.spans[res.spans.name.str.startswith(prefix)]
    return float((spans.end_s - spans.start_s).sum())


def test_the_extra_kernels_add_their_launches_to_the_launch_op_and_nothing_without_work():
    """With no host, a pass's launch op grows by exactly its extra kernels × the launch."""
    from clustersim.workload.cost_model import efficiency_for

    launch = efficiency_for(H100).launch_s
    layers, m = LLAMA["model"]["layers"], 2
    for framework in STACKS:
        on = _run(_raw(framework, fixed_costs={"host_dispatch": 0}))
        off = _run(_raw(framework, fixed_costs={"host_dispatch": 0, "small_kernels": False}))
        rows = extra_kernels(framework)
        fwd = sum(k for (op, ph), (k, _, _) in rows.items() if ph == "F" and op != "attn_context")
        bwd = sum(k for (op, ph), (k, _, _) in rows.items() if ph != "F")
        for phase, extra in (("launch F", fwd), ("launch B", bwd)):
            grown = _launches(on, phase) - _launches(off, phase)
            assert grown == pytest.approx(layers * m * extra * launch, rel=1e-9), (framework, phase)
        assert on.summary["iteration_time_s"] >= off.summary["iteration_time_s"]


def test_host_bound_s_is_the_waits_and_the_whole_gap_on_one_gpu():
    """On one GPU the step is one chain: host_bound_s is the time the host adds to it."""
    for framework in ("megatron_core", "fsdp2"):
        eager = _run(_raw(framework))
        bare = _run(_raw(framework, fixed_costs={"host_dispatch": 0}))
        gap = eager.summary["iteration_time_s"] - bare.summary["iteration_time_s"]
        assert eager.summary["host_bound_s"] == pytest.approx(gap, rel=1e-9)
        assert "host_bound_s" not in bare.summary
    graphs = _run(_raw("megatron_core", cuda_graphs=True))
    assert "host_bound_s" not in graphs.summary


def _forward_s(res) -> float:
    """Compute-lane seconds of the forward passes (their launch ops and kernels)."""
    sp = res.spans[res.spans.lane == "compute"]
    fwd = sp[sp.name.str.contains(r" F\d+$") & ~sp.name.str.startswith("framework")]
    return float((fwd.end_s - fwd.start_s).sum())


def test_a_te_model_small_enough_is_host_bound_by_its_modules():
    """Megatron-Core's four TE linears cost 4 × the measured module time of host per layer's
    forward: a forward whose kernels take less lasts at least that on the GPU (its last kernel
    cannot start before the host has issued it)."""
    layers, m = LLAMA["model"]["layers"], 2
    bound = m * layers * 4 * _calibrated("te_module", "module")
    assert _forward_s(_run(_raw("megatron_core"))) >= bound
    assert _forward_s(_run(_raw("megatron_core", fixed_costs={"host_dispatch": 0}))) < bound / 2


@settings(max_examples=8, deadline=None)
@given(
    hidden=st.sampled_from([128, 512]),
    micro=st.sampled_from([1, 4]),
    framework=st.sampled_from(sorted(STACKS)),
    tp=st.sampled_from([1, 2]),
    overlap=st.booleans(),
)
def test_host_pricing_adds_no_op_nor_event_and_never_speeds_a_step_up(hidden, micro, framework, tp, overlap):
    raw = _raw(framework, micro_batch=micro, global_batch=2 * micro)
    raw["model"]["hidden"] = hidden
    raw["cluster"]["gpus_per_node"] = tp
    raw["cluster"]["comm_compute_slowdown"] = 1  # compute re-rated beside NCCL costs events by timing
    raw["parallel"] = {**raw["parallel"], "tp": tp, "sequence_parallel": tp > 1}
    if tp > 1 and overlap:  # TE's userbuffers: a GEMM's module time rides with its chunks
        raw["parallel"]["tp_comm_overlap"] = True
    priced = _run(raw)
    bare = copy.deepcopy(raw)
    bare["training"]["fixed_costs"] = {"host_dispatch": 0, "small_kernels": False}
    without = _run(bare)
    assert priced.summary["iteration_time_s"] >= without.summary["iteration_time_s"]
    assert len(priced.spans) == len(without.spans)
    assert priced.summary["sim_events"] == without.summary["sim_events"]


@pytest.mark.parametrize("k", [1, 5, 24])
def test_a_pass_of_k_equal_kernels_waits_the_closed_form_forward_and_backward(k):
    """Host-bound (τ < dispatch): the GPU ends k·d + τ after the pass starts, so it waited
    k·d + τ − k·τ; GPU-bound: it waits only for the first issue, d. The forward's d is the
    Python rate, the backward's the autograd engine's."""
    from clustersim.workload.stage_builder import FixedCosts

    fwd, bwd = _calibrated("pytorch_eager", "dispatch"), _calibrated("autograd_engine", "dispatch")
    fixed = FixedCosts(0.0, 0.0, False, False, False, False, host=HostModel(fwd, bwd))
    for d, backward in ((fwd, False), (bwd, True)):
        short = [("c", 2e-6, 0.0, 0, 1, None)] * k
        assert fixed.wait(short, backward) == pytest.approx(k * d + 2e-6 - k * 2e-6, rel=1e-12)
        long = [("c", 50e-6, 0.0, 0, 1, None)] * k
        assert fixed.wait(long, backward) == pytest.approx(d, rel=1e-12)


def _row(stack: str, quantity: str) -> float:
    with HOST_CSV.open() as fh:
        (row,) = [
            r
            for r in csv.DictReader(fh)
            if (r["stack"], r["quantity"], r["role"]) == (stack, quantity, "calibrate")
        ]
    return float(row["value_us"]) * 1e-6


def test_an_fp8_te_module_costs_twice_the_bf16_one_and_covers_its_casts():
    """TE #761: an FP8 te.Linear's forward schedules in over twice the BF16 one's host time:
    the ``module_fp8`` row is 2 × the BF16 module (115 µs, TE PR #1191); the module issues its
    casts itself, so an op of k kernels (GEMM and casts) and e extra kernels costs
    module_fp8 + e · dispatch, where BF16 counts its k − 1 other kernels at the dispatch."""
    assert _row("te_module", "module_fp8") == pytest.approx(2 * _row("te_module", "module"), rel=1e-12)
    fp8 = HostModel.of("megatron_core", None, False, True, 0.0, fp8=True)
    bf16 = HostModel.of("megatron_core", None, False, True, 0.0)
    assert (fp8.module_s, fp8.module_covers_work) == (_row("te_module", "module_fp8"), True)
    assert (bf16.module_s, bf16.module_covers_work) == (_row("te_module", "module"), False)
    extras = {("qkv", "F"): (1, 0.0, 1)}
    k = 3  # the GEMM and two casts
    one = HostModel(fp8.forward_s, fp8.backward_s, fp8.module_s, extras, 0.0, True)
    assert one.issue("qkv", "F", k)[2] == pytest.approx(fp8.module_s + 1 * fp8.forward_s, rel=1e-12)
    apart = HostModel(fp8.forward_s, fp8.backward_s, fp8.module_s, extras, 0.0, False)
    assert apart.issue("qkv", "F", k)[2] == pytest.approx(
        fp8.module_s + (k + 1 - 1) * fp8.forward_s, rel=1e-12
    )
    # a torch module (DeepSpeed, FSDP2) has no FP8 row of its own: its module time stays
    assert HostModel.of("fsdp2", None, False, True, 0.0, fp8=True).module_s == _row("torch_module", "module")
    assert not HostModel.of("fsdp2", None, False, True, 0.0, fp8=True).module_covers_work
