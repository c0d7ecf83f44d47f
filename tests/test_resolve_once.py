"""``simulate`` resolves a scenario once: the partition planner, the cost model and the
topology build each run once per run (issue 15; before the Job they ran 2×, 2–4× and up
to 2× per ``simulate``).

Calls are counted by code object with a profile hook, so every call site counts — a
re-derivation anywhere past ``resolve`` shows, whatever name it was imported under."""

from __future__ import annotations

import sys
from collections import Counter

import pytest

import clustersim as cs
from clustersim import planner
from clustersim.resolve import topology as resolve_topology
from clustersim.topology import registry
from clustersim.workload import stage_cost

COUNTED = {
    planner.resolve_partition.__code__: "resolve_partition",
    stage_cost.chunk_costs.__code__: "chunk_costs",
    registry.build_topology.__code__: "build_topology",
}
QUICK = "scenarios/quickstart.yaml"
ANALYTICAL = {"simulation.network": "analytical"}


def counted_simulate(sc, fresh: bool = True) -> Counter:
    """Calls of each :data:`COUNTED` function during ``cs.simulate(sc)``; ``fresh``: with
    the topology cache emptied first."""
    if fresh:
        resolve_topology._build.cache_clear()
    return _calls_of(COUNTED, sc)


@pytest.mark.parametrize(
    ("path", "overrides", "chunk_costs"),
    [
        (QUICK, {}, 1),  # a 3D pipeline: the run's p·v chunks on the one GPU type
        # PipeDream's planner prices one chunk per layer, then the run prices its chunks: 2 cuts
        (QUICK, {**ANALYTICAL, "parallel.partition": "pipedream", "parallel.schedule": "pipedream"}, 2),
        (QUICK, {**ANALYTICAL, "simulation.fold": True}, 1),  # folded (the fold check reads the Job's graph)
        # parameter server: per-layer costs (the workers' pushes) and the whole model (optimizer, memory)
        ("scenarios/ps-edge-16workers-20mbit.yaml", {}, 2),
    ],
    ids=["pipeline", "pipedream-partition", "folded", "parameter-server"],
)
def test_resolve_partition_chunk_costs_and_topology_run_once(path, overrides, chunk_costs):
    sc = cs.load_scenario(path).with_overrides(overrides) if overrides else cs.load_scenario(path)
    calls = counted_simulate(sc)
    assert calls == Counter(resolve_partition=1, chunk_costs=chunk_costs, build_topology=1)


def test_a_second_run_on_the_same_cluster_reuses_the_topology():
    sc = cs.load_scenario(QUICK).with_overrides(ANALYTICAL)
    counted_simulate(sc)
    calls = counted_simulate(sc.with_overrides({"parallel.schedule": "gpipe"}), fresh=False)
    assert calls == Counter(resolve_partition=1, chunk_costs=1)


def _calls_of(codes: dict, sc) -> Counter:
    """Calls of each code object of ``codes`` (→ its name) during ``cs.simulate(sc)``."""
    calls: Counter = Counter()

    def hook(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            calls[codes[frame.f_code]] += 1

    sys.setprofile(hook)
    try:
        cs.simulate(sc, progress=False)
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize(
    "overrides",
    [ANALYTICAL, {**ANALYTICAL, "simulation.compute_noise": {"sigma": 0.1}}],  # foldable, not foldable
    ids=["foldable", "not-foldable"],
)
def test_the_mode_check_and_the_fold_obstacle_run_once_per_run(overrides):
    from clustersim.compilers import MODES
    from clustersim.resolve import fold

    codes = {type(mode).check.__code__: "check" for mode in MODES.values()}
    codes[fold.fold_obstacle.__code__] = "fold_obstacle"
    sc = cs.load_scenario(QUICK).with_overrides(overrides)
    assert _calls_of(codes, sc) == Counter(check=1, fold_obstacle=1)
