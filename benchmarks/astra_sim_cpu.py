"""CPU time on one Chakra trace, clustersim against ASTRA-sim's analytical backend (issue 38).

    python benchmarks/astra_sim_cpu.py --astra ASTRA_BIN [--ranks 512] [--micro-batches 32]
    python benchmarks/astra_sim_cpu.py            # clustersim's side only (ASTRA-sim not given)

The trace: a data-parallel export at ``--ranks`` ranks — GPT-1.3B (24 layers) on DGX A100
nodes, DP = ranks, micro-batch 1, ``--micro-batches`` a replica, ``fidelity: fast`` at layer granularity —
written once by ``export_chakra`` (its time is printed, not compared). Then, each in its own
process:

* **clustersim**: ``model: {kind: trace, chakra: <folder>}`` on the same cluster, loaded and
  simulated (the trace's import, compile and run), CPU seconds by ``time.process_time``
  after a small warm-up run in that process (Python's module imports left out);
* **ASTRA-sim** (``AstraSim_Analytical_Congestion_Unaware`` as
  ``../shared/tools/astra-sim-build`` builds it): the same folder on a two-level switch network
  from the cluster (:func:`astra_sim_check.cluster_network`), its CPU seconds (user + system
  of the child process).

Printed: both iteration times, both CPU times and clustersim ÷ ASTRA-sim (the target is
≤ 1). The machine is shared: read the ratio of one run. Nothing in the test suite runs this.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import clustersim as cs

HERE = Path(__file__).resolve().parent


def dp_scenario(ranks: int, micro_batches: int) -> dict:
    """The data-parallel job the trace is exported from (module docstring)."""
    return {
        "name": f"gpt-1.3b-dp{ranks}",
        "cluster": {"preset": "dgx_a100", "nodes": max(1, ranks // 8)},
        "model": {"preset": "gpt-1.3b"},
        "training": {"global_batch": micro_batches * ranks, "micro_batch": 1},
        "parallel": {"dp": ranks, "gpus": ranks},
        "simulation": {"fidelity": "fast", "granularity": "layer"},
    }


def trace_scenario(raw: dict, folder: Path) -> dict:
    """``raw``'s cluster running the trace in ``folder``."""
    return {
        "name": f"{raw['name']}-trace",
        "cluster": raw["cluster"],
        "model": {"kind": "trace", "chakra": str(folder)},
        "training": {"global_batch": raw["parallel"]["gpus"], "micro_batch": 1},
        "simulation": raw["simulation"],
    }


#: run in a fresh process: a warm-up simulation, then the timed one; prints CPU s and time
_CLUSTERSIM = """
import json, sys, time
import clustersim as cs
warm = {"name": "warm-up", "cluster": {"preset": "dgx_a100", "nodes": 1},
        "model": {"preset": "gpt-1.3b", "layers": 2}, "training": {"global_batch": 8, "micro_batch": 1},
        "parallel": {"dp": 8}, "simulation": {"fidelity": "fast"}}
cs.simulate(cs.load_scenario(warm), progress=False)
t = time.process_time()
result = cs.simulate(cs.load_scenario(json.loads(sys.argv[1])), progress=False)
print(time.process_time() - t, result.summary["iteration_time_s"])
"""


def clustersim_s(raw: dict) -> tuple[float, float]:
    """(CPU s, iteration s) of clustersim on trace scenario ``raw``, in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _CLUSTERSIM, json.dumps(raw)], capture_output=True, text=True, check=True
    )
    cpu, iteration = out.stdout.split()[-2:]
    return float(cpu), float(iteration)


def astra_s(binary: Path, folder: Path, raw: dict) -> tuple[float, float | None]:
    """(CPU s, iteration s or None where an NPU never finished) of ASTRA-sim on ``folder``."""
    sys.path.insert(0, str(HERE))
    from astra_sim_check import cluster_network, run_astra

    network = cluster_network(cs.load_scenario(raw))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    iteration = run_astra(binary, folder / "trace", network, 1, folder / "comm_group.json")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, iteration


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--astra", type=Path, help="AstraSim_Analytical_Congestion_Unaware")
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--micro-batches", type=int, default=32, help="micro-batches a replica")
    args = ap.parse_args()
    raw = dp_scenario(args.ranks, args.micro_batches)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "trace"
        t0 = time.process_time()
        cs.export_chakra(cs.load_scenario(raw), folder)
        print(
            f"{raw['name']}: {args.micro_batches} micro-batches a replica, exported in "
            f"{time.process_time() - t0:.1f} CPU s ({sum(f.stat().st_size for f in folder.iterdir()) / 2**20:.1f} MiB)"
        )
        ours, ours_t = clustersim_s(trace_scenario(raw, folder))
        print(f"  clustersim (import + compile + simulate): {ours:7.2f} CPU s, iteration {ours_t:.4f} s")
        if args.astra is None or not args.astra.is_file():
            print(
                f"  ASTRA-sim: skipped ({args.astra or 'not given'}: no binary; build it with "
                "../shared/tools/astra-sim-build and pass --astra)"
            )
            return
        theirs, theirs_t = astra_s(args.astra, folder, raw)
        shown = f"{theirs_t:.4f} s" if theirs_t else "did NOT finish"
        print(f"  ASTRA-sim analytical (congestion-unaware): {theirs:7.2f} CPU s, iteration {shown}")
        met = "met" if ours <= theirs else "NOT met"
        print(f"  ratio clustersim ÷ ASTRA-sim {ours / theirs:.2f} (target ≤ 1: {met})")


if __name__ == "__main__":
    main()
