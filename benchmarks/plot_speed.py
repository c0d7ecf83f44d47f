"""Plot speed at scale: a 1,024-GPU result drawn as Gantt, heatmap, utilization, memory, trace.

    python benchmarks/plot_speed.py [--pp 16] [--dp 64] [--microbatches 8] [--out /tmp/plot_speed]

Builds a synthetic pp × dp pipeline (1F1B, data-parallel gradient all-reduce, 8 GPUs per
node, ``simulation.network: direct`` to keep the simulation quick), then times each
picture and the Chrome trace and writes them to ``--out`` so you can look at them. The
bar (issue P2): the Gantt and the heatmap of 1,024 GPUs in under 30 s each.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import clustersim as cs  # noqa: E402


def scenario(pp: int, dp: int, m: int) -> dict:
    n = pp * dp
    return {
        "name": f"plot-speed pp{pp} x dp{dp} ({n} GPUs)",
        "cluster": {
            "nodes": n // 8,
            "gpus_per_node": 8,
            "gpu": "A100-SXM4-80GB",
            "intra_node": {"bandwidth": "300 GB/s", "latency": "2 us"},
            "nic": {"bandwidth": "200 Gbit/s", "per_node": 8},
        },
        "model": {
            "kind": "synthetic",
            "layers": pp,
            "forward": "1 ms",
            "backward": "2 ms",
            "activation": "16 MiB",
            "params": "256 MiB",
            "optimizer": "0.5 ms",
        },
        "training": {"global_batch": m * dp, "micro_batch": 1},
        "parallel": {"pp": pp, "dp": dp, "schedule": "1f1b"},
        "simulation": {"network": "direct"},
    }


def timed(label: str, fn):
    t0 = time.perf_counter()
    out = fn()
    print(f"{label:<28} {time.perf_counter() - t0:8.2f} s")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pp", type=int, default=16)
    ap.add_argument("--dp", type=int, default=64)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--out", default="/tmp/plot_speed")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    simulate = cs.simulate  # imports what it needs (clustersim's names are lazy) before the timing
    res = timed("simulate", lambda: simulate(scenario(args.pp, args.dp, args.microbatches), progress=False))
    print(f"{res.summary['num_gpus']} GPUs, {len(res.spans)} spans, {len(res.memory)} memory samples")
    for name, draw in (
        ("gantt", res.plot_gantt),
        ("heatmap", res.plot_heatmap),
        ("utilization", res.plot_utilization),
        ("memory", res.plot_memory),
        ("breakdown", res.plot_breakdown),
    ):

        def render(draw=draw, name=name):
            fig = draw()
            fig.savefig(out / f"{name}.png", dpi=110, bbox_inches="tight")
            plt.close(fig)

        timed(f"{name} (draw + save png)", render)
    timed("chrome trace", lambda: res.to_chrome_trace(out / "trace.json"))
    timed("gantt, 8-GPU subset", lambda: plt.close(res.plot_gantt(devices=range(8), window=(0, 0.02))))
    print(f"pictures in {out}/")


if __name__ == "__main__":
    main()
