"""Folding under contention (issue 38 item 3): CPU time and simulated events of the GPT-7.5B
family (``benchmarks/scale.py --family``) at ``balanced``, unfolded against folded.

    python benchmarks/fold_contention.py                        # 256, 512, 1,024 GPUs
    python benchmarks/fold_contention.py --sizes 256 --oversubscription 2
    python benchmarks/fold_contention.py --sizes 1024 --unfolded-max 0   # skip unfolded runs
    python benchmarks/fold_contention.py --sizes 256 --cp 2 --oversubscription 2  # ring attention

Per size, each run in a fresh process (benchmarks/scale.py's ``in_subprocess``):
``unfolded`` (``simulation.fold: false``; only up to ``--unfolded-max`` GPUs, default 512 —
the unfolded 1,024-GPU run takes minutes), ``shadows`` (folded, the twins' traffic as flows of
their own: ``fold_contention: false``) and ``orbits`` (folded, ``fold_contention: true``:
clustersim/network/orbits.py). It prints CPU seconds, simulated events and the iteration
time of each, then each folded run's ratios to the unfolded one (CPU, events) and its
iteration time's difference from it (the issue's bound: within 1 %). ``--oversubscription``
sets the fat tree's (the family's is 1). ``--cp N``: the family with context parallelism —
TP 8 × CP N × DP, 8K tokens, ring attention (flash attention, layer granularity), each CP
rank on its own server; a CP ring folds at ``balanced`` where its servers sit under one
leaf (every rank then receives over the same kind of hop: docs/fidelity.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import scale  # noqa: E402 (the family and the fresh-process runner live there)

RUNS = (
    ("unfolded", {"fold": False}),
    ("shadows", {"fold": True, "fold_contention": False}),
    ("orbits", {"fold": True, "fold_contention": True}),
)


def case(gpus: int, oversubscription: float, simulation: dict, cp: int = 1) -> dict:
    """The family at ``gpus`` on a fat tree of ``oversubscription``, with ``simulation`` set
    (``cp`` > 1: with context parallelism, module docstring)."""
    raw = scale.family(gpus)
    raw["cluster"]["topology"] = {**raw["cluster"]["topology"], "oversubscription": oversubscription}
    raw["simulation"] = {**raw["simulation"], **simulation}
    if cp > 1:
        dp = gpus // (8 * cp)
        raw["model"] = {**raw["model"], "seq_len": 8192, "attention": "flash"}
        raw["parallel"] = {**raw["parallel"], "cp": cp, "dp": dp}
        raw["training"] = {**raw["training"], "global_batch": 8 * dp}
    return raw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,512,1024", help="GPU counts, comma-separated")
    ap.add_argument("--unfolded-max", type=int, default=512, help="run unfolded up to this many GPUs")
    ap.add_argument("--oversubscription", type=float, default=1.0)
    ap.add_argument("--cp", type=int, default=1, help="context-parallel size (ring attention)")
    args = ap.parse_args()
    print(
        f"{'GPUs':>6} {'run':<9} {'CPU s':>8} {'events':>9} {'iter s':>10}   vs unfolded: CPU, events, iter"
    )
    for gpus in (int(s) for s in args.sizes.split(",")):
        got = {}
        for label, simulation in RUNS:
            if label == "unfolded" and gpus > args.unfolded_max:
                continue
            r = got[label] = scale.in_subprocess(case(gpus, args.oversubscription, simulation, args.cp))
            line = f"{gpus:>6} {label:<9} {r['cpu_s']:>8.2f} {r['events']:>9} {r['iteration_s']:>10.6f}"
            base = got.get("unfolded")
            if base is not None and label != "unfolded":
                line += (
                    f"   {r['cpu_s'] / base['cpu_s']:.3f}×, {r['events'] / base['events']:.3f}×, "
                    f"{r['iteration_s'] / base['iteration_s'] - 1:+.2e}"
                )
            if label == "orbits":
                line += f"   (orbits ÷ shadows: CPU {r['cpu_s'] / got['shadows']['cpu_s']:.3f}×, "
                line += f"events {r['events'] / got['shadows']['events']:.3f}×)"
            print(line, flush=True)


if __name__ == "__main__":
    main()
