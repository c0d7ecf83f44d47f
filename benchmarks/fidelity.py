"""Wall time and iteration time of the two balanced scenarios at each fidelity and
oversubscription (issue 21: balanced under a minute, oversubscription seen as packet sees
it). Prints one row per run; the packet runs take minutes to hours on a 2-core machine, so
``--no-packet`` leaves them out. Numbers are recorded in docs/fidelity.md.

    python benchmarks/fidelity.py [--no-packet]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import clustersim as cs

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ("gpt-7.5b-64xh100-balanced.yaml", "gpt3-175b-1024xa100-balanced.yaml")


def run(path: Path, oversubscription: int, fidelity: str) -> tuple[float, float, int]:
    """(iteration time, wall seconds, simulated events) of one run."""
    over = {"cluster.topology.oversubscription": oversubscription, "simulation.fidelity": fidelity}
    if fidelity == "exact":
        over["simulation.granularity"] = "stage"  # the packet reference of a stage-granularity preset
    sc = cs.load_scenario(path).with_overrides(over)
    t0 = time.perf_counter()
    res = cs.simulate(sc, progress=False)
    return res.summary["iteration_time_s"], time.perf_counter() - t0, res.summary["sim_events"]


def main(argv: list[str]) -> None:
    fidelities = ("balanced", "fast") if "--no-packet" in argv else ("balanced", "fast", "exact")
    print(f"{'scenario':<36} {'oversub':>7} {'fidelity':>9} {'iteration_s':>12} {'wall_s':>8} {'events':>10}")
    for name in SCENARIOS:
        for fidelity in fidelities:
            for o in (1, 2, 4):
                t, wall, events = run(ROOT / "scenarios" / name, o, fidelity)
                print(f"{name:<36} {o:>7} {fidelity:>9} {t:>12.6f} {wall:>8.1f} {events:>10}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
