"""Plan search at estimate speed: plans per CPU-second through the analytical estimate, and
how the estimate's top-1 compares with the best plan the simulation confirms.

    python benchmarks/search_speed.py              # the shipped search scenarios
    python benchmarks/search_speed.py --top-k 5 --confirm   # also simulate each one's top-k

Per scenario (scenarios/megatron-162b-64gpu-search.yaml and scenarios/sweeps/*.yaml — the
sweep file's base scenario — the search of notebooks/04-plan-search.ipynb among them), every
plan of the default space is loaded (the loader's rules) and estimated
(:class:`clustersim.experiments.plan_estimate.Estimator`), on CPU time
(``time.process_time``); reported: plans, how many load, plans per CPU-second (target
≥ 200, issue #19). With ``--confirm`` the estimate's top-k plans are simulated and the
line says whether the estimate's top-1 is the DES-confirmed best of them or how far below
it simulates (target: within 1%). The 162B scenario's plans simulate every TP all-reduce
on the fabric (about a minute each): ``--confirm`` there takes minutes per plan.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import clustersim as cs
from clustersim.experiments.grid import is_sweep_file, load_sweep_file
from clustersim.experiments.plan_estimate import Estimator
from clustersim.experiments.plans import label, plan_candidates
from clustersim.experiments.sweeper import base_raw
from clustersim.scenario import Scenario
from clustersim.scenario.loader import apply_overrides

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = [
    REPO / "scenarios/megatron-162b-64gpu-search.yaml",
    *sorted((REPO / "scenarios/sweeps").glob("*.yaml")),
]


def base_of(path: Path) -> cs.Scenario:
    """The scenario a search runs on (a sweep file's base)."""
    if is_sweep_file(path):
        return cs.load_scenario(load_sweep_file(path)[0])
    return cs.load_scenario(path)


def estimate_all(sc: cs.Scenario) -> tuple[int, list[tuple[float, dict]], float]:
    """(plans, [(estimated throughput, plan)] of those that load and fit, CPU seconds)."""
    raw, est = base_raw(sc), Estimator()
    t0 = time.process_time()
    plans = plan_candidates(sc, sc.num_gpus)
    fit = []
    for plan in plans:
        try:
            cand = Scenario(apply_overrides(raw, plan))
        except cs.ScenarioError:
            continue
        e = est.estimate(cand, plan)
        if e.memory_bytes <= e.capacity_bytes:
            fit.append((cand.training.global_batch / e.iteration_s, plan))
    return len(plans), fit, time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--confirm", action="store_true", help="simulate each scenario's top-k")
    args = ap.parse_args()
    for path in SCENARIOS:
        sc = base_of(path)
        n, fit, cpu = estimate_all(sc)
        print(f"{path.relative_to(REPO)}: {n} plans, {len(fit)} fit, {n / cpu:.0f} plans per CPU-second")
        if not args.confirm or not fit:
            continue
        top = sorted(fit, key=lambda x: -x[0])[: args.top_k]
        sims = [cs.simulate(sc.with_overrides(plan)).summary["samples_per_s"] for _, plan in top]
        best = max(sims)
        gap = 1 - sims[0] / best
        verdict = "is the best simulated" if gap == 0 else f"simulates {gap:.2%} below the best"
        print(f"  estimate's top-1 {label(top[0][1])} {verdict} of the top {len(top)}")


if __name__ == "__main__":
    main()
