"""benchmarks/gpu_profile.py without a GPU: with a fake timer its tables round-trip through
the readers clustersim uses (``model.profile``'s ProfileTable, the calibration's
``read_measurements``), the cost model takes the profiled times, the kernel rows give back
the efficiencies that made them, and without a GPU the script says so and exits 2."""

from __future__ import annotations

import csv
import importlib.util
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from clustersim.hardware.gpus import get_gpu
from clustersim.workload.calibration import fit_gemm, gemm_seconds, read_measurements, sm_count
from clustersim.workload.cost_model import CostModel, Efficiency, ProfileTable
from clustersim.workload.model_presets import TRANSFORMER_PRESETS
from clustersim.workload.ops import LayerOp
from clustersim.workload.transformer_ops import layer_ops

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_profile.py"
_spec = importlib.util.spec_from_file_location("gpu_profile", SCRIPT)
gp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gp)

GPU = "H100-SXM5-80GB"
#: the efficiencies the fake GPU runs at, under the calibration's own GEMM model (wave
#: quantization over the GPU's SMs, a K term): the kernel rows must give them back
EFF = Efficiency(matmul_max=0.74, dim_half=37.0, memory=0.86, launch_s=6e-6, k_half=48.0, sms=sm_count(GPU))
FLASH_FRACTION = 0.45
CONFIG = ("gpt-22b", 4, 8)


class FakeTimer:
    """Seconds from closed forms (the cost model's own roofline under EFF), counting calls."""

    device, software = "Fake GPU", "no torch"

    def __init__(self):
        self.calls = Counter()

    def matmul(self, batch, m, n, k):
        self.calls["matmul", batch, m, n, k] += 1
        return batch * gemm_seconds(GPU, EFF, m, n, k, "bf16")

    def flash(self, b, heads, kv_heads, s, d, causal, backward):
        self.calls["flash", b, heads, kv_heads, s, d, causal, backward] += 1
        flops = gp.flash_forward_flops(b, s, heads, d, causal) * (gp.FLASH_BACKWARD_FACTOR if backward else 1)
        return flops / (FLASH_FRACTION * get_gpu(GPU).peak_flops)

    def elementwise(self, kind, shape, backward):
        self.calls["elementwise", kind, shape, backward] += 1
        elements = shape[0] * shape[1] * shape[2]
        return elements * (6 if backward else 4) / get_gpu(GPU).hbm_bandwidth + 1e-6

    def stream(self, kind, elements):
        self.calls["stream", kind, elements] += 1
        arrays = {"copy": 2, "triad": 3}[kind]
        return arrays * 4 * elements / (get_gpu(GPU).hbm_bandwidth * EFF.memory)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    timer = FakeTimer()
    out = tmp_path_factory.mktemp("profile")
    configs = [gp.parse_config(c) for c in gp.DEFAULT_CONFIGS]  # CONFIG among them
    return timer, gp.run(timer, GPU, configs, ["flash", "standard"], out)


def _fake_time(op, phase, work, cfg):
    timer, (b, tp) = FakeTimer(), CONFIG[1:]
    if work.gemm is not None:
        m, n, k = work.gemm
        return timer.matmul(round(work.flops / (2.0 * m * n * k)), m, n, k)
    if work.attention is not None:
        return timer.flash(
            b, cfg.heads // tp, cfg.n_kv // tp, cfg.seq_len, cfg.head_dim, cfg.causal, phase != "F"
        )
    return timer.elementwise(op.name, (b * cfg.heads // tp, cfg.seq_len, cfg.seq_len), phase != "F")


@pytest.mark.parametrize("attention", ["flash", "standard"])
def test_profile_table_is_read_by_the_cost_model(profiled, attention):
    _, paths = profiled
    path = next(p for p in paths if p.name == f"gpt-22b-b4-tp8-{attention}.csv")
    with path.open() as fh:
        assert {r["gpu"] for r in csv.DictReader(fh)} == {GPU}  # the GPU it came from
    table = ProfileTable.read(path)
    cm = CostModel.for_gpu(GPU, table)
    cfg = replace(TRANSFORMER_PRESETS[CONFIG[0]][0], attention=attention)
    timed = 0
    for op in layer_ops(cfg, CONFIG[1], CONFIG[2], False, 2):
        if not isinstance(op, LayerOp):
            continue
        for phase, work in (("F", op.fwd), ("B", op.bwd_input), ("W", op.bwd_weight)):
            if work.gemm is None and work.attention is None and op.name not in ("softmax", "attn_dropout"):
                continue
            if work.flops == 0 and work.bytes == 0:
                continue
            # the cost model prices the op at the profiled time, not by its roofline
            assert cm.time(work, op.name, phase) == pytest.approx(_fake_time(op, phase, work, cfg), rel=1e-12)
            timed += 1
    assert timed == len(table.times)
    kinds = {k[0] for k in table.times}
    assert ("flash_attention" in kinds) == (attention == "flash") and ("softmax" in kinds) == (
        attention == "standard"
    )


def test_kernel_rows_give_back_the_efficiencies_that_made_them(profiled):
    _, paths = profiled
    rows = read_measurements(next(p for p in paths if p.name == "kernels.csv"))
    assert {r.gpu for r in rows} == {GPU}
    (triad,) = [r for r in rows if r.kernel == "stream_triad"]
    memory = triad.value * 1e12 / get_gpu(GPU).hbm_bandwidth
    assert memory == pytest.approx(EFF.memory, rel=1e-12)
    gemms = [r for r in rows if r.kernel == "gemm"]
    # the default configurations' shapes pin all four constants (one model's shapes alone
    # are permutations of a few sizes, along which matmul_max and dim_half trade off)
    assert len(gemms) == len({(r.m, r.n, r.k) for r in gemms}) >= 30
    fitted = fit_gemm(GPU, gemms, memory)
    for field in ("matmul_max", "dim_half", "launch_s", "k_half"):
        assert getattr(fitted, field) == pytest.approx(getattr(EFF, field), rel=1e-6), field
    flash = [r for r in rows if r.kernel.startswith("attention_")]
    assert {r.kernel for r in flash} == {"attention_fwd", "attention_bwd"}
    for r in flash:
        assert r.value == pytest.approx(FLASH_FRACTION * get_gpu(GPU).peak_flops / 1e12, rel=1e-12)


def test_each_distinct_kernel_is_timed_once(profiled):
    timer, _ = profiled
    assert timer.calls and set(timer.calls.values()) == {1}


def test_config_words_are_checked():
    assert gp.parse_config("llama3-8b:1:1") == ("llama3-8b", 1, 1)
    for bad in ("gpt-22b:4", "nope:1:1", "gpt-22b:0:8"):
        with pytest.raises(ValueError, match="preset"):
            gp.parse_config(bad)


def test_device_names_map_to_the_catalog():
    assert gp.catalog_name("NVIDIA H100 80GB HBM3") == "H100-SXM5-80GB"
    assert gp.catalog_name("NVIDIA A100-SXM4-40GB") == "A100-SXM4-40GB"
    assert (
        gp.catalog_name("NVIDIA B200") == "B200-SXM-180GB"
        and gp.catalog_name("NVIDIA GB200") == "GB200-186GB"
    )
    assert gp.catalog_name("Tesla K80") is None


def test_without_a_gpu_it_says_so_and_exits_2(tmp_path, capsys):
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a GPU is present: the script would profile it")
    except ImportError:
        pass
    assert gp.main(["--out", str(tmp_path / "p")]) == 2
    assert "no GPU to profile" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()
