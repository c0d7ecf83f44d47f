"""Memory model: Korthikanti's figures, static bytes, schedule-driven activations, OOM."""

from __future__ import annotations

import pytest

import clustersim as cs
from clustersim.validation.korthikanti import memory_check
from clustersim.workload.memory_model import in_flight, static_bytes
from clustersim.workload.model_presets import TRANSFORMER_PRESETS
from clustersim.workload.transformer_ops import layer_ops


@pytest.mark.parametrize("row", memory_check(), ids=lambda r: f"{r['model']}-{r['quantity']}")
def test_memory_within_10_percent_of_korthikanti(row):
    assert row["predicted_gib"] == pytest.approx(row["published_gib"], rel=0.10)


@pytest.mark.parametrize(
    "t,sp,selective,formula",
    [
        (1, False, False, lambda a, s, h, t: 34 + 5 * a * s / h),
        (8, False, False, lambda a, s, h, t: 10 + 24 / t + 5 * a * s / (h * t)),
        (8, True, False, lambda a, s, h, t: (34 + 5 * a * s / h) / t),
        (8, True, True, lambda a, s, h, t: 34 / t),
    ],
)
def test_layer_activations_are_korthikanti_formulas(t, sp, selective, formula):
    c = TRANSFORMER_PRESETS["gpt3-175b"][0]
    b, s, h, a = 1, c.seq_len, c.hidden, c.heads
    ops = layer_ops(c, b, t, sp, 2)
    kept = sum(
        op.activation for op in ops if hasattr(op, "activation") and not (selective and op.attention_core)
    )
    assert kept == pytest.approx(s * b * h * formula(a, s, h, t), rel=1e-9)


def test_static_bytes_by_zero_stage():
    assert sum(static_bytes(1.0, "bf16", "adam", 0, 8)) == 18  # 2 + 4 + 12
    assert static_bytes(8.0, "bf16", "adam", 1, 8) == (16, 32, 12)  # optimizer sharded
    assert static_bytes(8.0, "bf16", "adam", 2, 8) == (16, 4, 12)
    assert static_bytes(8.0, "bf16", "adam", 3, 8) == (2, 4, 12)


def test_in_flight_follows_the_schedule():
    from clustersim.schedules import SCHEDULES

    assert in_flight(SCHEDULES["1f1b"].order(0, 4, 8)) == 4
    assert in_flight(SCHEDULES["1f1b"].order(3, 4, 8)) == 1
    assert in_flight(SCHEDULES["gpipe"].order(0, 4, 8)) == 8


@pytest.mark.parametrize("p,v,m", [(8, 6, 16), (4, 2, 8), (4, 3, 12), (2, 4, 2)])
def test_interleaved_keeps_megatrons_warm_up_plus_one_chunk_micro_batches(p, v, m):
    # Megatron-Core's interleaved 1F1B (pipeline_parallel/schedules.py): rank s runs
    # 2(p − s − 1) + (v − 1)·p warm-up forwards (capped at its m·v chunk passes), then one
    # more forward before its first backward. On the first stage that is Korthikanti et al.
    # 2022's p·(1 + (p − 1)/(p·v)) micro-batches of a whole stage: p·v + p − 1 chunk ones
    from clustersim.schedules import SCHEDULES

    order = SCHEDULES["interleaved"].order
    for s in range(p):
        assert in_flight(order(s, p, m, v)) == min(2 * (p - s - 1) + (v - 1) * p + 1, m * v)
    if m * v >= p * v + p - 1:
        assert in_flight(order(0, p, m, v)) == pytest.approx(v * p * (1 + (p - 1) / (p * v)), rel=1e-12)


@pytest.fixture(scope="module")
def base():
    return cs.load_scenario("scenarios/quickstart.yaml").with_overrides(
        {"simulation.network": "analytical", "simulation.granularity": "stage"}
    )


def _run(sc, **over):
    return cs.simulate(sc.with_overrides(over) if over else sc, progress=False)


def test_devices_carry_the_breakdown_and_1f1b_keeps_p_microbatches(base):
    from clustersim.workload.stage_cost import chunk_costs

    res = _run(base)
    d = res.devices
    for col in ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes"):
        assert (d[col] > 0).all()
    act = chunk_costs(base, 4)[1].activation_memory
    stage1 = d[d["stage"] == 1]["activations_bytes"]
    assert stage1.iloc[0] == pytest.approx(3 * act, rel=1e-6)  # 1F1B: p − s = 3 in flight


def test_recompute_and_microbatch_move_memory_and_time_the_published_way(base):
    none, full = _run(base), _run(base, **{"training.recompute": "full"})
    assert full.summary["peak_memory_gib"] < none.summary["peak_memory_gib"]
    assert full.summary["iteration_time_s"] > 1.2 * none.summary["iteration_time_s"]
    bigger = _run(base, **{"training.micro_batch": 4})
    assert bigger.devices["activations_bytes"].max() > 1.9 * none.devices["activations_bytes"].max()
    more_pp = _run(base, **{"parallel.pp": 8, "parallel.dp": 1})
    assert more_pp.devices["params_bytes"].max() < none.devices["params_bytes"].max()


def test_oom_is_reported_not_raised(base):
    res = _run(base, **{"model.preset": "gpt-18.4b"})
    assert res.summary["oom"] is True
    hint = res.summary["oom_hint"]
    assert "optimizer" in hint and "activations" in hint and "recompute" in hint
    assert res.devices["oom"].any()


def test_breakdown_follows_an_explicit_partition():
    # 24 layers split [4, 8, 8, 4] instead of evenly: stage 1 holds twice stage 0's layers
    sc = cs.load_scenario("scenarios/quickstart.yaml").with_overrides(
        {"parallel.partition": [4, 8, 8, 4], "simulation.network": "analytical"}
    )
    dev = cs.simulate(sc, progress=False).devices.groupby("stage")["params_bytes"].first()
    even = cs.simulate(sc.with_overrides({"parallel.partition": "even"}), progress=False).devices
    per_layer = (even.groupby("stage")["params_bytes"].first()[1]) / 6  # stage 1: 6 layers when even
    assert dev[1] == pytest.approx(8 * per_layer, rel=1e-9)
    assert dev[2] == pytest.approx(8 * per_layer, rel=1e-9)


def test_static_bytes_are_megatrons_distributed_optimizer_table():
    # docs.nvidia.com/megatron-core/.../distrib_optimizer.html: bytes per parameter by param and
    # grad dtype, without and with the distributed optimizer (replicated + sharded/d)
    from clustersim.validation.data import read_table

    d = 8
    for row in read_table("megatron_distopt_bytes_per_param"):
        zero = 1 if row["distributed_optimizer"] == "yes" else 0
        held = sum(static_bytes(1.0, row["param_dtype"], "adam", zero, d, grad_dtype=row["grad_dtype"]))
        # a 16-bit gradient buffer: the optimizer makes its fp32 copy at the step (freed before
        # the next forward), which the table counts and the peak under a backward does not hold
        step_copy = 4 / (d if zero else 1) if row["grad_dtype"] == "fp16" else 0.0
        published = float(row["bytes_per_param_replicated"]) + float(row["bytes_per_param_over_dp"]) / d
        assert held + step_copy == pytest.approx(published, rel=1e-12)


def test_static_bytes_are_the_zero_papers_model_states():
    # Rajbhandari et al. 2020 Figure 1 and §3.1: fp16 weights and gradients, K = 12
    from clustersim.validation.data import read_table

    for row in read_table("zero_fig1_memory"):
        held = sum(
            static_bytes(
                float(row["params"]),
                "fp16",
                "adam",
                int(row["zero_stage"]),
                int(row["dp"]),
                grad_dtype="fp16",
            )
        )
        assert held / 1e9 == pytest.approx(float(row["per_gpu_GB"]), abs=0.05)


def _h100_fp8(**data_parallel):
    return cs.load_scenario(
        {
            "name": "fp8-params",
            "cluster": {"preset": "dgx_h100", "nodes": 1},
            "model": {"preset": "gpt-1.3b", "seq_len": 2048},
            "training": {"framework": "megatron_core", "global_batch": 16, "precision": "fp8"},
            "parallel": {
                "tp": 2,
                "pp": 2,
                "dp": 2,
                **({"data_parallel": data_parallel} if data_parallel else {}),
            },
            "simulation": {"network": "analytical", "granularity": "stage"},
        }
    )


def test_fp8_parameters_hold_the_linears_in_one_byte_and_cache_only_the_transpose():
    # NeMo's FP8 recipe (fp8_param_gather=True), the megatron_core default under fp8: each FP8
    # linear's weight is 1 byte (not BF16's 2) and TE caches only its FP8 transpose (1, not 2).
    # A GPT layer's FP8 linears on one of t TP ranks are its weight matrices, QKV 3h², the
    # projection h², MLP up and down h·ffn each: (4h² + 2h·ffn)/t parameters, so FP8
    # parameters save that many bytes per layer in the weights and as many in the cache
    from clustersim.resolve import resolve

    fp8, bf16 = _h100_fp8(), _h100_fp8(param_gather_dtype="bf16")
    assert fp8.spec.parallel.data_parallel.param_gather_dtype == "fp8"
    h, ffn, layers = 2048, 4 * 2048, 24  # gpt-1.3b (GPT-3 XL, Brown et al. 2020 Table 2.1)
    tp, pp = 2, 2
    saved = (4 * h * h + 2 * h * ffn) / tp * (layers / pp)  # bytes per chunk (one stage's layers)
    for a, b in zip(resolve(fp8).chunk_costs, resolve(bf16).chunk_costs, strict=True):
        assert b.static.weights - a.static.weights == pytest.approx(saved, abs=2)
        assert b.static.buffers - a.static.buffers == pytest.approx(saved, abs=2)
        assert a.static.optimizer == b.static.optimizer  # fp32 master weights either way


def test_fp8_parameters_need_fp8_training():
    sc = _h100_fp8(param_gather_dtype="fp8").with_overrides({"training.precision": "bf16"})
    with pytest.raises(cs.ScenarioError, match="param_gather_dtype"):
        cs.simulate(sc, progress=False)
