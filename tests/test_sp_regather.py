"""Sequence parallelism's backward re-gather of the column-parallel inputs
(clustersim.workload.sp_regather): where it is inserted, its bytes, the dgrad beside it, the
profiles that do it, and Korthikanti Table 4's SP backward as a closed form."""

from __future__ import annotations

from dataclasses import replace

import pytest

import clustersim as cs
from clustersim.hardware.comm_contention import beside_rate, pair_seconds
from clustersim.hardware.interference import nccl_ctas
from clustersim.validation import korthikanti
from clustersim.workload.cost_model import CostModel
from clustersim.workload.model_presets import TRANSFORMER_PRESETS
from clustersim.workload.ops import LayerOp, TPComm
from clustersim.workload.segments import backward_items
from clustersim.workload.sp_regather import NAME, REGATHERS, regathers, with_regather
from clustersim.workload.stage_cost import chunk_costs
from clustersim.workload.transformer_ops import layer_ops

CFG = TRANSFORMER_PRESETS["gpt-22b"][0]


def test_one_regather_after_each_column_parallel_linear_with_the_gathers_bytes():
    layer = layer_ops(CFG, 4, 8, True, 2)
    out = with_regather(layer)
    names = [op.name for op in out]
    added = [op for op in out if isinstance(op, TPComm) and op.name == NAME]
    assert len(added) == 2 and len(out) == len(layer) + 2
    assert [names[names.index(NAME) - 1], names[len(names) - 1 - names[::-1].index(NAME) - 1]] == [
        "qkv",
        "mlp_up",
    ]
    gather = next(op for op in layer if isinstance(op, TPComm) and op.fwd == "all_gather")
    assert all((op.fwd, op.bwd, op.nbytes) == ("", "all_gather", gather.nbytes) for op in added)
    assert gather.nbytes == 4 * CFG.seq_len * CFG.hidden * 2  # [b, s, h] in 16 bits
    # without SP the region is entered by the identity (no gather to repeat)
    assert with_regather(layer_ops(CFG, 4, 8, False, 2)) == layer_ops(CFG, 4, 8, False, 2)


def test_the_dgrad_runs_beside_the_regather_and_the_wgrad_after():
    cm = CostModel.for_gpu("A100-SXM4-80GB")
    ops = with_regather(layer_ops(CFG, 4, 8, True, 2))
    items = backward_items(ops, cm)
    qkv = next(op for op in ops if isinstance(op, LayerOp) and op.name == "qkv")
    # the last re-gather of the backward is QKV's (the MLP's comes first)
    i = max(k for k, it in enumerate(items) if it[0] == "x" and it[3] == NAME and it[1] == "all_gather")
    dgrad, wgrad = items[i + 1], items[i + 2]
    assert dgrad[0] == "p" and dgrad[1] == pytest.approx(cm.time(qkv.bwd_input, "qkv", "B"), rel=1e-12)
    assert wgrad[0] == "c" and wgrad[1] == pytest.approx(cm.time(qkv.bwd_weight, "qkv", "W"), rel=1e-12)
    assert items[i + 3][0] == "x" and items[i + 3][1] == "reduce_scatter"  # then the enter's backward


def test_which_profiles_regather():
    """Megatron-LM, Megatron-Core and Megatron-DeepSpeed save the sharded input; torchtitan's
    DTensor sequence parallelism saves the gathered one."""
    assert REGATHERS == {"megatron_2021": True, "megatron_core": True, "deepspeed": True, "fsdp2": False}
    assert regathers("megatron_core") and not regathers("fsdp2")


def _raw(parallel: dict, framework: str = "megatron_2021") -> dict:
    return {
        "cluster": {"preset": "dgx_h100", "nodes": 1},
        "model": {"preset": "gpt-1.3b", "layers": 2},
        "training": {"global_batch": 8, "micro_batch": 1, "framework": framework},
        "parallel": {"tp": 8, "pp": 1, "dp": 1, **parallel},
        "simulation": {"network": "analytical", "collective_model": "analytical", "granularity": "layer"},
    }


def _regathers_in(parallel: dict, framework: str = "megatron_2021") -> int:
    prog = cs.compile_scenario(cs.load_scenario(_raw(parallel, framework)))
    return sum(1 for op in prog.ops if op.kind == "collective" and op.name == NAME)


def test_the_program_regathers_under_sp_and_te_moves_it_in_bulk():
    # 2 layers × 2 linears × 8 micro-batches, one op per TP rank
    assert _regathers_in({"sequence_parallel": True}) == 2 * 2 * 8 * 8
    assert _regathers_in({"sequence_parallel": False}) == 0
    # TP overlap: userbuffers' bulk overlap moves it beside the dgrad GEMM (no NCCL call)
    overlapped = {"sequence_parallel": True, "tp_comm_overlap": True}
    assert _regathers_in(overlapped, "megatron_core") == 0
    cost = chunk_costs(cs.load_scenario(_raw(overlapped, "megatron_core")), 1)[0]
    bulk = [s for s in cost.segments("B") if s.kind == "overlap" and s.name == NAME]
    assert len(bulk) == 2 * 2 and {(s.method, s.collective) for s in bulk} == {("bulk", "all_gather")}
    # fsdp2's DTensor SP saves the gathered input: its profile gathers nothing again
    assert _regathers_in({"sequence_parallel": True}, "fsdp2") == 0
    assert _regathers_in({"sequence_parallel": True}, "deepspeed") == 2 * 2 * 8 * 8


def test_korthikanti_sp_backward_adds_what_the_dgrad_does_not_hide():
    """Table 4's SP backward: the serial sum plus, per re-gather, what its pair with the dgrad
    adds to the dgrad alone — the two start together, the dgrad slowed by NCCL's CTAs, the
    all-gather by the dgrad (comm_contention), each at its rate alone once the other has ended,
    and the next kernel waits for both."""
    cm = replace(CostModel.for_gpu("A100-SXM4-80GB"), nccl_ctas=nccl_ctas("A100-SXM4-80GB"))
    rate = beside_rate("A100-SXM4-80GB", 24, 108)
    plain = layer_ops(CFG, 4, 8, True, 2)
    for recompute in ("none", "selective"):
        _, b = korthikanti.layer_times(recompute, True)
        rec = {"none": [], "selective": korthikanti.forward_items(plain, cm, core_only=True)}[recompute]
        serial = korthikanti._run(rec + backward_items(plain, cm), 8)
        items = backward_items(with_regather(plain), cm)
        gathers = [(items[i], items[i + 1]) for i, it in enumerate(items) if it[0] == "x" and it[3] == NAME]
        added = sum(
            pair_seconds(d[1], korthikanti._beside_s(d), korthikanti._run([g], 8), rate) - d[1]
            for g, d in gathers
        )
        assert b == pytest.approx(serial + added, rel=1e-9)
