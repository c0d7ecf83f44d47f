"""The pre-run estimate and the budget of work (issue 18 item 2, issue 21 item 1): the
estimate holds within 2× of a run's real op and event counts, a run past the budget is
refused before compiling with the estimate and advice, and the #18 repros of unbounded
work are each one ``error:`` line, quickly."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import clustersim as cs
from clustersim.cli import main
from clustersim.compilers import compile_job
from clustersim.resolve import resolve
from clustersim.resolve.estimate import advice, check_budget, estimate
from clustersim.simulate import run_job

ROOT = Path(__file__).resolve().parent.parent
SCEN = ROOT / "scenarios"
QUICK = SCEN / "quickstart.yaml"
SYNTH = SCEN / "synthetic-4stage-1f1b.yaml"

#: (scenario, overrides): every network model, both collective models and granularities,
#: zero-bubble and interleaved orders, mixed GPUs, WAN sites, a parameter server, folding
CASES = [
    (SYNTH, {}),
    (SYNTH, {"parallel.schedule": "zb_h1", "model.backward_weight": "1 ms"}),
    (SYNTH, {"parallel.schedule": "interleaved", "parallel.virtual_stages": 2}),
    (QUICK, {}),
    (QUICK, {"simulation.network": "flow"}),
    (QUICK, {"simulation.collectives.all_reduce": "nccl"}),  # NCCL's tree across the 2 nodes
    (QUICK, {"simulation.network": "flow", "simulation.granularity": "stage"}),
    (QUICK, {"simulation.network": "analytical", "simulation.collective_model": "analytical"}),
    (SCEN / "hap-mixed-a100-v100.yaml", {}),
    (SCEN / "fusionllm-gpt-1.3b-48gpu-3sites-wan.yaml", {}),
    (SCEN / "ps-edge-16workers-20mbit.yaml", {}),
    (SCEN / "gpt3-175b-1024xa100-balanced.yaml", {"simulation.fidelity": "fast"}),  # folded, the DAG
    (SCEN / "gpt-7.5b-64xh100-balanced.yaml", {"simulation.fidelity": "fast"}),
]


@pytest.mark.parametrize("path,overrides", CASES, ids=lambda c: c.name if isinstance(c, Path) else str(c))
def test_the_estimate_is_within_2x_of_the_real_counts(path, overrides):
    job = resolve(cs.load_scenario(path).with_overrides(overrides))
    est = estimate(job)
    ops = len(compile_job(job).ops)
    events = run_job(job).summary["sim_events"]
    assert 0.5 <= est.ops / ops <= 2, (est.ops, ops)
    assert 0.5 <= est.events / events <= 2, (est.events, events)


def test_small_chunks_multiply_the_packet_events_as_the_estimate_says():
    """chunk_size 64 KiB instead of 1 MiB: 16× the chunks of every large message."""
    base = resolve(cs.load_scenario(QUICK))
    small = resolve(cs.load_scenario(QUICK).with_overrides({"simulation.chunk_size": 65536}))
    assert 10 < estimate(small).events / estimate(base).events < 16


def test_the_exact_gpt7b_on_64_h100_gets_advice_that_names_balanced():
    job = resolve(
        cs.load_scenario(SCEN / "gpt-7.5b-64xh100-balanced.yaml").with_overrides(
            {"simulation.fidelity": "exact"}
        )
    )
    est = estimate(job)
    assert est.seconds > 60 and est.ops > 1_000_000
    tips = advice(job, est)
    assert any(t.startswith("simulation.fidelity: balanced") for t in tips)
    assert any(t.startswith("simulation.fidelity: fast") for t in tips)


def test_the_balanced_targets_are_estimated_under_a_minute():
    for name in ("gpt-7.5b-64xh100-balanced.yaml", "gpt3-175b-1024xa100-balanced.yaml"):
        assert estimate(resolve(cs.load_scenario(SCEN / name))).seconds < 60


def _cli(capsys, *sets: str) -> tuple[int, list[str], float]:
    t0 = time.perf_counter()
    code = main(["run", str(SYNTH), "--quiet", *[a for s in sets for a in ("--set", s)]])
    return code, capsys.readouterr().err.splitlines(), time.perf_counter() - t0


@pytest.mark.parametrize(
    "sets,expected",
    [
        # the #18 repros: bounded at load
        (
            ["simulation.chunk_size=1"],
            "error: simulation.chunk_size: 1 is invalid; expected a value from 4,096",
        ),
        (
            ["simulation.iterations=18446744073709551617"],
            "error: simulation.iterations: 18446744073709551617",
        ),
        # valid numbers whose product is unbounded work: refused by the budget, before compiling
        (
            ["model.activation=64 MiB", "simulation.chunk_size=4096", "training.global_batch=65536"],
            "error: simulation.max_events: 200000000 is invalid; this run is estimated at ~",
        ),
        (
            ["training.global_batch=100000000"],
            "error: simulation.max_ops: 10000000 is invalid; this run is estimated at ~",
        ),
    ],
)
def test_unbounded_work_is_one_error_line_at_once(capsys, sets, expected):
    code, err, took = _cli(capsys, *sets)
    assert code == 2 and len(err) == 1 and err[0].startswith(expected), err
    assert took < 10


def test_image_size_repro_is_one_error_line(capsys):
    code = main(
        [
            "run",
            str(SCEN / "pipedream-vgg16-16xV100-10GbE.yaml"),
            "--quiet",
            "--set",
            "model.image_size=1000000",
        ]
    )
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and err == [
        "error: model.image_size: 1000000 is invalid; expected a value from 32 to 8,192"
    ]


def test_a_refusal_says_what_brings_the_estimate_down():
    sc = cs.load_scenario(SYNTH).with_overrides(
        {"model.activation": "64 MiB", "simulation.chunk_size": 4096, "training.global_batch": 65536}
    )
    with pytest.raises(cs.ScenarioError) as err:
        check_budget(resolve(sc))
    msg = str(err.value)
    assert err.value.field == "simulation.max_events"
    # the three best fixes: networks without chunks (the packets are what explodes)
    assert "to reduce it: simulation.fidelity: fast (~1.31 M ops" in msg
    assert "simulation.network: flow (" in msg and msg.count("× faster") == 3
    assert "(or raise simulation.max_events)" in msg


def test_raising_the_budget_lets_a_run_through():
    sc = cs.load_scenario(SYNTH).with_overrides({"simulation.max_events": 1000})
    with pytest.raises(cs.ScenarioError, match="simulation.max_events: 1000 is invalid"):
        cs.simulate(sc, progress=False)
    assert (
        cs.simulate(sc.with_overrides({"simulation.max_events": 10_000}), progress=False).summary[
            "sim_events"
        ]
        > 1000
    )
