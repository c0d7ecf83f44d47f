"""RLHF / GRPO iterations on one timeline (docs/rlhf.md): the phase sums, the pools' busy
and idle time, the weight transfer's bytes (against an element-by-element count), the
broadcast's bytes per generation replica, determinism and the refusals."""

from __future__ import annotations

from fractions import Fraction
from math import lcm

import pandas as pd
import pytest

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.rlhf.layout import Layout, generation_layout, param_units, weight_moves
from clustersim.workload.resolve import resolve_transformer

BASE = {
    "name": "grpo",
    "cluster": {"nodes": 1, "gpus_per_node": 8, "gpu": "A100-SXM4-80GB"},
    "model": {"preset": "llama2-7b"},
    "training": {"global_batch": 8, "micro_batch": 1, "precision": "bf16", "cuda_graphs": True},
    "parallel": {"tp": 2, "pp": 1},
    "simulation": {"fidelity": "fast"},
    "rlhf": {
        "prompts": 4,
        "samples_per_prompt": 4,
        "prompt_len": 64,
        "output_len": {"dist": "uniform", "low": 4, "high": 24},
        "iterations": 3,
    },
}


def scenario(**rlhf):
    return {**BASE, "rlhf": {**BASE["rlhf"], **rlhf}}


@pytest.fixture(scope="module")
def runs():
    return {
        "colocated": cs.simulate(scenario(algorithm="ppo", reward_model=True), progress=False),
        "split_sync": cs.simulate(scenario(generation_gpus=4), progress=False),
        "split_async": cs.simulate(scenario(generation_gpus=4, staleness=1), progress=False),
    }


def _iteration_ends(phases: pd.DataFrame) -> list[float]:
    return [0.0, *phases.groupby("iteration")["end_s"].max().tolist()]


@pytest.mark.parametrize("name", ["colocated", "split_sync"])
def test_synchronous_phases_sum_to_the_iteration_time(runs, name):
    res = runs[name]
    ph = res.phases
    ends = _iteration_ends(ph)
    for k, group in ph.groupby("iteration"):
        spent = float((group["end_s"] - group["start_s"]).sum())
        assert spent == pytest.approx(ends[k + 1] - ends[k], rel=1e-12)
        # one after another: each phase starts where the one before it ended
        assert group["start_s"].iloc[1:].tolist() == pytest.approx(
            group["end_s"].iloc[:-1].tolist(), rel=1e-12
        )
    s = res.summary
    names = set(ph["phase"])
    per_iteration = s["generation_s"] + s["weight_sync_s"]
    per_iteration += s["scoring_forward_s"] * len(
        names & {"actor_logprob", "reference", "reward", "critic_forward"}
    )
    per_iteration += s["train_step_s"] * len(names & {"actor_train", "critic_train"})
    assert s["iteration_time_s"] == pytest.approx(per_iteration, rel=1e-12)


def test_ppo_runs_the_critic_and_the_reward_model(runs):
    names = runs["colocated"].phases.query("iteration == 0")["phase"].tolist()
    assert names == [
        "weight_sync",
        "generation",
        "actor_logprob",
        "reference",
        "reward",
        "critic_forward",
        "actor_train",
        "critic_train",
    ]
    assert set(runs["split_sync"].phases["phase"]) == {
        "generation",
        "actor_logprob",
        "reference",
        "actor_train",
        "weight_sync",
    }


def test_split_pools_with_staleness_report_busy_and_idle(runs):
    res = runs["split_async"]
    ph, pools = res.phases, res.pools.set_index("pool")
    span = float(ph["end_s"].max())
    for pool in ("generation", "training"):
        busy = float((ph["end_s"] - ph["start_s"])[ph["pool"] == pool].sum())
        assert pools.loc[pool, "busy_s"] == pytest.approx(busy, rel=1e-12)
        assert pools.loc[pool, "busy_s"] + pools.loc[pool, "idle_s"] == pytest.approx(span, rel=1e-12)
        assert res.summary[f"{pool}_idle_s"] == pytest.approx(pools.loc[pool, "idle_s"], rel=1e-12)
    assert pools.loc["generation", "idle_s"] > 0
    # generation of batch k + 1 overlaps the training of batch k, and waits for update k − 1
    gen = ph[ph["pool"] == "generation"].set_index("iteration")
    train = ph[ph["phase"] == "weight_sync"].set_index("iteration")
    for k in range(2):
        assert gen.loc[k + 1, "start_s"] < train.loc[k, "end_s"]
    assert gen.loc[2, "start_s"] >= train.loc[0, "end_s"]
    # the overlap makes it faster than the synchronous split
    assert res.summary["makespan_s"] < runs["split_sync"].summary["makespan_s"]


def test_each_generation_replica_receives_the_parameters_once_in_the_generation_dtype(runs):
    params = resolve_transformer(cs.load_scenario(BASE).model).params()
    for name in ("split_sync", "split_async", "colocated"):
        res = runs[name]
        moves = res.transfers
        replica = moves["dst"] // 1  # rollout tp 1 × pp 1: a replica per GPU
        got = moves.groupby(replica)["bytes"].sum()
        if name.startswith("split"):
            assert sorted(got.index) == [0, 1, 2, 3]  # every generation GPU, nothing else
            assert got.tolist() == pytest.approx([2.0 * params] * 4, rel=1e-12)  # bf16: 2 bytes
            assert set(moves["src"]) <= set(range(4, 8))
        else:  # each GPU already holds its half of the TP-2 shard
            assert got.tolist() == pytest.approx([params] * 8, rel=1e-12)
        assert res.summary["weight_sync_bytes"] == pytest.approx(float(moves["bytes"].sum()), rel=1e-12)


def _owners(sizes, layout):
    """Element by element: the set of (unit, element) each GPU of ``layout`` holds — units
    scaled so every TP fraction is whole elements (an independent count)."""
    out = {}
    n = len(sizes)
    per = (n - 2) // layout.pp
    for gpu, (stage, k) in zip(layout.gpus, layout.roles):
        first = 0 if stage == 0 else 1 + stage * per
        last = n if stage == layout.pp - 1 else 1 + (stage + 1) * per
        out[gpu] = {
            (u, e)
            for u in range(first, last)
            for e in range(sizes[u])
            if k * sizes[u] <= e * layout.tp < (k + 1) * sizes[u]
        }
    return out


def _train(tp, pp, dp):
    """Megatron's order (the plan's): tp fastest, then dp, then pp."""
    roles = tuple((r // (tp * dp), r % tp) for r in range(tp * pp * dp))
    return Layout(tuple(range(len(roles))), roles, tp, pp)


@pytest.mark.parametrize(
    "train, gen",
    [
        ((2, 1, 2), (1, 1)),
        ((2, 2, 2), (4, 1)),
        ((1, 2, 4), (2, 2)),
        ((4, 2, 1), (2, 1)),
        ((2, 2, 2), (2, 2)),
        ((2, 1, 4), (2, 1)),
    ],
)
def test_colocated_reshard_moves_exactly_the_bytes_whose_owner_changes(train, gen):
    base = 4 * lcm(1, 2, 3, 4)
    sizes = [base, *[2 * base] * 4, base // 2]  # embedding, 4 layers, output
    t = _train(*train)
    g = generation_layout(len(t.gpus), *gen)
    moves = weight_moves(sizes, t, g, 2, gpus_per_node=4)
    have, want = _owners(sizes, t), _owners(sizes, g)
    for dst in g.gpus:
        expected = len(want[dst] - have[dst])
        got = sum((b for _, d, b in moves if d == dst), Fraction(0))
        assert got == 2 * expected
        # each piece comes from a GPU that holds it
        for src, d, _ in moves:
            if d == dst:
                assert have[src] & want[dst]
    if train[0] == gen[0] and train[1] == gen[1] and train[2] == 1:
        assert moves == []


def test_identical_layouts_move_nothing():
    sizes = [8, 16, 16, 4]
    t = _train(2, 1, 4)
    assert weight_moves(sizes, t, generation_layout(8, 2, 1), 2, 8) == []


def test_param_units_sum_to_the_model():
    cfg = resolve_transformer(cs.load_scenario(BASE).model)
    assert sum(param_units(cfg)) == cfg.params()


def test_offload_adds_the_state_over_the_bandwidth_both_ways():
    res = cs.simulate(scenario(offload=True, offload_bandwidth="20 GB/s", iterations=1), progress=False)
    ph = res.phases.set_index("phase")
    d = ph["end_s"] - ph["start_s"]
    assert d["offload"] == d["reload"] > 0
    assert list(ph.index[:4]) == ["weight_sync", "offload", "generation", "reload"]
    assert float(d.sum()) == pytest.approx(res.summary["iteration_time_s"], rel=1e-12)


def test_deterministic(runs):
    again = cs.simulate(scenario(generation_gpus=4, staleness=1), progress=False)
    pd.testing.assert_frame_equal(again.phases, runs["split_async"].phases)
    pd.testing.assert_frame_equal(again.transfers, runs["split_async"].transfers)


def test_generation_gpus_sweep_compares_colocated_and_split():
    from clustersim.experiments import sweep

    df = sweep(scenario(iterations=1), grid={"rlhf.generation_gpus": [0, 4]}, workers=1, progress=False)
    assert df["status"].tolist() == ["ok", "ok"]
    assert df["colocated"].tolist() == [True, False]
    assert df["training_gpus"].tolist() == [8, 4]


@pytest.mark.parametrize(
    "rlhf, field, says",
    [
        ({"generation_gpus": 8}, "rlhf.generation_gpus", "fewer than the job's 8 GPUs"),
        ({"generation_gpus": 3, "rollout": {"tp": 2}}, "rlhf.generation_gpus", "multiple of"),
        ({"rollout": {"tp": 3}}, "rlhf.generation_gpus", "multiple of"),
        ({"staleness": 1}, "rlhf", "needs split pools"),
        ({"offload": True}, "rlhf", "offload_bandwidth"),
        ({"generation_gpus": 4, "offload": True, "offload_bandwidth": "1 GB/s"}, "rlhf", "colocated"),
        ({"prompts": 0}, "rlhf.prompts", "from 1"),
        ({"staleness": 65, "generation_gpus": 4}, "rlhf.staleness", "64"),
        ({"output_len": {"dist": "uniform", "low": 9, "high": 3}}, "rlhf.output_len", "at most high"),
        ({"prompts": 1, "samples_per_prompt": 2}, "rlhf.generation_gpus", "generation replicas"),
        ({"algorithm": "dpo"}, "rlhf.algorithm", "grpo"),
        ({"prompts": 3, "samples_per_prompt": 3}, "rlhf.prompts", "multiple of micro_batch"),
        ({"prompt_len": 900_000, "output_len": 4}, "rlhf.rollout.kv_memory_fraction", "KV blocks"),
    ],
)
def test_bad_input_is_refused_naming_the_field(rlhf, field, says):
    with pytest.raises(ScenarioError) as err:
        cs.simulate(scenario(**rlhf), progress=False)
    assert err.value.field.startswith(field)
    assert says in str(err.value)


def test_the_timeline_is_every_gpus_spans_and_saves(runs, tmp_path):
    res = runs["split_async"]
    busy = res.pools.set_index("pool")["busy_s"]
    spans = res.spans.assign(d=res.spans["end_s"] - res.spans["start_s"])
    per_gpu = spans.groupby("device")["d"].sum()
    assert len(per_gpu) == 8
    for g in range(8):
        assert per_gpu[f"gpu{g}"] == pytest.approx(busy["generation" if g < 4 else "training"], rel=1e-12)
    out = res.save(tmp_path / "bundle", plots=False)
    assert (out / "spans.csv").exists() and (out / "summary.json").exists()


def test_training_only_settings_stay_with_the_training_step():
    """ZeRO, recompute, an interleaved schedule and several iterations are the training
    step's; the forward-only phases (scoring, generation) run without them."""
    sc = {
        **scenario(iterations=1),
        "training": {**BASE["training"], "recompute": "full"},
        "parallel": {"tp": 2, "pp": 2, "zero": 1, "schedule": "interleaved", "virtual_stages": 2},
        "simulation": {"fidelity": "fast", "iterations": 2},
    }
    res = cs.simulate(sc, progress=False)
    assert res.summary["train_step_s"] > 0 and res.summary["scoring_forward_s"] > 0
    # TP 2 × PP 2 × DP 2 hold two copies of the model; 8 TP-1 replicas need 8: 6 move (bf16)
    params = resolve_transformer(cs.load_scenario(BASE).model).params()
    assert res.summary["weight_sync_bytes"] == pytest.approx(8 * 2 * params * 3 / 4, rel=1e-12)


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"training": {**BASE["training"], "mode": "inference"}}, "training.mode"),
        ({"generation": {"prompt_len": 4, "output_len": 4}}, "generation"),
        ({"energy": {}}, "energy"),
    ],
)
def test_sections_the_driver_owns_are_refused(extra, field):
    with pytest.raises(ScenarioError) as err:
        cs.load_scenario({**BASE, **extra})
    assert err.value.field == field


def test_the_rollout_phase_is_the_generation_modes_run_of_the_same_requests():
    """One replica: the phase is exactly the makespan the generation mode gives the same
    requests (prompt 64, outputs from the same stream [seed, 2]), all at t = 0."""
    sc = {
        **scenario(iterations=1, rollout={"tp": 2}),
        "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu": "A100-SXM4-80GB"},
    }
    res = cs.simulate(sc, progress=False)
    serve = {
        **{k: v for k, v in sc.items() if k != "rlhf"},
        "training": {"mode": "inference", "global_batch": 1, "cuda_graphs": True, "precision": "bf16"},
        "generation": {"requests": 16, "prompt_len": 64, "output_len": BASE["rlhf"]["output_len"]},
    }
    assert res.summary["generation_replica_s"] == [
        cs.simulate(serve, progress=False).summary["iteration_time_s"]
    ]
