"""Disaggregated prefill and decode (docs/generation.md): separate GPU pools, the KV cache
sent between them over the fabric."""

from __future__ import annotations

import copy

import pytest

from clustersim import simulate
from clustersim.errors import ScenarioError
from clustersim.generation.disaggregate import kv_transfer_s, pool_scenario
from clustersim.generation.kv_cache import kv_cache_of
from clustersim.generation.runner import StepPricer
from clustersim.generation.step_cost import StepSeq
from clustersim.resolve import resolve
from clustersim.scenario import load_scenario
from clustersim.simulate import build_engine
from tests.test_generation_replicas import scenario as replicas_job


def scenario(gen: dict, disaggregated: bool = True) -> dict:
    """test_generation_replicas' serving job on one GPU, or on a prefill and a decode GPU."""
    return replicas_job(2 if disaggregated else 1, {**gen, "disaggregated": disaggregated})


def test_a_request_decodes_once_its_cache_has_crossed():
    """One request: its first token at the end of its prefill on GPU 0, its second one decode
    step after its KV cache has landed on GPU 1."""
    raw = scenario({"prompt_len": 700, "output_len": 3})
    res = simulate(raw)
    sc = load_scenario(raw)
    pool = pool_scenario(sc)
    job = resolve(pool)
    price = StepPricer(pool, job, build_engine)
    cache = kv_cache_of(job, price.model.cfg, sc.generation)
    moved = kv_transfer_s(resolve(sc), cache, 700)
    req = res.requests.iloc[0]
    assert req.ttft_s == price((StepSeq(700, 0),), 1)
    second = req.first_token_s + moved + price((StepSeq(1, 700),), 1)
    assert req.end_s == pytest.approx(second + price((StepSeq(1, 701),), 1), rel=1e-12)
    assert res.summary["kv_transfer_mean_s"] == moved > 0
    assert set(res.spans[res.spans.lane == "compute"].device) == {"gpu0", "gpu1"}


def test_pools_run_one_phase_each_and_spare_decodes_from_prefills():
    gen = {
        "requests": 12,
        "prompt_len": {"dist": "uniform", "low": 200, "high": 1500},
        "output_len": {"dist": "uniform", "low": 1, "high": 40},
        "arrival": {"process": "poisson", "rate": 8},
    }
    split, mixed = simulate(scenario(gen)), simulate(scenario(copy.deepcopy(gen), False))
    pre, dec = (split.steps[split.steps.pool == p] for p in ("prefill", "decode"))
    assert (pre.decode_seqs == 0).all() and (dec.prefill_tokens == 0).all()
    assert split.requests.output_len.tolist() == mixed.requests.output_len.tolist()
    # decode steps no longer wait behind prefills: the tail of the inter-token gaps shrinks
    assert split.summary["itl_p99_s"] < mixed.summary["itl_p99_s"]
    assert split.summary["tpot_p50_s"] < mixed.summary["tpot_p50_s"]


def test_disaggregation_needs_two_pools():
    raw = scenario({"prompt_len": 10, "output_len": 2}, disaggregated=False)
    raw["generation"]["disaggregated"] = True
    with pytest.raises(ScenarioError) as err:
        simulate(raw)
    assert err.value.field == "parallel.dp" and "accepted: 2" in str(err.value)
