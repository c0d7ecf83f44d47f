"""Compute cost model and TP segments: Korthikanti Table 4, shape efficiency, profiles."""

from __future__ import annotations

import pytest

import clustersim as cs
from clustersim.validation.data import read_table
from clustersim.validation.korthikanti import layer_times
from clustersim.workload.cost_model import (
    CostModel,
    Efficiency,
    ProfileTable,
    efficiency_for,
    gemm_batch,
    matmul_efficiency,
)
from clustersim.workload.ops import gemm
from clustersim.workload.stage_cost import chunk_costs

MODES = {
    "baseline no recompute": ("none", False),
    "sequence parallelism": ("none", True),
    "baseline full recompute": ("full", False),
    "selective recompute": ("selective", False),
    "selective + sequence": ("selective", True),
}


# the sequence-parallel rows hold since an all-gather or reduce-scatter pays half the
# protocol latency of an all-reduce (NCCL tuning.cc: n − 1 ring steps against 2(n − 1));
# with the full latency per call their forward missed by +6.4 % (issue 36)
@pytest.mark.parametrize("row", read_table("korthikanti_table4_layer_times"), ids=lambda r: r["experiment"])
def test_22b_layer_within_5_percent_of_korthikanti_table4(row):
    # one 22B layer, TP = 8 on the dgx_a100 preset's NVSwitch, b = 4, s = 2048; A100 is
    # calibrated on kernel-level rows only, so every row is a check (issue 16's must-hold:
    # every row within 5 %)
    f, b = layer_times(*MODES[row["experiment"]])
    assert f * 1e3 == pytest.approx(float(row["forward_ms"]), rel=0.05)
    assert b * 1e3 == pytest.approx(float(row["backward_ms"]), rel=0.05)


def test_small_gemms_are_less_efficient():
    eff = efficiency_for("A100-SXM4-80GB")
    big, thin, tiny = (
        matmul_efficiency(eff, s) for s in [(8192, 8192, 8192), (8192, 8192, 128), (64, 64, 64)]
    )
    assert big > thin > tiny and big <= eff.matmul_max


#: shape constants off (dim_half, k_half 0): only the tile grid and its waves count
BARE = Efficiency(matmul_max=0.8, dim_half=0.0, memory=0.8, launch_s=0.0, sms=132)


def test_a_partial_last_wave_wastes_the_rest_of_the_sms():
    # 132 tiles of 128 × 128 fill H100's 132 SMs once; one tile more needs a second wave
    # in which 131 SMs idle: 133 / 264 of the launched tile-slots are useful
    full = matmul_efficiency(BARE, (128 * 132, 128, 8192))
    assert full == pytest.approx(0.8)
    assert matmul_efficiency(BARE, (128 * 133, 128, 8192)) == pytest.approx(0.8 * 133 / 264)
    # a ragged edge pads its tile: M = 100 runs in 128-row tiles
    assert matmul_efficiency(BARE, (100 * 132, 128, 8192)) == pytest.approx(0.8 * 100 / 128, rel=0.03)


def test_a_small_grid_splits_k_and_pays_the_k_prologue_per_slice():
    eff = Efficiency(matmul_max=0.8, dim_half=0.0, memory=0.8, launch_s=0.0, k_half=128.0, sms=132)
    # 33 tiles: split-K in 4 fills the 132 SMs with K/4 = 2048 slices
    got = matmul_efficiency(eff, (128 * 33, 128, 8192))
    assert got == pytest.approx(0.8 * 2048 / (2048 + 128))
    assert got > 0.8 * 33 / 132 * 8192 / (8192 + 128)  # one wave of 33 tiles, unsplit
    # the K term: a longer K amortises the prologue; large K tends to matmul_max
    by_k = [matmul_efficiency(eff, (8192, 8192, k)) for k in (256, 1024, 4096, 65536)]
    assert by_k == sorted(by_k) and by_k[-1] < 0.8


def test_a_batched_product_fills_the_waves_with_its_batch():
    # one 128 × 128 output is one tile; 132 of them in one kernel fill every SM
    assert matmul_efficiency(BARE, (128, 128, 4096), batch=132) == pytest.approx(0.8)
    # alone, it splits K at most 16 ways (SPLITS): 16 of 132 SMs busy
    assert matmul_efficiency(BARE, (128, 128, 4096)) == pytest.approx(0.8 * 16 / 132)
    assert gemm_batch(gemm("bmm", 128, 128, 64, 2, weight=False, batch=96).fwd) == 96


def test_roofline_memory_bound_and_launch_floor():
    cm = CostModel.for_gpu("A100-SXM4-80GB")
    skinny = gemm("gemv", 1, 8192, 8192, 2)  # matrix-vector: limited by bytes, not FLOPs
    bytes_time = skinny.fwd.bytes / (cm.gpu.hbm_bandwidth * cm.eff.memory)
    assert cm.time(skinny.fwd) == pytest.approx(bytes_time + cm.eff.launch_s)
    assert cm.time(gemm("t", 1, 1, 1, 2).fwd) >= cm.eff.launch_s


def test_profile_table_overrides_matching_ops(tmp_path):
    csv = tmp_path / "prof.csv"
    csv.write_text("op,phase,m,n,k,time_us\nqkv,F,,,,1000\nmlp_up,F,1,2,3,5\n")
    table = ProfileTable.read(csv)
    cm = CostModel.for_gpu("A100-SXM4-80GB", table)
    op = gemm("qkv", 2048, 768, 6144, 2)
    assert cm.time(op.fwd, "qkv", "F") == pytest.approx(1e-3)
    assert cm.time(op.bwd_input, "qkv", "B") != pytest.approx(1e-3)  # other phases: the model
    assert table.lookup("mlp_up", "F", (9, 9, 9)) is None


def _costs(tp=8, sp=False, recompute="none", granularity="layer", zero=0, dp=1, precision="bf16", layers=2):
    sc = cs.load_scenario(
        {
            "cluster": {"preset": "dgx_a100", "nodes": dp},
            "model": {"preset": "gpt-22b", "layers": layers},
            "training": {
                "global_batch": 4 * dp,
                "micro_batch": 4,
                "recompute": recompute,
                "precision": precision,
            },
            "parallel": {
                "tp": tp,
                "pp": 8 // tp,
                "dp": dp,
                "sequence_parallel": sp,
                "zero": zero,
                **({"pp": 2} if tp == 4 else {}),
            },
            "simulation": {"granularity": granularity},
        }
    )
    return chunk_costs(sc, sc.parallel.pp)


def _colls(cost, phase):
    return [s.collective for s in cost.segments(phase) if s.kind == "collective"]


def test_megatron_tp_collectives_per_layer():
    # pp = 1: the chunk holds the embedding (1 all-reduce forward), 2 layers and the output layer
    c = _costs()[0]
    assert _colls(c, "F") == ["all_reduce"] * (1 + 2 * 2)
    assert _colls(c, "B") == ["all_reduce"] * (2 * 2 + 1)  # 2 per layer + the logits' input grad
    full = _costs(recompute="full")[0]
    assert _colls(full, "B") == ["all_reduce"] * (1 + 2 * 4)  # recomputed forwards add 2 per layer
    # full recompute re-runs each layer's forward inside the backward: exactly the forward
    # time two more layers add (the embedding and logits are not recomputed)
    two_more = _costs(layers=4)[0].forward - c.forward
    assert full.backward - c.backward == pytest.approx(two_more, rel=1e-12)


def test_sequence_parallel_uses_all_gather_and_reduce_scatter():
    c = _costs(sp=True)[0]
    f = _colls(c, "F")
    assert f.count("all_gather") == 2 * 2 + 1 and f.count("reduce_scatter") == 2 * 2 + 1
    assert "all_reduce" not in f


def test_stage_granularity_keeps_time_and_ends_on_compute():
    layer, stage = _costs()[0], _costs(granularity="stage")[0]
    assert stage.forward == pytest.approx(layer.forward)
    assert sum(s.nbytes for s in stage.segments("F")) == sum(s.nbytes for s in layer.segments("F"))
    # the pass's kernel launches (training.fixed_costs), then compute halves around one collective
    assert [s.name for s in stage.segments("F")] == ["launch", "", "tp all_reduce", ""]
    assert stage.segments("F")[-1].kind == "compute"


def test_dp_gradient_and_zero_bytes():
    c0 = _costs(tp=8, dp=2)[0]
    params = c0.static.weights / 2  # bf16 weights: 2 bytes/param
    assert c0.grad_bytes == pytest.approx(4 * params, rel=1e-9)  # fp32 main_grad all-reduce
    assert _costs(tp=8, dp=2, precision="fp16")[0].grad_bytes == pytest.approx(4 * params, rel=1e-9)
    assert _costs(tp=8, dp=2, zero=3)[0].grad_bytes == pytest.approx(1.5 * 4 * params, rel=1e-9)
    assert _costs(tp=8, dp=2, zero=1)[0].optimizer < c0.optimizer
