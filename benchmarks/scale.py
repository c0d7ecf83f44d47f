"""Scale benchmark: wall time and peak memory of large simulations (issue "Scale").

    python benchmarks/scale.py            # everything (the unfolded 1,024-GPU run takes minutes)
    python benchmarks/scale.py --quick    # skip the unfolded run

Prints a table:
  (a) GPT-3 175B on 1,024 A100 (DGX-A100 fat tree; TP 8, PP 16, DP 8; batch 1,536, micro-batch 1;
      1F1B; full recompute), one iteration, folded and unfolded;
  (b) a LLaMA-3-405B-like job on 16,384 H100 (TP 8, PP 16, DP 128; batch 2,048), folded;
  (c) wall time against GPU count (64 → 16,384) and against micro-batches per iteration;
  (d) engine events per second against a bare SimPy loop (benchmarks/engine_speed.py).
Every run is a fresh subprocess so its peak RSS is its own. Fidelity for (a)–(c):
``network: analytical``, ``collective_model: analytical``, ``granularity: stage`` — the fastest
that keeps Megatron's Table 1 within its stated error (docs/validation.md).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

FAST = {"network": "analytical", "collective_model": "analytical", "granularity": "stage"}


def gpt3_175b(fold: bool) -> dict:
    return {
        "name": "gpt3-175b-1024xA100",
        "cluster": {"preset": "dgx_a100", "nodes": 128},
        "model": {"kind": "transformer", "preset": "gpt3-175b"},
        "training": {"global_batch": 1536, "micro_batch": 1, "recompute": "full"},
        "parallel": {"tp": 8, "pp": 16, "dp": 8, "schedule": "1f1b"},
        "simulation": {**FAST, "fold": fold},
    }


def llama3_405b() -> dict:
    return {
        "name": "llama3-405b-16384xH100",
        "cluster": {"preset": "dgx_h100", "nodes": 2048},
        "model": {"kind": "transformer", "preset": "llama3-405b"},
        "training": {"global_batch": 2048, "micro_batch": 1, "recompute": "full"},
        "parallel": {
            "tp": 8,
            "pp": 16,
            "dp": 128,
            "schedule": "1f1b",
            "partition": "balanced",
            "sequence_parallel": True,
            "zero": 1,
        },
        "simulation": {**FAST, "fold": True},
    }


def gpus_sweep(gpus: int, m: int = 8) -> dict:
    """GPT 18.4B (Megatron Table 1) with TP 8 × PP 8 and as many DP replicas as fit."""
    dp = gpus // 64
    return {
        "name": f"gpt-18.4b-{gpus}gpu-m{m}",
        "cluster": {"preset": "dgx_a100", "nodes": gpus // 8},
        "model": {"kind": "transformer", "preset": "gpt-18.4b"},
        "training": {"global_batch": m * dp, "micro_batch": 1, "recompute": "full"},
        "parallel": {"tp": 8, "pp": 8, "dp": dp, "schedule": "1f1b"},
        "simulation": {**FAST, "fold": "auto"},
    }


def run_one(raw: dict) -> dict:
    """Simulate in this process; report wall time, peak RSS and the headline numbers."""
    from clustersim import simulate  # imports what simulate needs, outside the timing

    t0 = time.perf_counter()
    res = simulate(raw, progress=False)
    wall = time.perf_counter() - t0
    s = res.summary
    return {
        "name": raw["name"],
        "gpus": s["num_gpus"],
        "folded": s["folded"].split(":")[0].split(" (")[0],
        "wall_s": wall,
        "rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "iteration_s": s["iteration_time_s"],
        "events": s["sim_events"],
        "tflops_per_gpu": s.get("tflops_per_gpu"),
        "m": s["num_microbatches"],
    }


def in_subprocess(raw: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", json.dumps(raw)], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def row(label: str, r: dict, target: str = "") -> str:
    tf = f"{r['tflops_per_gpu']:.0f}" if r.get("tflops_per_gpu") else "-"
    return (
        f"{label:<34} {r['gpus']:>6} {r['m']:>5} {r['folded']:>7} {r['wall_s']:>9.2f} {r['rss_gib']:>8.2f} "
        f"{r['iteration_s']:>10.3f} {tf:>7} {r['events']:>10}  {target}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description="clustersim scale benchmark")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="skip the unfolded 1,024-GPU run")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return
    print(
        f"{'case':<34} {'GPUs':>6} {'m':>5} {'folded':>7} {'wall s':>9} {'RSS GiB':>8} {'iter s':>10} "
        f"{'TFLOP/s':>7} {'events':>10}  target"
    )
    print(row("(a) GPT-3 175B folded", in_subprocess(gpt3_175b(True)), "≤ 5 s"), flush=True)
    if not args.quick:
        print(row("(a) GPT-3 175B unfolded", in_subprocess(gpt3_175b(False)), "≤ 600 s"), flush=True)
    print(row("(b) LLaMA-3-405B-like folded", in_subprocess(llama3_405b()), "≤ 60 s, ≤ 4 GiB"), flush=True)
    for gpus in (64, 256, 1024, 4096, 16384):
        print(row(f"(c) GPT 18.4B, {gpus} GPUs", in_subprocess(gpus_sweep(gpus))), flush=True)
    for m in (8, 32, 128, 512):
        print(row(f"(c) GPT 18.4B, 1024 GPUs, m={m}", in_subprocess(gpus_sweep(1024, m))), flush=True)
    out = subprocess.run([sys.executable, "benchmarks/engine_speed.py"], capture_output=True, text=True)
    print("(d) " + "\n    ".join(out.stdout.strip().splitlines()))


if __name__ == "__main__":
    main()
