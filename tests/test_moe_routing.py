"""The routing-load model of auxiliary-loss-balanced routers against its measured rows, its
closed forms, and the balanced router's sampling noise (clustersim/workload/moe_routing.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clustersim.errors import ScenarioError
from clustersim.scenario.frameworks import apply_framework
from clustersim.workload.moe import expert_tokens, load_model
from clustersim.workload.moe_routing import (
    aux_loss_exponent,
    balanced_rank_excess,
    expected_max_normal,
    fit_exponent,
    routing_rows,
    zipf_maxvio,
)
from clustersim.workload.transformer import TransformerConfig

#: one exponent for rows measured at 0.52 and 0.72: each lies ±6.2 % (in 1 + MaxVio) about
#: their geometric mean, the least-squares fit
TOLERANCE = 0.07


def _aux_rows():
    return [r for r in routing_rows() if r["balancing"] == "aux_loss"]


def test_every_row_has_a_source_and_a_known_statistic():
    assert _aux_rows()
    for r in routing_rows():
        assert r["source"].strip() and r["statistic"] == "maxvio_global"


@pytest.mark.parametrize("row", _aux_rows(), ids=lambda r: r["model"])
def test_the_fitted_exponent_reproduces_each_measured_maxvio(row):
    got = 1 + zipf_maxvio(int(row["routed_experts"]), aux_loss_exponent())
    assert got / (1 + float(row["value"])) == pytest.approx(1, abs=TOLERANCE)


@pytest.mark.parametrize("row", _aux_rows(), ids=lambda r: r["model"])
def test_the_load_model_draws_that_maxvio_at_many_tokens(row):
    """A micro-batch draw of the load model (2 M tokens: sampling noise ~0.5 %) has the
    closed form's MaxVio."""
    e, k = int(row["routed_experts"]), int(row["top_k"])
    counts = expert_tokens(2_000_000, e, k, "aux_loss", seed=3)
    drawn = max(counts) / (sum(counts) / e) - 1
    assert drawn == pytest.approx(zipf_maxvio(e, aux_loss_exponent()), abs=0.02)


def test_the_zipf_maxvio_closed_form_limits():
    assert zipf_maxvio(64, 0.0) == pytest.approx(0.0, abs=1e-12)  # exponent 0: uniform
    assert zipf_maxvio(10, 1.0) == pytest.approx(10 / sum(1 / r for r in range(1, 11)) - 1, rel=1e-12)


@pytest.mark.parametrize("s", [0.1, 0.4, 1.3])
def test_the_fit_recovers_an_exact_zipf(s):
    rows = [
        {"routed_experts": str(e), "value": repr(zipf_maxvio(e, s)), "statistic": "maxvio_global"}
        for e in (8, 64, 256)
    ]
    assert fit_exponent(rows) == pytest.approx(s, abs=1e-6)


def test_expected_max_of_two_normals_is_one_over_root_pi():
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-9)
    assert expected_max_normal(1) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(
    ("tokens", "experts", "k", "ep"), [(4096, 128, 8, 8), (2048, 8, 2, 8), (4096, 64, 6, 4)]
)
def test_balanced_rank_excess_matches_sampled_routing(tokens, experts, k, ep):
    """Each token's k distinct experts spread over the ranks hypergeometrically; the
    slowest rank's excess over many sampled micro-batches matches the closed form."""
    rng = np.random.default_rng(7)
    per = [experts // ep] * ep
    excess = []
    for _ in range(400):
        loads = rng.multivariate_hypergeometric(per, k, size=tokens).sum(axis=0)
        excess.append(loads.max() / loads.mean() - 1)
    assert np.mean(excess) == pytest.approx(balanced_rank_excess(tokens, experts, k, ep), rel=0.1)


def _moe(**kw) -> TransformerConfig:
    return TransformerConfig("moe", 2, 256, 4, 512, 1000, 128, experts=8, experts_per_token=2, **kw)


def test_auto_follows_the_router():
    assert load_model(_moe(expert_load="auto")) == "aux_loss"
    assert load_model(_moe(expert_load="auto", router_score="sigmoid")) == "uniform"
    assert load_model(_moe(expert_load="uniform")) == "uniform"


def test_the_aux_loss_draw_is_deterministic_by_seed():
    a = expert_tokens(4096, 128, 8, "aux_loss", seed=11)
    assert a == expert_tokens(4096, 128, 8, "aux_loss", seed=11)
    assert a != expert_tokens(4096, 128, 8, "aux_loss", seed=12)
    assert sum(a) == 4096 * 8


def test_megatron_core_defaults_to_auto_and_a_stated_load_stays():
    raw = {"model": {"preset": "gpt-1.3b"}, "training": {"framework": "megatron_core"}}
    assert apply_framework(raw)["model"]["expert_load"] == "auto"
    raw["model"]["expert_load"] = "uniform"
    assert apply_framework(raw)["model"]["expert_load"] == "uniform"
    raw["simulation"] = {"seed": 5}
    assert apply_framework(raw)["model"]["expert_seed"] == 5  # the ranking follows the scenario's seed
    other = {"model": {"preset": "gpt-1.3b"}, "training": {"framework": "fsdp2"}}
    assert "expert_load" not in apply_framework(other)["model"]


def test_the_profile_default_never_refuses_a_stated_fold():
    """Folding needs identical expert-parallel ranks: under ``simulation.fold: true`` the
    megatron_core default leaves the load even, so the scenario still folds; a load the user
    states is refused by name as before."""
    import clustersim as cs

    mixtral = cs.load_scenario("scenarios/mixtral-8x7b-64xH100-ep8.yaml")
    small = {"training.global_batch": 64, "simulation.network": "analytical"}
    folded = cs.simulate(mixtral.with_overrides({**small, "simulation.fold": True}), progress=False)
    assert folded.summary["folded"].startswith("yes")
    stated = mixtral.with_overrides({**small, "simulation.fold": True, "model.expert_load": "aux_loss"})
    with pytest.raises(ScenarioError, match="uneven expert load"):
        cs.simulate(stated, progress=False)
