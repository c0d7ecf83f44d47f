"""Wall time and iteration time of the two balanced scenarios at each fidelity and
oversubscription (issue 21: balanced under a minute, oversubscription seen as packet sees
it). Prints one row per run; the packet runs take minutes to hours on a 2-core machine, so
``--no-packet`` leaves them out. Numbers are recorded in docs/fidelity.md.

``--short`` runs GPT-3 175B / 1,024 A100 alone with ``training.global_batch: 128`` (16
micro-batches per replica instead of 192) and, on the packet network, 4 MiB chunks instead
of 1 MiB: the packet reference in minutes instead of hours (its events are the data-parallel
all-reduces' chunks on every hop, 64 twins' worth per stage; 4× fewer). What the
oversubscription comparison needs is unchanged — the same stages, the same 2.7 GB
data-parallel all-reduce per stage over the same spines, started in the same 1F1B
cool-down order one backward apart — while the compute before it shrinks 12×, so the
all-reduce's share of the iteration grows. The larger chunk adds at most (hops − 1) chunk
times per ring step to packet's store-and-forward term (docs/fidelity.md).

    python benchmarks/fidelity.py [--no-packet | --fidelity exact|balanced|fast] [--short]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import clustersim as cs

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ("gpt-7.5b-64xh100-balanced.yaml", "gpt3-175b-1024xa100-balanced.yaml")
#: the shortened GPT-3 175B packet reference (``--short``)
SHORT = (
    "gpt3-175b-1024xa100-balanced.yaml",
    {"training.global_batch": 128, "simulation.chunk_size": "4 MiB"},
)


def run(
    path: Path, oversubscription: int, fidelity: str, extra: dict | None = None
) -> tuple[float, float, int]:
    """(iteration time, wall seconds, simulated events) of one run."""
    over = {"cluster.topology.oversubscription": oversubscription, "simulation.fidelity": fidelity}
    if fidelity == "exact":
        over["simulation.granularity"] = "stage"  # the packet reference of a stage-granularity preset
    sc = cs.load_scenario(path).with_overrides({**over, **(extra or {})})
    t0 = time.perf_counter()
    res = cs.simulate(sc, progress=False)
    return res.summary["iteration_time_s"], time.perf_counter() - t0, res.summary["sim_events"]


def main(argv: list[str]) -> None:
    fidelities = ("balanced", "fast") if "--no-packet" in argv else ("balanced", "fast", "exact")
    if "--fidelity" in argv:
        fidelities = (argv[argv.index("--fidelity") + 1],)
    cases = [SHORT] if "--short" in argv else [(name, {}) for name in SCENARIOS]
    print(f"{'scenario':<36} {'oversub':>7} {'fidelity':>9} {'iteration_s':>12} {'wall_s':>8} {'events':>10}")
    for name, extra in cases:
        for fidelity in fidelities:
            for o in (1, 2, 4):
                t, wall, events = run(ROOT / "scenarios" / name, o, fidelity, extra)
                print(f"{name:<36} {o:>7} {fidelity:>9} {t:>12.6f} {wall:>8.1f} {events:>10}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
