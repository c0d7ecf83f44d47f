"""Communication slowed by the SMs it is left (clustersim.hardware.comm_sms): every
kernel-level row of data/comm_sm_bandwidth.csv against its fitted curve, NCCL link-bound at
its own channels, the engine's stretch of a DeepEP collective as a closed form, and where the
flex dispatcher carries it."""

from __future__ import annotations

import pytest
import simpy

import clustersim as cs
from clustersim.engine.interpreter import Engine
from clustersim.hardware.comm_sms import NCCL_PER_CHANNEL_GBPS, TOLERANCE, curves, sm_rate, stretched
from clustersim.hardware.interference import nccl_ctas, slowdown_of, sm_budget
from clustersim.network import DirectFabric
from clustersim.record import Recorder


@pytest.mark.parametrize("key", sorted(curves()))
def test_every_row_is_within_its_stated_tolerance_of_its_curve(key):
    curve = curves()[key]
    assert len(curve.rows) >= 3
    for sms, measured in curve.rows:
        assert curve.bandwidth(sms) == pytest.approx(measured, rel=TOLERANCE[key[1]]), (key, sms)


def test_nccl_at_its_own_channels_is_link_bound():
    """H200's per-CTA all-reduce rate × its 24 channels is over twice the ~370 GB/s bus
    bandwidth NCCL reaches on NVLink4 (NVIDIA/nccl-tests#212, sjeaugey: 'effective NVLink
    bandwidth of 370GB/s'), A100's own rows × its 24 over 1.5 × the ~230 GB/s it reaches on
    NVLink3 (NVIDIA/nccl-tests#149, sjeaugey): NCCL's collectives are not stretched by their
    SMs."""
    assert sm_rate("H200-SXM-141GB", "nccl", "all_reduce") * nccl_ctas("H200-SXM-141GB") > 2 * 370e9
    assert sm_rate("A100-SXM4-80GB", "nccl", "all_reduce") * nccl_ctas("A100-SXM4-80GB") > 1.5 * 230e9


def test_userbuffers_16_sms_are_link_bound_at_nccls_per_cta_rate():
    """TE userbuffers' pipeline and bulk kernels hold 16 SMs; at NCCL's per-CTA copy rate (H200
    all-reduce rows; userbuffers' own by SM count were not found: a stated transfer) 16 SMs
    carry over 1.5 × NVLink4's ~370 GB/s, so TP overlap's transfers are not stretched."""
    for kind in ("tp_pipeline", "tp_bulk"):
        assert sm_rate("H200-SXM-141GB", "nccl", "all_reduce") * sm_budget(kind).comm_sms > 1.5 * 370e9


def test_blackwell_takes_hoppers_nccl_rate_by_nccls_own_per_channel_constants():
    """B200 has no NCCL row by CTA count: it takes H200's per-CTA rate × NCCL's per-channel
    ring bandwidths' ratio (tuning.cc perChMaxRingLL128Bws: Blackwell 40.0 / Hopper 36.7).
    NCCL's Hopper constant is H200's measured rate within the rows' tolerance, its Ampere
    constant within 25 % of A100's rows (above them). H100 and H800 take H200's unchanged;
    a family without a constant takes no NCCL rate."""
    h200, a100 = (sm_rate(g, "nccl", "all_reduce") for g in ("H200-SXM-141GB", "A100-SXM4-80GB"))
    per_channel = NCCL_PER_CHANNEL_GBPS
    assert sm_rate("B200-SXM-180GB", "nccl", "all_reduce") == pytest.approx(
        h200 * per_channel["B200"] / per_channel["H200"], rel=1e-12
    )
    assert per_channel["H200"] * 1e9 == pytest.approx(h200, rel=TOLERANCE["nccl"])
    assert 1.0 < per_channel["A100"] * 1e9 / a100 < 1.25
    for gpu in ("H100-SXM5-80GB", "H800-SXM5-80GB"):
        assert sm_rate(gpu, "nccl", "all_reduce") == h200
    for gpu in ("B300-SXM-288GB", "GB200-186GB"):
        assert sm_rate(gpu, "nccl", "all_reduce") == 0.0
    # DeepEP's transfers are not scaled: B200 keeps its own rows, H800 takes them as they are
    assert sm_rate("H800-SXM5-80GB", "deepep", "combine") == sm_rate("B200-SXM-180GB", "deepep", "combine")


def test_deepep_on_blackwell_is_sm_bound_and_hopper_takes_a_stated_transfer():
    """On B200 DeepEP's 20 SMs copy ~450 GB/s of BF16 dispatch, below the ~700 GB/s its
    NVLink domain reaches at 64 SMs (DeepEP README, V2 table); H800 has no rows and takes
    B200's per-SM rate."""
    sms = sm_budget("deepep").comm_sms
    assert 300e9 < sm_rate("B200-SXM-180GB", "deepep", "dispatch_bf16") * sms < 700e9
    assert sm_rate("H800-SXM5-80GB", "deepep", "combine") == sm_rate("B200-SXM-180GB", "deepep", "combine")
    assert sm_rate("MI300X-192GB", "deepep", "combine") == 0.0


def test_stretched_is_the_smooth_minimum_of_the_rates():
    assert stretched(3.0, 0.0) == 3.0 and stretched(0.0, 2.0) == 2.0
    assert stretched(3.0, 4.0) == pytest.approx((3.0**4 + 4.0**4) ** 0.25, rel=1e-15)
    assert max(3.0, 4.0) < stretched(3.0, 4.0) < 3.0 + 4.0


def _collective_end(held: tuple) -> tuple[float, dict]:
    """End of a 2 MiB all-to-all between two GPUs on a 25 GB/s fabric whose ops carry
    ``held`` (:attr:`Op.beside`), and the engine's ``comm_slowed_s``."""
    prog = cs.Program(2)
    kw = {"nbytes": 2**21, "group": (0, 1), "collective": "all_to_all", "tag": "d", "beside": held}
    [prog.add(dev, "ep", "collective", "ep dispatch", **kw) for dev in (0, 1)]
    env, rec = simpy.Environment(), Recorder()
    fabric = DirectFabric(env, rec, 25e9, 0.0)
    engine = Engine(prog, env, fabric, rec, [2**40] * 2, alpha=0.0, comm_compute_slowdown=slowdown_of(132))
    engine.run()
    return max(e for _, _, e in rec.ops), engine.comm_slowed_s


def test_the_engine_ends_a_deepep_collective_at_the_smooth_minimum():
    link, none = _collective_end((20,))
    assert none == {}
    rate = 20 * 5e9  # bytes/s its SMs copy: the SMs alone take 2 MiB / 100 GB/s
    end, slowed = _collective_end((20, rate))
    assert end == pytest.approx(stretched(link, 2**21 / rate), rel=1e-12)
    assert slowed == {0: pytest.approx(end - link, rel=1e-9), 1: pytest.approx(end - link, rel=1e-9)}


def _flex(gpu_preset: str, slowdown=None) -> cs.Program:
    cluster = {"preset": gpu_preset, "nodes": 1}
    if slowdown is not None:
        cluster["comm_compute_slowdown"] = slowdown
    raw = {
        "cluster": cluster,
        "model": {"hf_config": "qwen3-30b-a3b", "seq_len": 1024, "layers": 1},
        "training": {"global_batch": 8, "micro_batch": 1, "precision": "bf16", "framework": "megatron_core"},
        "parallel": {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "moe_token_dispatcher": "flex"},
        "simulation": {"network": "analytical", "collective_model": "analytical", "granularity": "layer"},
    }
    return cs.compile_scenario(cs.load_scenario(raw))


def test_flex_collectives_carry_their_sms_rate_only_with_interference_on():
    """On DGX B200 the forward dispatch carries 20 SMs' BF16 dispatch rate and the combine
    the combine rate (their backwards the other way round); with ``comm_compute_slowdown: 1``
    only the SM count."""
    sms = sm_budget("deepep").comm_sms
    rates = {k: sms * sm_rate("B200-SXM-180GB", "deepep", k) for k in ("dispatch_bf16", "combine")}
    ops = [op for op in _flex("dgx_b200").ops if op.kind == "collective" and op.name.startswith("ep ")]
    assert {op.beside[0] for op in ops} == {sms}
    assert {op.beside[1] for op in ops} == set(rates.values())
    off = [op for op in _flex("dgx_b200", 1).ops if op.kind == "collective" and op.name.startswith("ep ")]
    assert off and all(op.beside == (sms,) for op in off)
