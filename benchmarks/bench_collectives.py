"""nccl-tests style sweep of one collective on a simulated preset cluster.

    python benchmarks/bench_collectives.py --preset dgx_a100 --nodes 2 --collective all_reduce
    python benchmarks/bench_collectives.py --preset dgx_h100 --plot busbw.png

Prints size, time, algbw and busbw from 1 MiB to 8 GiB (doubling) in the nccl-tests
table layout, using the packet fabric. Runtime stays sane because the packet chunk grows
with the message (:func:`clustersim.collectives.bench.chunk_size_for`: ~64 chunks per
ring message, never below 256 KiB), so every size costs about the same number of
events; ``--network analytical`` is faster still (no queueing inside the fabric).
"""

from __future__ import annotations

import argparse
import time

from clustersim.collectives import ALGORITHMS, KINDS
from clustersim.collectives.bench import measure, preset_cluster
from clustersim.hardware.presets import CLUSTER_PRESETS


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run the sweep, print the table, optionally plot busbw."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="dgx_a100", choices=sorted(CLUSTER_PRESETS))
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--collective", default="all_reduce", choices=[k for k in KINDS if k != "barrier"])
    ap.add_argument("--algorithm", default="auto", choices=["auto", *ALGORITHMS])
    ap.add_argument("--network", default="packet", choices=["packet", "analytical"])
    ap.add_argument("--min-bytes", type=int, default=1 << 20)
    ap.add_argument("--max-bytes", type=int, default=8 << 30)
    ap.add_argument("--plot", metavar="PATH", help="write a busbw-vs-size plot here")
    args = ap.parse_args(argv)

    cluster = preset_cluster(args.preset, args.nodes)
    n = args.nodes * cluster["gpus_per_node"]
    print(
        f"# {args.collective} on {args.preset} x{args.nodes} ({n} GPUs), {args.network} fabric, "
        f"algorithm {args.algorithm}"
    )
    print(f"# {'size':>12} {'time':>10} {'algbw':>8} {'busbw':>8}  algorithm")
    print(f"# {'(B)':>12} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}")
    rows, size, t0 = [], args.min_bytes, time.perf_counter()
    while size <= args.max_bytes:
        m = measure(cluster, args.collective, size, args.algorithm, args.network)
        rows.append(m)
        print(
            f"  {m.nbytes:>12} {m.time_s * 1e6:>10.1f} {m.algbw / 1e9:>8.2f} {m.busbw / 1e9:>8.2f}  {m.algorithm}",
            flush=True,
        )
        size *= 2
    print(f"# wall time {time.perf_counter() - t0:.1f} s")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot([r.nbytes for r in rows], [r.busbw / 1e9 for r in rows], marker="o")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"{args.collective}, {args.preset} x{args.nodes}")
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(args.plot)
        print(f"# plot written to {args.plot}")


if __name__ == "__main__":
    main()
