"""Workload models: parameter counts, FLOPs, HF configs, CNN tables, scenario errors."""

from __future__ import annotations

import pytest

import clustersim as cs
from clustersim.workload.cnn import cnn_layers
from clustersim.workload.hf_config import load_hf_config
from clustersim.workload.model_presets import TRANSFORMER_PRESETS
from clustersim.workload.stage_cost import chunk_costs
from clustersim.workload.transformer import megatron_flops, megatron_params

GPT = [n for n, (c, _) in TRANSFORMER_PRESETS.items() if c.position == "learned"]
LLAMA = [n for n, (c, _) in TRANSFORMER_PRESETS.items() if c.position == "rope"]


def gpt_scenario(preset="gpt-1.7b", tp=1, pp=1, dp=1, gb=8, mb=1, recompute="full", **model) -> dict:
    n = tp * pp * dp
    cluster = {"preset": "dgx_a100", "nodes": n // 8} if n % 8 == 0 else {"nodes": 1, "gpus_per_node": n}
    return {
        "cluster": cluster,
        "model": {"preset": preset, **model},
        "training": {"global_batch": gb, "micro_batch": mb, "recompute": recompute},
        "parallel": {"tp": tp, "pp": pp, "dp": dp},
        "simulation": {"network": "analytical"},
    }


@pytest.mark.parametrize("name", GPT)
def test_gpt_params_match_megatron_formula_and_published_size(name):
    c = TRANSFORMER_PRESETS[name][0]
    # the formula omits the final layer norm: exactly 2h parameters apart
    assert c.params() - megatron_params(c.layers, c.hidden, c.vocab, c.seq_len) == pytest.approx(2 * c.hidden)
    # published sizes are rounded (1.7B is 1.65B by the formula): within 3 %
    assert c.params() == pytest.approx(c.published_params, rel=0.03)


@pytest.mark.parametrize("name", LLAMA)
def test_llama_params_match_published_size(name):
    c = TRANSFORMER_PRESETS[name][0]
    assert c.params() == pytest.approx(c.published_params, rel=0.005)


@pytest.mark.parametrize("name,tp,pp", [("gpt-1.7b", 1, 1), ("gpt-1.7b", 2, 4), ("gpt-18.4b", 8, 2)])
def test_iteration_flops_match_megatron_eq3(name, tp, pp):
    c = TRANSFORMER_PRESETS[name][0]
    sc = cs.load_scenario(gpt_scenario(name, tp=tp, pp=pp, gb=4, mb=2))
    costs = chunk_costs(sc, pp)
    per_gpu = sum(k.forward_flops + k.backward_flops for k in costs) * sc.num_microbatches
    assert per_gpu * tp == pytest.approx(megatron_flops(4, c.seq_len, c.layers, c.hidden, c.vocab), rel=0.01)
    # the count behind summary["tflops_per_gpu"] / MFU: 4·l·(24bsh² + 4bs²h) + 6·bshV = eq. (3)
    assert c.iteration_flops(4) == pytest.approx(
        megatron_flops(4, c.seq_len, c.layers, c.hidden, c.vocab), rel=1e-12
    )


def test_hf_configs():
    gpt2 = load_hf_config("gpt2")
    assert gpt2.params() == pytest.approx(124.44e6, rel=0.001)  # GPT-2 small: 124,439,808
    llama = load_hf_config("llama-2-7b.json")
    assert llama.params() == TRANSFORMER_PRESETS["llama2-7b"][0].params()
    mixtral = load_hf_config("mixtral-8x7b", seq_len=4096)
    assert mixtral.params() == pytest.approx(46.7e9, rel=0.01)  # Mistral AI: 46.7B total
    idle = (mixtral.experts - mixtral.experts_per_token) * mixtral.mlp_params() * mixtral.layers
    assert mixtral.params() - idle == pytest.approx(12.9e9, rel=0.01)  # 12.9B active per token


def test_hf_config_scenario_runs():
    raw = gpt_scenario("gpt-1.7b", gb=2)
    raw["model"] = {"hf_config": "gpt2", "seq_len": 1024}
    res = cs.simulate(cs.load_scenario(raw), progress=False)
    assert res.summary["iteration_time_s"] > 0 and not res.summary["oom"]


@pytest.mark.parametrize("name,params,gmac", [("vgg16", 138.36e6, 15.47), ("resnet50", 25.56e6, 4.09)])
def test_cnn_tables(name, params, gmac):
    layers = cnn_layers(name, 1, 2)
    assert sum(op.params for L in layers for op in L.ops) == pytest.approx(params, rel=0.001)
    assert sum(op.fwd.flops for L in layers for op in L.ops) / 2e9 == pytest.approx(gmac, rel=0.01)


def test_cnn_pipeline_scenario_runs_with_balanced_stages():
    raw = {
        "cluster": {"nodes": 1, "gpus_per_node": 4},
        "model": {"preset": "vgg16"},
        "training": {"global_batch": 64, "micro_batch": 16, "precision": "fp32", "optimizer": "sgd"},
        "parallel": {"pp": 4},
        "simulation": {"network": "analytical"},
    }
    sc = cs.load_scenario(raw)
    costs = chunk_costs(sc, 4)
    times = [c.forward + c.backward for c in costs]
    assert max(times) < 0.5 * sum(times)  # balanced: no stage holds half the work
    assert cs.simulate(sc, progress=False).summary["iteration_time_s"] > 0


@pytest.mark.parametrize(
    "change,field",
    [
        ({"model": {"preset": "gpt-9b"}}, "model.preset"),
        ({"model": {"preset": "gpt-1.7b", "hiden": 3}}, "hiden"),
        ({"model": {"layers": 4, "heads": 4, "vocab": 100, "seq_len": 64}}, "model.hidden"),
        ({"model": {"preset": "gpt-1.7b", "norm": "batchnorm"}}, "model.norm"),
        ({"training": {"global_batch": 8, "recompute": "some"}}, "training.recompute"),
        ({"parallel": {"tp": 2, "pp": 1, "dp": 4, "zero": 4}}, "parallel.zero"),
    ],
)
def test_bad_model_fields_name_the_field(change, field):
    raw = {**gpt_scenario(), **change}
    with pytest.raises(cs.ScenarioError, match=field):
        cs.load_scenario(raw)


def test_unknown_preset_lists_known_ones():
    with pytest.raises(cs.ScenarioError, match="gpt3-175b.*llama3-405b.*vgg16"):
        cs.load_scenario({**gpt_scenario(), "model": {"preset": "gpt-4"}})


@pytest.mark.parametrize(
    "parallel,message",
    [
        ({"tp": 5, "pp": 1, "dp": 1}, "model.heads = 24 must divide by tp"),  # gpt-1.7b: 24 heads
        ({"tp": 1, "pp": 5, "dp": 1}, "must divide evenly into pp"),  # 24 layers
    ],
)
def test_plans_that_cannot_split_the_model(parallel, message):
    raw = gpt_scenario()
    raw["cluster"] = {"nodes": 1, "gpus_per_node": parallel["tp"] * parallel["pp"]}
    raw["parallel"] = parallel
    with pytest.raises(cs.ScenarioError, match=message):
        cs.load_scenario(raw)


def test_plan_must_cover_the_gpus():
    raw = gpt_scenario(tp=2, pp=2, dp=2)
    raw["parallel"]["dp"] = 3
    with pytest.raises(cs.ScenarioError, match="tp × pp × dp must equal"):
        cs.load_scenario(raw)


def test_cli_list_prints_model_presets(capsys):
    from clustersim.cli import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "model presets:" in out and "gpt3-175b" in out and "resnet50" in out
