"""Draw the schedule gallery of docs/schedules.md and print its tables.

Every registered schedule on the same synthetic example: 4 stages, 8 micro-batches,
forward 1 ms, backward 2 ms (of which W = 0.8 ms for zero-bubble schedules), 1 MiB
activations, direct network; schedules of two chunks per stage cut each stage in two.
Run: ``python docs/make_schedule_gallery.py`` (writes docs/img/schedules/<name>.png and
prints the ZB / GPipe tables as markdown).
"""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib.pyplot as plt

import clustersim as cs

HERE = Path(__file__).parent
OUT = HERE / "img" / "schedules"


def example(schedule: str) -> dict:
    v = cs.SCHEDULES[schedule].chunks or 2  # interleaved: v = 2; ZB-V, DualPipe(-V): their two chunks
    iterations = 2 if not cs.SCHEDULES[schedule].flush else 1
    return {
        "name": f"{schedule}: p=4, m=8"
        + (f", v={v}" if v > 1 else "")
        + (", 2 iterations" if iterations > 1 else ""),
        "cluster": {"nodes": 1, "gpus_per_node": 4, "intra_node": {"bandwidth": 1e12, "latency": 0.0}},
        "model": {
            "kind": "synthetic",
            "layers": 4 * v,
            "forward": 1e-3 / v,
            "backward": 2e-3 / v,
            "backward_weight": 0.8e-3 / v,
            "activation": 2**20,
            "params": 2**20,
        },
        "training": {"global_batch": 8},
        "parallel": {"pp": 4, "schedule": schedule, "virtual_stages": v},
        "simulation": {"network": "direct", "iterations": iterations},
    }


def gallery() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in sorted(cs.SCHEDULES):
        res = cs.simulate(example(name), progress=False)
        fig = res.plot_gantt(devices=[0, 1, 2, 3])
        fig.savefig(OUT / f"{name}.png", dpi=90, bbox_inches="tight")
        plt.close(fig)
        s = res.summary
        print(
            f"| `{name}` | {s['iteration_time_s'] * 1e3:.2f} | {s['bubble_fraction']:.3f} | "
            f"{s['peak_memory_gib'] * 1024:.0f} | {s['weight_staleness_max']} |"
        )


def zero_bubble_table() -> None:
    from tests.test_zero_bubble_paper import ROWS, bubble_rate

    print(
        "\n| model | m | 1F1B paper | ours | ZB-H1 paper | ours | ZB-H2 paper | ours | 1F1B-I paper | v=2 | v=3 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = list(csv.DictReader(open(HERE.parent / "tests" / "data" / "zero_bubble_schedules.csv")))
    for r in ROWS:
        inter = next(
            x
            for x in rows
            if x["model"] == r["model"]
            and x["num_microbatches"] == r["num_microbatches"]
            and x["schedule"] == "1F1B-I"
        )
        print(
            f"| {r['model']} | {r['num_microbatches']} | {r['bubble_rate_calc_table5']} | "
            f"{bubble_rate(r, '1f1b'):.4f} | {r['bubble_ZB-H1']} | {bubble_rate(r, 'zb_h1'):.4f} | "
            f"{r['bubble_ZB-H2']} | {bubble_rate(r, 'zb_h2'):.4f} | {inter['bubble_rate_calc_table5']} | "
            f"{bubble_rate(r, 'interleaved', 2):.4f} | {bubble_rate(r, 'interleaved', 3):.4f} |"
        )


def gpipe_table() -> None:
    from tests.test_schedules_gpipe_trend import ROWS, throughput

    paper = {
        (int(r["K_partitions"]), int(r["M_microbatches"])): r["normalized_throughput"]
        for r in ROWS
        if r["model"] == "AmoebaNet-D(18,256)"
    }
    base = throughput(2, 1)
    print("\n| K | M | AmoebaNet-D (GPipe) | ours |")
    print("|---|---|---|---|")
    for k in (2, 4, 8):
        for m in (1, 4, 32):
            print(f"| {k} | {m} | {paper[(k, m)]} | {throughput(k, m) / base:.2f} |")


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(HERE.parent))
    gallery()
    zero_bubble_table()
    gpipe_table()
