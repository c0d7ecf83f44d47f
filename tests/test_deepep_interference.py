"""Compute beside a DeepEP dispatch or combine priced with DeepEP's SMs (``Buffer.num_sms``),
not NCCL's CTAs (clustersim.hardware.interference, clustersim.workload.segments): a closed
form on one GEMM beside one dispatch, the flex dispatcher's ops, and the sourced CTA rows of
the GPUs that had none."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import simpy

import clustersim as cs
from clustersim.engine.interpreter import Engine
from clustersim.hardware.interference import NCCL, interference_rows, nccl_ctas, slowdown_of, sm_budget
from clustersim.network import DirectFabric
from clustersim.record import Recorder
from clustersim.workload.cost_model import CostModel, grid_units
from clustersim.workload.ops import Work
from clustersim.workload.segments import _beside

H800 = "H800-SXM5-80GB"


def _gemm_beside(ctas: int, deepep: int):
    """An H800 cost model pricing kernels beside ``ctas`` NCCL CTAs and ``deepep`` DeepEP SMs,
    a 4096³ GEMM (its grid: 1,024 CTAs, 8 waves on 132 SMs, 9 on 132 − 16, 10 on 132 − 20:
    the two kinds cost it differently) and its seconds alone."""
    cm = replace(CostModel.for_gpu(H800), nccl_ctas=ctas, deepep_sms=deepep)
    work = Work(flops=2.0 * 4096 * 4096 * 4096, bytes=3 * 4096 * 4096 * 2, gemm=(4096, 4096, 4096))
    return cm, work, cm.time(work, "fc1", "F")


def _run(carried: tuple, duration: float, held: tuple) -> tuple[float, float]:
    """(end of one compute op of ``duration`` s carrying ``carried`` on gpu0, end of the
    all-to-all of 2 MiB between gpu0 and gpu1 started beside it, its ops' ``beside`` = ``held``)."""
    prog = cs.Program(2)
    comp = prog.add(0, "compute", "compute", "F0", duration=duration, beside=carried)
    for dev in (0, 1):
        prog.add(
            dev, "ep", "collective", "ep dispatch", nbytes=2**21, group=(0, 1), collective="all_to_all",
            tag="d", beside=held,
        )  # fmt: skip
    env, rec = simpy.Environment(), Recorder()
    fabric = DirectFabric(env, rec, 25e9, 0.0)
    Engine(prog, env, fabric, rec, [2**40] * 2, alpha=0.0, comm_compute_slowdown=slowdown_of(132)).run()
    times = {i: (s, e) for i, s, e in rec.ops}
    return times[comp.id][1], times[1][1]


def test_one_gemm_beside_one_deepep_dispatch_ends_at_the_closed_form():
    """A GEMM of D s (grid of u CTAs sized for 132 SMs) beside a DeepEP dispatch of C < D s
    runs its waves on 132 − 20 SMs: factor f = ⌈u/112⌉ / ⌈u/132⌉ while the dispatch runs,
    so it ends at C + (D − C/f); beside a NCCL all-to-all of the same bytes the waves run on
    132 − 16 (H800's 16 NCCL CTAs), and beside a kind it was not priced for at the scalar."""
    cm, work, D = _gemm_beside(nccl_ctas(H800), sm_budget("deepep").comm_sms)
    u = grid_units(cm.eff, work.gemm)
    f_deepep = math.ceil(u / (132 - 20)) / math.ceil(u / 132)
    f_nccl = math.ceil(u / (132 - 16)) / math.ceil(u / 132)
    ((carried),) = _beside(cm, [(work, D)])
    assert carried == (0.0, cm.gpu.hbm_bandwidth, (NCCL, D * f_nccl), (20, D * f_deepep))
    for held, f in (((20,), f_deepep), ((), f_nccl), ((44,), slowdown_of(132))):
        end, C = _run(carried, D, held)
        assert 0 < C < D
        assert end == pytest.approx(C + D - C / f, rel=1e-12)


def test_deepep_alone_is_priced_where_nccl_has_no_row():
    """A cost model with DeepEP's SMs and no NCCL CTAs (a GPU without a ``nccl_ring`` row)
    carries only DeepEP's pair: NCCL collectives beside it keep the scalar rule."""
    cm, work, D = _gemm_beside(0, 20)
    ((carried),) = _beside(cm, [(work, D)])
    assert [k for k, _ in carried[2:]] == [20]
    end, C = _run(carried, D, ())
    assert end == pytest.approx(C + D - C / slowdown_of(132), rel=1e-12)


def _moe(dispatcher: str) -> cs.Program:
    raw = {
        "cluster": {"preset": "dgx_h100", "nodes": 1},
        "model": {"hf_config": "qwen3-30b-a3b", "seq_len": 1024, "layers": 1},
        "training": {"global_batch": 8, "micro_batch": 1, "precision": "bf16", "framework": "megatron_core"},
        "parallel": {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "moe_token_dispatcher": dispatcher},
        "simulation": {"network": "analytical", "collective_model": "analytical", "granularity": "layer"},
    }
    return cs.compile_scenario(cs.load_scenario(raw))


def test_the_flex_dispatcher_marks_deepeps_collectives_and_prices_compute_beside_them():
    flex, plain = _moe("flex"), _moe("alltoall")
    dispatch = [op for op in flex.ops if op.kind == "collective" and op.name.startswith("ep ")]
    # DeepEP's SMs, and the bytes/s they copy (clustersim.hardware.comm_sms, tests/test_comm_sms.py)
    assert dispatch and all(op.beside[0] == sm_budget("deepep").comm_sms for op in dispatch)
    assert all(len(op.beside) == 2 and op.beside[1] > 0 for op in dispatch)
    assert all(op.beside == () for op in plain.ops if op.kind == "collective")
    kinds = {tuple(k for k, _ in op.beside[2:]) for op in flex.ops if op.kind == "compute" and op.beside}
    assert kinds == {(NCCL, 20)}
    kinds = {tuple(k for k, _ in op.beside[2:]) for op in plain.ops if op.kind == "compute" and op.beside}
    assert kinds == {(NCCL,)}


@pytest.mark.parametrize(
    "gpu, ctas",
    [(H800, 16), ("B200-SXM-180GB", 32), ("H200-SXM-141GB", 24), ("GB200-186GB", 32), ("B300-SXM-288GB", 32)],
)
def test_each_nvswitch_gpu_has_a_sourced_cta_row(gpu, ctas):
    """H800 16 (NCCL log, nccl#892) and B200 32 (nccl#1646) measured; H200 from H100 and
    the NVLink5 parts from B200 as transfers, their rows saying so; H200 NVL (NVLink
    bridges) gets none."""
    assert nccl_ctas(gpu) == ctas
    row = next(r for r in interference_rows() if r.overlap == "nccl_ring" and gpu.startswith(r.gpu))
    assert "nccl" in row.source.lower()
    assert nccl_ctas("H200-NVL-141GB") is None
