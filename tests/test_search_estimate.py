"""Plan search over ep, cp and this wave's schedules, ranked by the analytical estimate
(clustersim/experiments/plan_estimate.py): the space obeys the loader's rules, the memory
estimate is the ledger's peak and prunes exactly what exceeds capacity, the time estimate
holds a stated bound against the simulation, and the estimate's top-1 simulates within 1%
of the best of the top-k."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.experiments import Execution, SearchSpace, plan_space, search
from clustersim.experiments.memory import tightest_fit
from clustersim.experiments.plan_estimate import Estimator
from clustersim.experiments.plans import MODERN_SCHEDULES, label
from clustersim.resolve import resolve
from clustersim.schedules import SCHEDULES

#: the simulations in this process, in order
ONE_WORKER = Execution(workers=1)

GIB = 2**30
REPO = Path(__file__).resolve().parent.parent
#: the time estimate's bound against the simulation on these models: measured worst 2.7%
#: (DualPipe on the MoE model: an F&B pair is timed as its two passes less the communication
#: each hides under the other's compute, not by its interleaved segments); 9.3% before the
#: estimate timed the schedule's order stage by stage and priced the step's tied-embedding
#: all-reduce (session 7)
TIME_BOUND = 0.03


def moe_base(nodes: int = 2, gpn: int = 8, seq_len: int = 8192, fast: bool = False) -> dict:
    """A small MoE transformer with a long sequence: ep and cp both apply (cp needs
    per-layer segments; ``fast``: the fast fidelity, per-stage segments and no cp)."""
    return {
        "name": "small-moe",
        "cluster": {
            "nodes": nodes,
            "gpus_per_node": gpn,
            "gpu": "H100-SXM5-80GB",
            "nic": {"bandwidth": "400 Gbit/s", "per_node": gpn},
            "topology": {"kind": "fat_tree"},
        },
        "model": {
            "kind": "transformer",
            "layers": 8,
            "hidden": 1024,
            "heads": 16,
            "vocab": 32000,
            "seq_len": seq_len,
            "attention": "flash",
            "bias": False,
            "experts": 8,
            "experts_per_token": 2,
            "moe_ffn_hidden": 2048,
        },
        "training": {"global_batch": 32, "micro_batch": 1},
        "parallel": {"tp": 1, "pp": 1},
        "simulation": {"fidelity": "fast"}
        if fast
        else {"network": "analytical", "collective_model": "analytical"},
    }


def dense_base(fast: bool = False) -> dict:
    d = moe_base(seq_len=8192, fast=fast)
    d["name"] = "small-dense"
    d["model"] = {k: v for k, v in d["model"].items() if not k.startswith(("experts", "moe"))}
    d["model"]["layers"] = 16
    d["model"]["hidden"] = 2048
    return d


NARROW = {"training.recompute": ["none"], "parallel.zero": [0], "parallel.tp_comm_overlap": [False]}


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.sampled_from([1, 2]), gpn=st.sampled_from([4, 8]))
def test_every_plan_loads_and_obeys_the_expert_context_and_schedule_rules(nodes, gpn):
    base = cs.load_scenario(moe_base(nodes, gpn))
    n = nodes * gpn
    plans = plan_space(base, n, micro_batches=[1], vary=NARROW)
    assert plans
    for plan in plans:
        sc = base.with_overrides(plan)  # every enumerated plan is a valid scenario (raises otherwise)
        par, m = sc.parallel, sc.num_microbatches
        assert par.tp * par.cp * par.pp * sc.dp == n
        assert 8 % par.ep == 0 and (par.tp * par.cp * sc.dp) % (par.ep * (par.etp or par.tp)) == 0
        assert (
            8192 % (2 * par.cp) == 0
            and 8 % SCHEDULES[par.schedule].model_chunks(par.pp, par.virtual_stages) == 0
        )
        if par.schedule == "interleaved":
            assert par.virtual_stages in (2, 4) and m % par.pp == 0
        if par.schedule in ("dualpipe", "dualpipe_v"):
            assert m >= 2 * par.pp
    seen = {(p["parallel.schedule"], p.get("parallel.ep", 1) > 1, p.get("parallel.cp", 1) > 1) for p in plans}
    assert any(ep for _, ep, _ in seen) and any(cp for *_, cp in seen)
    if n >= 8:  # pp ≥ 2 with m ≥ 2·pp is possible: every default schedule is in the space
        assert {s for s, _, _ in seen} >= {"1f1b", "gpipe", *MODERN_SCHEDULES}


def test_cp_is_searched_for_long_sequences_only_and_ep_for_moe_models():
    short = cs.load_scenario(moe_base(seq_len=2048))
    plans = plan_space(short, 16, micro_batches=[1], vary=NARROW)
    assert {p.get("parallel.cp", 1) for p in plans} == {1}  # below CP_MIN_SEQ_LEN
    assert {p["parallel.ep"] for p in plans} == {1, 2, 4, 8}
    dense = cs.load_scenario(dense_base())
    plans = plan_space(dense, 16, micro_batches=[1], vary=NARROW)
    assert "parallel.ep" not in plans[0] and {p["parallel.cp"] for p in plans} == {1, 2, 4, 8, 16}


def _sample(base: dict, schedules=None, step: int = 7):
    """The plans of ``base`` on 16 GPUs over two recompute and ZeRO settings, every ``step``-th."""
    sc = cs.load_scenario(base)
    vary = {
        "training.recompute": ["none", "full"],
        "parallel.zero": [0, 1],
        "parallel.tp_comm_overlap": [False],
    }
    plans = plan_space(sc, 16, micro_batches=[1, 2], schedules=schedules, vary=vary)
    return sc, plans[::step]


@pytest.mark.parametrize("base", [moe_base(seq_len=2048, fast=True), dense_base()], ids=["moe", "dense"])
def test_memory_estimate_is_the_ledger_peak_for_every_schedule(base):
    """The order replay equals the compiled Program's ledger (tightest_fit), weight stashing
    (pipedream) and double buffers (2BW) included."""
    schedules = ["1f1b", "gpipe", *MODERN_SCHEDULES, "pipedream", "pipedream_2bw"]
    sc, plans = _sample(base, schedules, step=1)
    est, seen, kinds = Estimator(), set(), {}
    for plan in plans:  # one plan per schedule, chunks, ep > 1, cp > 1 and recompute
        kind = (
            plan["parallel.schedule"],
            plan.get("parallel.virtual_stages"),
            plan.get("parallel.ep", 1) > 1,
        )
        kinds.setdefault((*kind, plan.get("parallel.cp", 1) > 1, plan["training.recompute"]), plan)
    for plan in kinds.values():
        cand = sc.with_overrides(plan)
        e = est.estimate(cand, plan)
        assert (e.memory_bytes, e.capacity_bytes) == tightest_fit(resolve(cand)), label(plan)
        seen.add(plan["parallel.schedule"])
    assert seen == set(schedules)


@pytest.mark.parametrize(
    "base, plan",
    [
        (
            dense_base(True),
            {"parallel.tp": 4, "parallel.pp": 4, "parallel.dp": 1, "parallel.schedule": "1f1b"},
        ),
        (
            dense_base(True),
            {"parallel.tp": 2, "parallel.pp": 2, "parallel.dp": 4, "parallel.schedule": "gpipe"},
        ),
        (
            dense_base(),
            {
                "parallel.tp": 2,
                "parallel.pp": 4,
                "parallel.dp": 2,
                "parallel.schedule": "interleaved",
                "parallel.virtual_stages": 2,
            },
        ),
        (
            dense_base(True),
            {"parallel.tp": 4, "parallel.pp": 2, "parallel.dp": 2, "parallel.schedule": "zb_h1"},
        ),
        (
            dense_base(),
            {"parallel.tp": 2, "parallel.pp": 2, "parallel.dp": 4, "parallel.schedule": "dualpipe_v"},
        ),
        (dense_base(), {"parallel.tp": 1, "parallel.cp": 4, "parallel.pp": 2, "parallel.dp": 2}),
        (
            moe_base(seq_len=2048),
            {"parallel.ep": 8, "parallel.pp": 2, "parallel.dp": 8, "parallel.schedule": "zb_h1"},
        ),
        (
            moe_base(seq_len=2048),
            {"parallel.tp": 8, "parallel.pp": 2, "parallel.dp": 1, "parallel.schedule": "dualpipe"},
        ),
        (
            moe_base(seq_len=2048),
            {"parallel.tp": 2, "parallel.pp": 4, "parallel.dp": 2, "parallel.schedule": "dualpipe_v"},
        ),
    ],
    ids=lambda x: label(x) if isinstance(x, dict) and "parallel.pp" in x else x["name"],
)
def test_time_estimate_within_its_bound_of_the_simulation(base, plan):
    sc = cs.load_scenario(base).with_overrides(plan)
    e = Estimator().estimate(sc, plan)
    sim = cs.simulate(sc).summary["iteration_time_s"]
    assert abs(e.iteration_s / sim - 1) <= TIME_BOUND
    assert 0 < e.compute_s < e.iteration_s and e.bubble_s >= 0 and e.comm_s >= 0


@pytest.fixture(scope="module")
def small_search():
    """A small search: the dense model on 16 GPUs (cp and every schedule in the space),
    memory capped so that some plans prune."""
    vary = {"training.recompute": ["none"], "parallel.zero": [0], "parallel.tp_comm_overlap": [False]}
    return search(
        dense_base(True),
        16,
        space=SearchSpace([1], vary=vary, memory_fraction=0.25),
        top_k=10,
        execution=ONE_WORKER,
    )


#: how far the estimate's top-1 may simulate below the best of the simulated top-k (issue #19:
#: within 1%). Measured 0 on the small dense search (its top-1 is ZB-V, the DES best of the top
#: 10; 3.4% off with the closed-form bubble, which gave the V-placed stage holding the embedding
#: and the head a fill and drain it does not have), on the shipped sweep's search below and on
#: gpt13b-like (tests/test_search.py).
SMALL_GAP = 0.01


def test_estimates_top1_simulates_close_to_the_best_of_the_top_k(small_search):
    res = small_search
    ranked = res.ranked
    assert len(ranked) == 10 and set(ranked["est_rank"]) == set(range(1, 11))
    top1 = ranked[ranked["est_rank"] == 1].iloc[0]
    assert res.estimate_gap == pytest.approx(1 - top1["throughput"] / ranked["throughput"].max())
    assert 0 <= res.estimate_gap <= SMALL_GAP
    text = res.explain(5)
    assert "est.rank" in text and "estimate's top-1" in text


def test_estimates_top1_is_the_des_best_on_the_shipped_sweeps_search():
    """scenarios/sweeps/quickstart-pp-schedule.yaml's base searched over its whole space (every
    plan that fits simulated): the estimate's top-1 simulates within 1% of the best."""
    from clustersim.experiments.grid import load_sweep_file

    base = load_sweep_file(REPO / "scenarios/sweeps/quickstart-pp-schedule.yaml")[0]
    res = search(base, top_k=100, execution=ONE_WORKER)
    assert len(res.ranked) == len(res.table[res.table["est_rank"].notna()]) >= 9  # all confirmed
    assert 0 <= res.estimate_gap <= SMALL_GAP


FLUSHING = ["1f1b", "gpipe", "interleaved", "zb_h1", "zb_h2", "zb_v", "dualpipe", "dualpipe_v"]


@pytest.mark.parametrize("schedule", FLUSHING)
def test_stage_timing_is_the_simulation_where_passes_hold_no_communication(schedule):
    """tp = cp = dp = 1 on one node: each pass is compute only, so timing the schedule's order
    stage by stage (clustersim/experiments/stage_timing.py) with the sends between the stages
    and the step work is the simulated iteration — V placement, chunks, split backwards and
    F&B pairs included. What remains are microseconds: the estimate's α-β model charges each
    send and collective its link latencies (1–2 µs) where the engine's route charges fewer."""
    base = dense_base(True)
    base["cluster"].update(nodes=1, gpus_per_node=4, nic={"bandwidth": "400 Gbit/s", "per_node": 4})
    base["training"]["global_batch"] = 16
    plan = {"parallel.tp": 1, "parallel.pp": 4, "parallel.dp": 1, "parallel.schedule": schedule}
    if schedule == "interleaved":
        plan["parallel.virtual_stages"] = 2
    sc = cs.load_scenario(base).with_overrides(plan)
    e = Estimator().estimate(sc, plan)
    sim = cs.simulate(sc).summary["iteration_time_s"]
    assert e.iteration_s == pytest.approx(sim, rel=5e-5, abs=0)
    assert abs(e.iteration_s - sim) < 20e-6


def test_pruning_removes_exactly_the_plans_over_capacity(small_search):
    t = small_search.table
    cap = t["capacity_gib"].dropna().iloc[0] * 0.25
    estimated = t[t["est_memory_gib"].notna()]
    assert set(estimated[estimated["status"] == "pruned"]["plan"]) == set(
        estimated[estimated["est_memory_gib"] > cap]["plan"]
    )
    assert (estimated["status"] == "pruned").any() and (estimated["status"] != "pruned").any()
    ran = t[t["status"] == "ok"]  # compared with a run: the estimate is the simulated peak
    assert ran["est_memory_gib"].tolist() == pytest.approx(ran["peak_memory_gib"].tolist(), rel=1e-9)
    pruned = estimated[estimated["status"] == "pruned"].sort_values("est_memory_gib").to_dict("records")[0]
    over = {k: v for k, v in pruned.items() if k.split(".")[0] in ("parallel", "training") and pd.notna(v)}
    peak = cs.simulate(cs.load_scenario(dense_base()).with_overrides(over)).summary["peak_memory_gib"]
    assert peak == pytest.approx(pruned["est_memory_gib"], rel=1e-9) and peak > cap


def test_top_k_all_is_the_search_before_the_estimate_and_time_budget_stops_it():
    base = cs.load_scenario(dense_base(True))
    vary = {"training.recompute": ["none"], "parallel.zero": [0]}
    old = search(base, 8, space=SearchSpace([1], ["1f1b"], vary), top_k=None, execution=ONE_WORKER)
    assert "est_rank" not in old.table.columns and set(old.table["status"]) <= {
        "ok",
        "pruned",
        "invalid",
        "oom",
    }
    assert old.estimate_gap is None
    quick = search(
        base, 16, space=SearchSpace([1], vary=vary), top_k=0, time_budget=1e-9, execution=ONE_WORKER
    )
    assert "parallel.tp_comm_overlap" not in old.table.columns  # the classic space
    assert set(quick.table["status"]) == {"unexplored"} and quick.ranked.empty
    with pytest.raises(cs.ScenarioError, match="top_k"):
        search(base, 16, top_k=-1)
    with pytest.raises(cs.ScenarioError, match="time_budget"):
        search(base, 16, time_budget=0)


def test_search_cli_top_k_and_list_shows_ep_cp_schedules_and_hf_configs(tmp_path, capsys):
    from clustersim.cli import main

    assert main(["list"]) == 0
    text = capsys.readouterr().out
    for word in (
        "dualpipe_v",
        "zb_v",
        "interleaved",
        "  ep ",
        "  cp ",
        "mixtral-8x7b",
        "deepseek-v3",
        "37.6B active",
    ):
        assert word in text, word
    path = tmp_path / "dense.yaml"
    import yaml

    path.write_text(yaml.safe_dump(dense_base(True)))
    args = ["search", str(path), "--gpus", "8", "--micro-batches", "1", "--top-k", "2", "--workers", "1"]
    args += ["--vary", "training.recompute=none", "--vary", "parallel.zero=0", "--no-progress"]
    args += ["--vary", "parallel.tp_comm_overlap=false", "--schedules", "1f1b,zb_h1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "est.rank" in out and "2 simulated" in out
