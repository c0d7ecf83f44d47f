"""Autoregressive generation (docs/generation.md): step pricing in closed form, the KV
cache's capacity and preemption, continuous batching under arrivals, determinism, and the
refusals of bad input."""

from __future__ import annotations

import math

import pytest

from clustersim import load_result, simulate
from clustersim.errors import ScenarioError
from clustersim.generation.runner import StepPricer
from clustersim.generation.step_cost import StepSeq
from clustersim.resolve import resolve
from clustersim.scenario import load_scenario
from clustersim.simulate import build_engine
from clustersim.workload.ops import LayerOp

GPU = "A100-SXM4-80GB"


def scenario(gen: dict, tp: int = 1, pp: int = 1, **training) -> dict:
    """A Llama-2-7B serving scenario on one node; ``gen``: the generation section."""
    return {
        "name": "gen",
        "cluster": {"nodes": 1, "gpus_per_node": tp * pp, "gpu": GPU},
        "model": {"preset": "llama2-7b"},
        "training": {"global_batch": 1, "mode": "inference", **training},
        "parallel": {"tp": tp, "pp": pp},
        "generation": gen,
    }


def pricer(raw: dict) -> StepPricer:
    sc = load_scenario(raw)
    return StepPricer(sc, resolve(sc), build_engine)


IDLE = {"cuda_graphs": True, "fixed_costs": {"microbatch_overhead": 0}}


@pytest.mark.parametrize("context", [1, 777, 4000])
def test_decode_step_is_bytes_over_achieved_bandwidth_plus_launches(context):
    """With CUDA graphs on an idle GPU, a decode token's step time is Σ bytes_k / achieved
    bandwidth(bytes_k) + the kernels' launches: every kernel is memory-bound, the engine adds
    nothing. The bytes include every weight once and the whole cached K and V."""
    price = pricer(scenario({"prompt_len": 8, "output_len": 2}, **IDLE))
    seqs = (StepSeq(1, context),)
    ops = [op for op in price.model.ops(seqs, 1)[0] if isinstance(op, LayerOp) and op.fwd.bytes]
    cm = price.model.cm
    hbm = cm.gpu.hbm_bandwidth
    assert all(op.fwd.gemm is None and op.fwd.attention is None for op in ops)  # memory-bound
    # each kernel at its kind's achieved bandwidth (fused "tuned" or unfused "generic")
    achieved = [hbm * cm.bandwidth.of(op.fwd.memory_kind).fraction(op.fwd.bytes, hbm) for op in ops]
    expected = sum(op.fwd.bytes / bw for op, bw in zip(ops, achieved))
    expected += len(ops) * cm.eff.launch_s
    assert price(seqs, 1) == pytest.approx(expected, rel=1e-12)
    cfg = price.model.cfg
    kv = cfg.layers * (context + 1) * 2 * cfg.n_kv * cfg.head_dim * 2  # K and V, bf16
    weights = 2 * sum(op.params for op in ops if op.name != "embedding")  # a lookup reads its rows only
    attn = [op for op in ops if op.name == "decode_attention"]
    assert sum(op.fwd.bytes for op in attn) == kv + cfg.layers * 2 * cfg.hidden * 2  # + q in, o out
    assert sum(op.fwd.bytes for op in ops) > weights + kv


def test_single_request_ttft_is_its_prefill_step():
    raw = scenario({"prompt_len": 300, "output_len": 4}, **IDLE)
    res = simulate(raw)
    price = pricer(raw)
    req = res.requests.iloc[0]
    assert req.ttft_s == price((StepSeq(300, 0),), 1)
    assert req.ttft_s == res.steps.end_s[0] - res.steps.start_s[0]
    # then one decode step per further token, over the growing cache
    decodes = [price((StepSeq(1, 300 + k),), 1) for k in range(3)]
    assert req.end_s == pytest.approx(req.ttft_s + sum(decodes), rel=1e-12)
    assert req.tpot_s == pytest.approx(sum(decodes) / 3, rel=1e-12)


def test_prefill_is_compute_bound_and_costs_more_per_step():
    price = pricer(scenario({"prompt_len": 8, "output_len": 2}, **IDLE))
    assert price((StepSeq(2048, 0),), 1) > 5 * price((StepSeq(1, 2048),), 1)


def test_tensor_parallel_step_runs_its_collectives():
    """TP 2: the step's Program holds the all-reduces and the logits gather; faster than TP 1."""
    one = pricer(scenario({"prompt_len": 8, "output_len": 2}, **IDLE))
    two = pricer(scenario({"prompt_len": 8, "output_len": 2}, tp=2, **IDLE))
    seqs = (StepSeq(1, 1000),)
    assert two(seqs, 1) < one(seqs, 1)
    kinds = [op.fwd for op in two.model.ops(seqs, 1)[0] if not isinstance(op, LayerOp)]
    assert kinds.count("all_reduce") == 2 * 32 + 1 and "all_gather" in kinds  # + the embedding's


def _kv_run(policy: str, blocks: int, **extra):
    gen = {
        "requests": 6,
        "prompt_len": 64,
        "output_len": 40,
        "kv_blocks": blocks,
        "preemption": policy,
        **extra,
    }
    return simulate(scenario(gen, cuda_graphs=True))


@pytest.mark.parametrize("policy", ["wait", "recompute", "swap"])
def test_kv_capacity_is_respected(policy):
    """6 requests of 64 + 40 tokens need 7 blocks each at their end; 16 blocks hold two."""
    extra = {"swap_bandwidth": "25 GB/s"} if policy == "swap" else {}
    res = _kv_run(policy, 16, **extra)
    assert res.steps.kv_blocks_used.max() <= 16
    assert len(res.requests) == 6 and (res.requests.output_len == 40).all()
    preempted = int(res.requests.preemptions.sum())
    if policy == "wait":  # reserved whole at admission: never more than 2 running, none preempted
        assert preempted == 0 and res.steps.seqs.max() == 2
    else:
        assert preempted > 0
    if policy == "swap":
        assert res.steps.swap_bytes.sum() > 0
    weights = resolve(load_scenario(scenario({"prompt_len": 1, "output_len": 1}))).chunk_costs[0].weight_bytes
    block = 32 * 16 * 2 * 4096 * 2  # layers × tokens × (K, V) × hidden × bf16
    assert res.devices.peak_memory_bytes.max() <= weights + 16 * block
    assert res.summary["peak_memory_gib"] * 2**30 == weights + res.steps.kv_blocks_used.max() * block
    roomy = _kv_run(policy, 1000, **extra)
    assert roomy.requests.preemptions.sum() == 0
    assert roomy.summary["iteration_time_s"] < res.summary["iteration_time_s"]


def test_poisson_arrivals_at_load_spread_the_latencies():
    gen = {
        "requests": 40,
        "prompt_len": {"dist": "uniform", "low": 50, "high": 400},
        "output_len": {"dist": "uniform", "low": 5, "high": 40},
        "arrival": {"process": "poisson", "rate": 30},
    }
    res = simulate(scenario(gen, cuda_graphs=True))
    s = res.summary
    assert s["ttft_p99_s"] > s["ttft_p50_s"] and s["latency_p99_s"] > s["latency_p50_s"]
    assert s["batch_size_max"] > 1 and 0 < s["kv_utilization_max"] <= 1
    # every token after the first is one step later than the one before it
    assert s["itl_p50_s"] > 0 and math.isclose(
        s["output_tokens_per_s"], res.requests.output_len.sum() / s["iteration_time_s"]
    )


def test_same_seed_same_run_other_seed_other_arrivals():
    gen = {
        "requests": 8,
        "prompt_len": {"dist": "lognormal", "median": 100, "sigma": 0.5, "low": 10, "high": 400},
        "output_len": {"dist": "uniform", "low": 2, "high": 9},
        "arrival": {"process": "poisson", "rate": 50},
    }
    a, b = simulate(scenario(gen)), simulate(scenario(gen))
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    raw = scenario(gen)
    raw["simulation"] = {"seed": 7}
    c = simulate(raw)
    assert not c.requests.arrival_s.equals(a.requests.arrival_s)


def test_chunked_prefill_splits_a_long_prompt_and_decodes_ride_along():
    gen = {"requests": 2, "prompt_len": 3000, "output_len": 3, "max_num_batched_tokens": 1024}
    res = simulate(scenario(gen))
    first = res.steps.iloc[:3]
    assert list(first.prefill_tokens) == [1024, 1024, 1024]  # 2 × 1024 + the rest of both
    assert res.steps.prefill_tokens.sum() == 6000
    assert (res.steps.prefill_tokens <= 1024).all()


def test_trace_file_requests(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,prompt_len,output_len\n0.5,20,3\n0,10,2\n")
    res = simulate(scenario({"trace": str(path)}))
    assert list(res.requests.arrival_s) == [0.0, 0.5] and list(res.requests.prompt_len) == [10, 20]
    path.write_text("arrival_s,prompt_len,output_len\n0,10,0\n")
    with pytest.raises(ScenarioError, match="generation.trace.*row 2"):
        simulate(scenario({"trace": str(path)}))
    path.write_text("when,prompt,output\n0,10,2\n")
    with pytest.raises(ScenarioError, match="header"):
        simulate(scenario({"trace": str(path)}))


@pytest.mark.parametrize(
    ("gen", "training", "field"),
    [
        ({"prompt_len": 10}, {}, "generation"),
        (
            {"prompt_len": {"dist": "uniform", "low": 9, "high": 3}, "output_len": 2},
            {},
            "generation.prompt_len",
        ),
        ({"prompt_len": {"dist": "fixed"}, "output_len": 2}, {}, "generation.prompt_len"),
        ({"prompt_len": 10, "output_len": 0}, {}, "generation.output_len"),
        ({"prompt_len": 10, "output_len": 2, "requests": 0}, {}, "generation.requests"),
        ({"prompt_len": 10, "output_len": 2, "arrival": {"process": "poisson"}}, {}, "generation.arrival"),
        (
            {"prompt_len": 10, "output_len": 2, "arrival": {"process": "poisson", "rate": -1}},
            {},
            "generation.arrival.rate",
        ),
        ({"prompt_len": 10, "output_len": 2, "preemption": "swap"}, {}, "generation"),
        ({"prompt_len": 10, "output_len": 2, "kv_memory_fraction": 1.5}, {}, "generation.kv_memory_fraction"),
        ({"prompt_len": 10, "output_len": 2, "trace": "no/such.csv"}, {}, "generation"),
        ({"prompt_len": 5000, "output_len": 2, "kv_blocks": 10}, {}, "generation.kv_blocks"),
        ({"prompt_len": 10, "output_len": 2, "kv_memory_fraction": 0.1}, {}, "generation.kv_memory_fraction"),
        (
            {"prompt_len": 3000, "output_len": 2, "chunked_prefill": False},
            {},
            "generation.max_num_batched_tokens",
        ),
        ({"prompt_len": 10, "output_len": 2}, {"mode": "train"}, "training.mode"),
        ({"prompt_len": 10, "output_len": 10**6, "requests": 100}, {}, "simulation.max_ops"),
        (
            {"prompt_len": 10, "output_len": 2},
            {"arrival": {"process": "constant", "interval": 1}},
            "training.arrival",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_field(gen, training, field):
    raw = scenario(gen, **training)
    with pytest.raises(ScenarioError) as err:
        simulate(raw)
    assert err.value.field == field


def test_energy_is_refused_not_ignored():
    raw = scenario({"prompt_len": 10, "output_len": 2})
    raw["energy"] = {}
    with pytest.raises(ScenarioError) as err:
        simulate(raw)
    assert err.value.field == "energy"


def test_the_picture_draws_batch_size_and_kv_occupancy():
    from clustersim.viz.generation import plot_generation

    res = _kv_run("recompute", 16)
    fig = plot_generation(res.steps)
    top, bottom = fig.axes
    assert max(top.lines[0].get_ydata()) == res.steps.seqs.max()
    assert max(bottom.lines[0].get_ydata()) == res.steps.kv_utilization.max() <= 1


def test_pipeline_stages_run_a_step_in_turn():
    """PP 2: the step's stages run one after the other with the boundary tensor sent between
    them: at least both stages' forwards, never faster than one GPU's whole step."""
    one = pricer(scenario({"prompt_len": 8, "output_len": 2}, **IDLE))
    two = pricer(scenario({"prompt_len": 8, "output_len": 2}, pp=2, **IDLE))
    seqs = (StepSeq(1, 1000), StepSeq(200, 0))
    stages = two.model.costs(seqs, 2)
    assert len(stages) == 2 and stages[0].activation_bytes == 201 * 4096 * 2
    assert two(seqs, 2) >= sum(c.forward for c in stages)
    assert two(seqs, 2) >= one(seqs, 2)


def test_the_result_holds_every_steps_spans_and_saves(tmp_path):
    """res.spans: each step's Program ops on the run's clock (the Gantt of the steps); the
    GPUs' busy time is the steps' time; the bundle saves."""
    raw = scenario(
        {
            "requests": 3,
            "prompt_len": 20,
            "output_len": 3,
            "arrival": {"process": "constant", "interval": 0.05},
        }
    )
    res = simulate(raw)
    compute = res.spans[res.spans.lane == "compute"]
    busy = (res.steps.end_s - res.steps.start_s).sum()
    assert compute.end_s.max() == pytest.approx(res.summary["iteration_time_s"], rel=1e-12)
    assert res.devices.compute[0] * res.summary["iteration_time_s"] == pytest.approx(busy, rel=1e-9)
    assert 0 < res.summary["bubble_fraction"] < 1  # waiting for requests between them
    res.save(tmp_path)
    assert (tmp_path / "gantt.png").exists() and (tmp_path / "generation.png").exists()
    back = load_result(tmp_path)
    assert back.steps.equals(res.steps) and back.requests.ttft_s.equals(res.requests.ttft_s)


def test_serving_runs_no_dropout_kernels():
    """A model trained with dropout serves in eval mode: its residual adds read two tensors
    and write one, no dropout mask."""
    raw = scenario({"prompt_len": 8, "output_len": 2})
    raw["model"] = {"kind": "transformer", "layers": 2, "hidden": 512, "heads": 8, "vocab": 1000}
    raw["model"].update(seq_len=64, dropout=True)
    ops = pricer(raw).model.ops((StepSeq(5, 0),), 1)[0]
    residual = [op.fwd.bytes for op in ops if isinstance(op, LayerOp) and op.name.startswith("residual")]
    assert residual == [3 * 5 * 512 * 2] * 4  # two layers, two residual adds each


def test_skinny_linears_are_below_every_catalog_gpus_ridge_point():
    """A linear over ≤ 64 tokens does ≤ 64 multiply-adds per weight read: 2·64 FLOPs per
    2-byte weight, under every catalog GPU's FLOP/byte ridge — memory-bound on all of them."""
    from clustersim.generation.step_cost import SKINNY_TOKENS
    from clustersim.hardware.gpus import GPUS

    for name in GPUS:
        gpu = GPUS.lookup(name)
        assert SKINNY_TOKENS < gpu.peak_flops / gpu.hbm_bandwidth, name


def test_the_generation_mode_compiles_the_scenarios_own_prefill():
    from clustersim.compilers import mode_of
    from clustersim.simulate import compile_scenario

    raw = scenario({"prompt_len": 10, "output_len": 2}, tp=2)
    sc = load_scenario(raw)
    assert mode_of(resolve(sc)).name == "generation"
    prog = compile_scenario(sc)
    assert prog.num_devices == 2 and any(op.kind == "collective" for op in prog.ops)


def test_a_sweep_runs_generation_not_plain_inference():
    """A sweep row of a generation scenario is the generation run's (its TTFT columns, equal
    to simulate's), not the forward-only inference run the section would otherwise fall to."""
    import clustersim as cs
    from clustersim.scenario import read_yaml

    raw = read_yaml("scenarios/llama2-7b-serving-1xa100.yaml")
    raw["generation"]["requests"] = 4
    df = cs.sweep(raw, grid={"generation.arrival.rate": [2.0]}, progress=False)
    assert df["status"].tolist() == ["ok"]
    raw["generation"]["arrival"]["rate"] = 2.0
    assert df["ttft_p50_s"].iloc[0] == simulate(load_scenario(raw)).summary["ttft_p50_s"]
